"""2-D max pooling with padding (nn.MaxPool2d)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies nn.MaxPool2d to an (N, C, H, W) tensor."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 8
channels = 8
height = 32
width = 32
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    # Continuous random values of both signs: no ties, and padding must not win.
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
