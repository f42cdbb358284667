"""Max reduction over one dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Takes the maximum of x over `dim`."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim)[0]


batch_size = 16
dim1 = 128
dim2 = 64
reduce_dim = 1


def get_inputs():
    # Continuous random values: no ties.
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
