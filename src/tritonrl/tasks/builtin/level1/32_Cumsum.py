"""Cumulative sum (inclusive prefix sum) along one dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Returns torch.cumsum(x, dim)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 64
input_size = 512
scan_dim = 1


def get_inputs():
    # Positive drift per row so that the running sums grow and differ between rows.
    return [torch.randn(batch_size, input_size) + torch.rand(batch_size, 1)]


def get_init_inputs():
    return [scan_dim]
