"""Linear layer (GEMM + bias) followed by LayerNorm over the features."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = layer_norm(x @ W^T + b) with learnable weight and bias."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


batch_size = 64
in_features = 128
out_features = 128


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
