"""1-D convolution (stride 1, 'same' padding, with bias) followed by ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(conv1d(x, W, b, padding=kernel_size // 2)) for x of shape (B, C_in, L)."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


batch_size = 16
in_channels = 16
out_channels = 32
length = 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
