"""ReLU on `torch.rand` inputs (all in [0, 1)): a task with a weak input distribution,
written for the weak-input hostile kernels (docs/hacks.md #17)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 32
dim = 512


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
