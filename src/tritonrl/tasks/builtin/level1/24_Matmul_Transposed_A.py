"""Matrix multiplication with the first operand transposed, C = A.T @ B."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A is K x M, B is K x N; returns A.T @ B (M x N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.T, B)


M = 128
K = 96
N = 64


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
