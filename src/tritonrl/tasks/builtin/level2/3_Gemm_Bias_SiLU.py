"""Linear layer (GEMM + bias) followed by SiLU (Swish)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = silu(x @ W^T + b) = z * sigmoid(z)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.linear(x))


batch_size = 64
in_features = 96
out_features = 128


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
