"""Softmax over the last dimension of a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies softmax along dim 1."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 64
dim = 1024


def get_inputs():
    # Scaled so that the rows are far from uniform.
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return []
