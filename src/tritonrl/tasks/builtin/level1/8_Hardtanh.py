"""Hardtanh activation (clamp to [min_val, max_val])."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies Hardtanh element-wise."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


batch_size = 64
dim = 1024
min_val = -1.0
max_val = 1.0


def get_inputs():
    # Spread out so that both clamps and the linear part are hit.
    return [torch.randn(batch_size, dim) * 2]


def get_init_inputs():
    return [min_val, max_val]
