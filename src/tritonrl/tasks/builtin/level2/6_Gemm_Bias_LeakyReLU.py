"""Linear layer (GEMM + bias) followed by LeakyReLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = leaky_relu(x @ W^T + b, negative_slope)."""

    def __init__(self, in_features, out_features, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.linear(x), negative_slope=self.negative_slope)


batch_size = 64
in_features = 128
out_features = 128
negative_slope = 0.2


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, negative_slope]
