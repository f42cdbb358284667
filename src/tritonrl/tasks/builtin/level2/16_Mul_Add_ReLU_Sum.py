"""Element-wise multiply-add, ReLU, then a sum over each row."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i] = sum_j relu(x * y + z)[i, j]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * y + z).sum(dim=1)


batch_size = 64
dim = 256


def get_inputs():
    return [
        torch.randn(batch_size, dim),
        torch.randn(batch_size, dim),
        torch.randn(batch_size, dim),
    ]


def get_init_inputs():
    return []
