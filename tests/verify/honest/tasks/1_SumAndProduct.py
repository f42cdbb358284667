"""Two outputs: the element-wise sum and product of two tensors (a task with a tuple
output, for the honest kernels)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a + b, a * b


size = 4096


def get_inputs():
    return [torch.randn(size), torch.randn(size)]


def get_init_inputs():
    return []
