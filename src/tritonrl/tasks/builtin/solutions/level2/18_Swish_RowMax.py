"""Triton solution: Swish and the row maximum of BLOCK_M full rows in one pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_rowmax_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    row_ok = rm < M
    mask = row_ok[:, None] & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :], mask=mask, other=0.0)
    s = tl.where(mask, x * tl.sigmoid(x), float("-inf"))
    tl.store(out_ptr + rm, tl.max(s, axis=1), mask=row_ok)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, N = x.shape
        out = torch.empty((M,), device=x.device, dtype=x.dtype)
        BM = 16
        BN = triton.next_power_of_2(N)
        swish_rowmax_kernel[(triton.cdiv(M, BM),)](
            x, out, M, N, x.stride(0), BLOCK_M=BM, BLOCK_N=BN
        )
        return out
