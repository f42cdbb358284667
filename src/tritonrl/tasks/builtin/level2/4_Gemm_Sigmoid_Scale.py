"""Linear layer followed by sigmoid and multiplication by a constant factor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sigmoid(x @ W^T + b) * scale_factor."""

    def __init__(self, in_features, out_features, scale_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(x)) * self.scale_factor


batch_size = 32
in_features = 256
out_features = 128
scale_factor = 2.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale_factor]
