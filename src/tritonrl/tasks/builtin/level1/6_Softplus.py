"""Softplus activation on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies softplus element-wise: log(1 + exp(x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Wide enough to reach both the linear and the vanishing tails.
    return [torch.randn(batch_size, dim) * 4]


def get_init_inputs():
    return []
