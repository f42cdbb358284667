"""Linear layer (GEMM + bias) followed by log-sum-exp over each row."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = logsumexp(x @ W^T + b, dim=1, keepdim=True)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.linear(x), dim=1, keepdim=True)


batch_size = 64
in_features = 128
out_features = 96


def get_inputs():
    return [3.0 * torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
