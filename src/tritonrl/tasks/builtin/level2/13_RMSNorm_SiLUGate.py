"""RMSNorm of x with a learned weight, gated by SiLU of a second input."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight * silu(gate)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight * F.silu(gate)


batch_size = 64
dim = 256
eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, eps]
