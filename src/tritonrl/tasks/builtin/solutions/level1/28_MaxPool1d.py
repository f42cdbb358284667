"""Triton solution: MaxPool1d over flattened outputs, padding read as -inf."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def max_pool1d_kernel(
    x_ptr,
    y_ptr,
    n_out,
    L,
    L_out,
    KERNEL_SIZE: tl.constexpr,
    STRIDE: tl.constexpr,
    PADDING: tl.constexpr,
    DILATION: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    row = offs // L_out  # flattened (n, c)
    o = offs % L_out
    acc = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for k in tl.static_range(KERNEL_SIZE):
        pos = o * STRIDE - PADDING + k * DILATION
        valid = mask & (pos >= 0) & (pos < L)
        v = tl.load(x_ptr + row.to(tl.int64) * L + pos, mask=valid, other=float("-inf"))
        acc = tl.maximum(acc, v.to(tl.float32))
    tl.store(y_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N, C, L = x.shape
        k, s, p, d = self.kernel_size, self.stride, self.padding, self.dilation
        L_out = (L + 2 * p - d * (k - 1) - 1) // s + 1
        y = torch.empty((N, C, L_out), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        BLOCK = 1024
        max_pool1d_kernel[(triton.cdiv(n_out, BLOCK),)](
            x,
            y,
            n_out,
            L,
            L_out,
            KERNEL_SIZE=k,
            STRIDE=s,
            PADDING=p,
            DILATION=d,
            BLOCK=BLOCK,
        )
        return y
