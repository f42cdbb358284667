"""SiLU (swish) activation on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies SiLU element-wise: x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Centred so that both signs appear.
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return []
