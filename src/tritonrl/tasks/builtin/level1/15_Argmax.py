"""Argmax over one dimension (int64 indices)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Returns the index of the maximum of x along `dim`."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


batch_size = 16
dim1 = 128
dim2 = 64
reduce_dim = 1


def get_inputs():
    # Continuous random values: no ties.
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
