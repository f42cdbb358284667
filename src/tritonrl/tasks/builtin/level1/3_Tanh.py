"""Tanh activation on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies tanh element-wise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Both signs and the saturated regions appear.
    return [torch.randn(batch_size, dim) * 2]


def get_init_inputs():
    return []
