"""HardSigmoid activation on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies HardSigmoid element-wise: clamp(x / 6 + 1 / 2, 0, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardsigmoid(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Wide enough to reach both flat parts (|x| > 3) and the linear part.
    return [torch.randn(batch_size, dim) * 4]


def get_init_inputs():
    return []
