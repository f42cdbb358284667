"""Mean reduction over one dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Averages x over `dim`."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


batch_size = 16
dim1 = 128
dim2 = 64
reduce_dim = 1


def get_inputs():
    # Per-column offsets so that the means are not all ~0.
    return [torch.randn(batch_size, dim1, dim2) + torch.randn(batch_size, 1, dim2) * 2]


def get_init_inputs():
    return [reduce_dim]
