"""Triton solution: the residual add and the LayerNorm of BLOCK_M full rows in one pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_layernorm_kernel(
    x_ptr,
    r_ptr,
    g_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    stride_xm,
    stride_rm,
    stride_ym,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    col_ok = rn < N
    mask = (rm[:, None] < M) & col_ok[None, :]
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :], mask=mask, other=0.0)
    r = tl.load(r_ptr + rm[:, None] * stride_rm + rn[None, :], mask=mask, other=0.0)
    h = x + r
    mean = tl.sum(h, axis=1) / N
    d = tl.where(col_ok[None, :], h - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / N + eps)
    g = tl.load(g_ptr + rn, mask=col_ok, other=0.0)
    b = tl.load(b_ptr + rn, mask=col_ok, other=0.0)
    y = d * rstd[:, None] * g[None, :] + b[None, :]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        residual = residual.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        BM = 16
        BN = triton.next_power_of_2(N)
        add_layernorm_kernel[(triton.cdiv(M, BM),)](
            x,
            residual,
            self.norm.weight,
            self.norm.bias,
            y,
            M,
            N,
            x.stride(0),
            residual.stride(0),
            y.stride(0),
            float(self.norm.eps),
            BLOCK_M=BM,
            BLOCK_N=BN,
        )
        return y
