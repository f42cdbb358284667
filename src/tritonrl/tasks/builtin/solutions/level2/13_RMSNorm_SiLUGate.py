"""Triton solution: RMS of BLOCK_M full rows, weight and SiLU gate applied in one pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_silu_gate_kernel(
    x_ptr,
    g_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    stride_xm,
    stride_gm,
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
    g = tl.load(g_ptr + rm[:, None] * stride_gm + rn[None, :], mask=mask, other=0.0)
    w = tl.load(w_ptr + rn, mask=col_ok, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None] * w[None, :] * (g * tl.sigmoid(g))
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        gate = gate.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        BM = 16
        BN = triton.next_power_of_2(N)
        rmsnorm_silu_gate_kernel[(triton.cdiv(M, BM),)](
            x,
            gate,
            self.weight,
            y,
            M,
            N,
            x.stride(0),
            gate.stride(0),
            y.stride(0),
            float(self.eps),
            BLOCK_M=BM,
            BLOCK_N=BN,
        )
        return y
