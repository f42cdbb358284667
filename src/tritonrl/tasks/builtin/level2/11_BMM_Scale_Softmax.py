"""Attention scores: batched Q @ K^T, scaled by 1/sqrt(d), then softmax over the keys."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = softmax(bmm(q, k^T) / sqrt(d), dim=-1) for q, k of shape (B, L, d)."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) * (q.shape[-1] ** -0.5)
        return torch.softmax(scores, dim=-1)


batch_size = 8
seq_len = 64
qk_dim = 32


def get_inputs():
    return [torch.randn(batch_size, seq_len, qk_dim), torch.randn(batch_size, seq_len, qk_dim)]


def get_init_inputs():
    return []
