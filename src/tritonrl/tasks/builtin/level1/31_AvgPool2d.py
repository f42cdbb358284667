"""2-D average pooling with zero padding counted in the average (nn.AvgPool2d)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies nn.AvgPool2d to an (N, C, H, W) tensor."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

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
    # Offset per channel so that padded (zero) positions change the edge averages.
    offset = torch.randn(1, channels, 1, 1) * 2
    return [torch.randn(batch_size, channels, height, width) + offset]


def get_init_inputs():
    return [kernel_size, stride, padding]
