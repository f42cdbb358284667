"""LeakyReLU activation with a given negative slope."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies LeakyReLU element-wise."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 64
dim = 1024
negative_slope = 0.01


def get_inputs():
    # Centred so that both signs appear.
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]
