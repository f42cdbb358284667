"""Linear layer, batch normalisation with the batch's own statistics, then ReLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = relu(batch_norm(x @ W^T + b)) using the mean and biased variance of each
    feature over the batch (training-mode BatchNorm, no running statistics), whatever
    the module's train/eval mode."""

    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.linear(x)
        z = F.batch_norm(z, None, None, self.weight, self.bias, training=True, eps=self.eps)
        return torch.relu(z)


batch_size = 64
in_features = 128
out_features = 96
eps = 1e-5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps]
