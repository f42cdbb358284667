"""RMS normalisation over the feature dimension (dim 1) of a 3-D tensor, no affine."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """x / sqrt(mean(x ** 2, dim=1) + eps)."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + self.eps)
        return x / rms


batch_size = 16
features = 64
seq_len = 64


def get_inputs():
    # Per-position scales, so that the RMS differs across positions.
    scale = torch.rand(batch_size, 1, seq_len) * 3 + 0.2
    return [torch.randn(batch_size, features, seq_len) * scale]


def get_init_inputs():
    return [features]
