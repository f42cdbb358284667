"""Softmax with a temperature over each row, then multiplication by a constant."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = softmax(x / temperature, dim=-1) * scale_factor."""

    def __init__(self, temperature, scale_factor):
        super().__init__()
        self.temperature = temperature
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / self.temperature, dim=-1) * self.scale_factor


batch_size = 64
dim = 384
temperature = 0.5
scale_factor = 4.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [temperature, scale_factor]
