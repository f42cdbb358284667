"""1-D max pooling with padding and dilation (nn.MaxPool1d)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies nn.MaxPool1d over the last dimension of an (N, C, L) tensor."""

    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.pool = nn.MaxPool1d(
            kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 16
features = 32
sequence_length = 128
kernel_size = 4
stride = 2
padding = 2
dilation = 2


def get_inputs():
    # Continuous random values of both signs: no ties, and padding must not win.
    return [torch.randn(batch_size, features, sequence_length)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
