"""Linear layer (GEMM + bias) followed by clamping to a range."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = clamp(x @ W^T + b, clamp_min, clamp_max)."""

    def __init__(self, in_features, out_features, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.linear(x), min=self.clamp_min, max=self.clamp_max)


batch_size = 64
in_features = 128
out_features = 64
clamp_min = -0.5
clamp_max = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, clamp_min, clamp_max]
