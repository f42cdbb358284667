"""Linear layer, scaled by a constant, plus a residual input."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = (x @ W^T + b) * scale_factor + residual."""

    def __init__(self, in_features, out_features, scale_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale_factor + residual


batch_size = 64
in_features = 128
out_features = 96
scale_factor = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features, scale_factor]
