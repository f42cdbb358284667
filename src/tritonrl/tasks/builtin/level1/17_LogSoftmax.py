"""LogSoftmax over one dimension of a 2-D batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies log_softmax along `dim`."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


batch_size = 64
dim = 1024
softmax_dim = 1


def get_inputs():
    # Scaled so that the rows are far from uniform.
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return [softmax_dim]
