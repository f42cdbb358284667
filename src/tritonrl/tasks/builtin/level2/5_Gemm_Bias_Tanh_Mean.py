"""Linear layer (GEMM + bias), tanh, then the mean over the feature dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i] = mean_j tanh(x @ W^T + b)[i, j]."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x)).mean(dim=1)


batch_size = 64
in_features = 128
out_features = 96


def get_inputs():
    return [2.0 * torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
