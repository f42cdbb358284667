"""Layer normalisation over the last dimension, with learnable weight and bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies nn.LayerNorm over the last `hidden` features."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
seq_len = 32
hidden = 128


def get_inputs():
    # Per-row offsets and scales, so that the mean and variance both matter.
    offset = torch.randn(batch_size, seq_len, 1) * 3
    scale = torch.rand(batch_size, seq_len, 1) * 2 + 0.5
    return [torch.randn(batch_size, seq_len, hidden) * scale + offset]


def get_init_inputs():
    return [hidden]
