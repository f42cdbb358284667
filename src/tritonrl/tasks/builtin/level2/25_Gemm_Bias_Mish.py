"""Linear layer (GEMM + bias) followed by Mish."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = mish(x @ W^T + b) = z * tanh(softplus(z))."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(self.linear(x))


batch_size = 64
in_features = 128
out_features = 96


def get_inputs():
    return [2.0 * torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
