"""Square matrix multiplication C = A @ B."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies two square matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 128


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
