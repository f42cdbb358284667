"""Matrix-vector multiplication: (M x K) @ (K x 1)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies an M x K matrix by a K x 1 column vector."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 256
K = 512


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
