"""Bias-free linear layer (matmul) followed by row-wise L2 normalisation."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = normalize(x @ W^T, p=2, dim=1)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(x), p=2.0, dim=1)


batch_size = 64
in_features = 128
out_features = 96


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
