"""Mean squared error: element-wise difference, square, then the mean of everything."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = mean((predictions - targets) ** 2), a 0-dim tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


batch_size = 128
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim), 0.5 * torch.randn(batch_size, dim) + 0.25]


def get_init_inputs():
    return []
