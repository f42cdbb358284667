"""Batched matrix multiplication, torch.bmm of (b, m, k) and (b, k, n)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies each pair of matrices in the batch."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 8
m = 64
k = 128
n = 64


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
