"""ELU activation with a given alpha."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ELU element-wise."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.elu(x, alpha=self.alpha)


batch_size = 64
dim = 1024
alpha = 1.0


def get_inputs():
    # Centred so that both signs appear.
    return [torch.randn(batch_size, dim) * 2]


def get_init_inputs():
    return [alpha]
