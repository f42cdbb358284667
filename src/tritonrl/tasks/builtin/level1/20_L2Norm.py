"""L2 normalisation of each row of a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """x / ||x||_2 along dim 1."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


batch_size = 64
dim = 1024


def get_inputs():
    # Per-row scales, so that the norms differ.
    return [torch.randn(batch_size, dim) * (torch.rand(batch_size, 1) * 4 + 0.5)]


def get_init_inputs():
    return []
