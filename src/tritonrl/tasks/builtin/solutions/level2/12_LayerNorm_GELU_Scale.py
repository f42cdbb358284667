"""Triton solution: LayerNorm of BLOCK_M full rows, then GELU and the scale, one pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_gelu_scale_kernel(
    x_ptr,
    g_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    stride_xm,
    stride_ym,
    eps,
    scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    col_ok = rn < N
    mask = (rm[:, None] < M) & col_ok[None, :]
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :], mask=mask, other=0.0)
    mean = tl.sum(x, axis=1) / N
    d = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
    var = tl.sum(d * d, axis=1) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    g = tl.load(g_ptr + rn, mask=col_ok, other=0.0)
    b = tl.load(b_ptr + rn, mask=col_ok, other=0.0)
    z = d * rstd[:, None] * g[None, :] + b[None, :]
    y = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476)) * scale
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, scale_factor):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        BM = 16
        BN = triton.next_power_of_2(N)
        layernorm_gelu_scale_kernel[(triton.cdiv(M, BM),)](
            x,
            self.norm.weight,
            self.norm.bias,
            y,
            M,
            N,
            x.stride(0),
            y.stride(0),
            float(self.norm.eps),
            float(self.scale_factor),
            BLOCK_M=BM,
            BLOCK_N=BN,
        )
        return y
