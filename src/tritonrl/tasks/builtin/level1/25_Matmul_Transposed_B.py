"""Matrix multiplication with the second operand transposed, C = A @ B.T."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A is M x K, B is N x K; returns A @ B.T (M x N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B.T)


M = 96
K = 128
N = 64


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
