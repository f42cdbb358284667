"""1-D average pooling with zero padding counted in the average (nn.AvgPool1d)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies nn.AvgPool1d over the last dimension of an (N, C, L) tensor."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 16
features = 32
sequence_length = 128
kernel_size = 4
stride = 2
padding = 1


def get_inputs():
    # Offset per channel so that padded (zero) positions change the edge averages.
    return [torch.randn(batch_size, features, sequence_length) + torch.randn(1, features, 1) * 2]


def get_init_inputs():
    return [kernel_size, stride, padding]
