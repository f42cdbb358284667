"""Residual add followed by LayerNorm (the post-norm transformer block epilogue)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = layer_norm(x + residual)."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


batch_size = 64
dim = 192


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim) + 1.0]


def get_init_inputs():
    return [dim]
