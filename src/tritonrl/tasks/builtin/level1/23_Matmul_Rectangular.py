"""Rectangular matrix multiplication C = A @ B (M x K times K x N)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies an M x K matrix by a K x N matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 128
K = 256
N = 64


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
