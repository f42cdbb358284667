"""Mean over the last dimension of `torch.rand` inputs: every answer is close to 0.5, a
weak input distribution for the weak-input hostile kernels (docs/hacks.md #17)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=-1)


batch_size = 16
dim = 4096


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
