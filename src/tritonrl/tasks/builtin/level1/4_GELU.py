"""GELU activation (exact, erf form) on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies GELU element-wise: 0.5 * x * (1 + erf(x / sqrt(2)))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Centred so that both signs appear.
    return [torch.randn(batch_size, dim) * 2]


def get_init_inputs():
    return []
