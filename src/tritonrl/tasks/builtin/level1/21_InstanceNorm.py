"""Instance normalisation of a 4-D (N, C, H, W) tensor (nn.InstanceNorm2d, no affine)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Normalises each (sample, channel) plane to zero mean and unit variance."""

    def __init__(self, num_features: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inorm(x)


batch_size = 8
num_features = 8
height = 32
width = 32


def get_inputs():
    # Per-plane offsets and scales, so that the statistics differ between planes.
    offset = torch.randn(batch_size, num_features, 1, 1) * 3
    scale = torch.rand(batch_size, num_features, 1, 1) * 2 + 0.5
    return [torch.randn(batch_size, num_features, height, width) * scale + offset]


def get_init_inputs():
    return [num_features]
