"""Triton solution: GEMM over full rows; bias, tanh and the row mean fused into the epilogue."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_tanh_mean_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # One program owns BLOCK_M full rows (BLOCK_N >= N), so the row-wise epilogue needs
    # no second pass over memory.
    pid_m = tl.program_id(0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    row_ok = rm < M
    col_ok = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(
            x_ptr + rm[:, None] * stride_xm + kk[None, :] * stride_xk,
            mask=row_ok[:, None] & (kk[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            w_ptr + rn[None, :] * stride_wn + kk[:, None] * stride_wk,
            mask=col_ok[None, :] & (kk[:, None] < K),
            other=0.0,
        )
        acc += tl.dot(x, w, input_precision="ieee")
    b = tl.load(b_ptr + rn, mask=col_ok, other=0.0)
    z = acc + b[None, :]
    # tanh(z) = sign(z) * (1 - e^{-2|z|}) / (1 + e^{-2|z|}), stable for any z.
    t = tl.exp(-2.0 * tl.abs(z))
    th = (1.0 - t) / (1.0 + t)
    th = tl.where(z >= 0.0, th, -th)
    th = tl.where(col_ok[None, :], th, 0.0)
    mean = tl.sum(th, axis=1) / N
    tl.store(y_ptr + rm * stride_ym, mean, mask=row_ok)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M,), device=x.device, dtype=x.dtype)
        BM, BK = 32, 32
        BN = max(16, triton.next_power_of_2(N))
        linear_tanh_mean_kernel[(triton.cdiv(M, BM),)](
            x,
            w,
            self.linear.bias,
            y,
            M,
            N,
            K,
            x.stride(0),
            x.stride(1),
            w.stride(0),
            w.stride(1),
            y.stride(0),
            BLOCK_M=BM,
            BLOCK_N=BN,
            BLOCK_K=BK,
        )
        return y
