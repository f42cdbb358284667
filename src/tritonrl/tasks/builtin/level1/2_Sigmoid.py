"""Sigmoid activation on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies sigmoid element-wise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Spread out so that both tails of the sigmoid are reached.
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return []
