"""Triton solution: RMSNorm over dim 1, a strided reduction done in two chunked passes."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(
    x_ptr,
    y_ptr,
    F,
    INNER,
    eps,
    BLOCK_F: tl.constexpr,
    BLOCK_I: tl.constexpr,
):
    # x viewed as [B, F, INNER]; program (b, i) normalises x[b, :, i-block].
    pid_b = tl.program_id(0).to(tl.int64)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    base = pid_b * F * INNER
    sq = tl.zeros((BLOCK_F, BLOCK_I), dtype=tl.float32)
    for f0 in range(0, F, BLOCK_F):
        offs_f = f0 + tl.arange(0, BLOCK_F)
        mask = (offs_f[:, None] < F) & mask_i[None, :]
        offs = base + offs_f[:, None] * INNER + offs_i[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        sq += x * x
    rrms = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / F + eps)
    for f0 in range(0, F, BLOCK_F):
        offs_f = f0 + tl.arange(0, BLOCK_F)
        mask = (offs_f[:, None] < F) & mask_i[None, :]
        offs = base + offs_f[:, None] * INNER + offs_i[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + offs, x * rrms[None, :], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, F = x.shape[0], x.shape[1]
        inner = x.numel() // (B * F)
        y = torch.empty_like(x)
        BLOCK_F = min(triton.next_power_of_2(F), 64)
        BLOCK_I = min(triton.next_power_of_2(inner), 128)
        grid = (B, triton.cdiv(inner, BLOCK_I))
        rms_norm_kernel[grid](x, y, F, inner, self.eps, BLOCK_F=BLOCK_F, BLOCK_I=BLOCK_I)
        return y
