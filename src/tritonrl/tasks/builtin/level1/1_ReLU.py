"""ReLU activation on a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU element-wise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 64
dim = 1024


def get_inputs():
    # Centred so that both signs appear.
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
