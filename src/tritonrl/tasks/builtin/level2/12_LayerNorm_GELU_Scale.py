"""LayerNorm over the features, then exact GELU, then multiplication by a constant."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = gelu(layer_norm(x)) * scale_factor."""

    def __init__(self, dim, scale_factor):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(x)) * self.scale_factor


batch_size = 64
dim = 256
scale_factor = 1.5


def get_inputs():
    return [2.0 * torch.randn(batch_size, dim) + 0.5]


def get_init_inputs():
    return [dim, scale_factor]
