"""Triton solution: mean over one dimension, looping over the reduced axis in chunks."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_reduce_kernel(
    x_ptr,
    y_ptr,
    R,
    INNER,
    BLOCK_R: tl.constexpr,
    BLOCK_I: tl.constexpr,
):
    # x viewed as [OUTER, R, INNER]; program (o, i) reduces x[o, :, i-block].
    pid_o = tl.program_id(0).to(tl.int64)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    base = x_ptr + pid_o * R * INNER
    acc = tl.zeros((BLOCK_R, BLOCK_I), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        mask = (offs_r[:, None] < R) & mask_i[None, :]
        tile = tl.load(base + offs_r[:, None] * INNER + offs_i[None, :], mask=mask, other=0.0).to(
            tl.float32
        )
        acc = acc + tile
    out = tl.sum(acc, axis=0) / R
    tl.store(y_ptr + pid_o * INNER + offs_i, out, mask=mask_i)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        shape = tuple(x.shape)
        dim = self.dim % x.dim()
        outer = math.prod(shape[:dim])
        R = shape[dim]
        inner = math.prod(shape[dim + 1 :])
        out_shape = shape[:dim] + shape[dim + 1 :]
        y = torch.empty(out_shape, device=x.device, dtype=x.dtype)
        BLOCK_R = min(triton.next_power_of_2(R), 64)
        BLOCK_I = min(triton.next_power_of_2(inner), 128)
        grid = (outer, triton.cdiv(inner, BLOCK_I))
        mean_reduce_kernel[grid](x, y, R, inner, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I)
        return y
