"""Sum reduction over one dimension (kept as size 1)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Sums x over `dim`, keeping the reduced dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 16
dim1 = 128
dim2 = 64
reduce_dim = 1


def get_inputs():
    # Per-column offsets so that the sums are far from zero and differ.
    return [torch.randn(batch_size, dim1, dim2) + torch.randn(batch_size, 1, dim2) * 2]


def get_init_inputs():
    return [reduce_dim]
