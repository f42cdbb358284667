"""Triton solution: GEMM over full rows with row-wise L2 normalisation in the epilogue."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_l2norm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    eps,
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
    # Padded columns hold 0 (masked loads), so they add nothing to the norm.
    norm = tl.sqrt(tl.sum(acc * acc, axis=1))
    out = acc / tl.maximum(norm, eps)[:, None]
    mask = row_ok[:, None] & col_ok[None, :]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        BM, BK = 32, 32
        BN = max(16, triton.next_power_of_2(N))
        matmul_l2norm_kernel[(triton.cdiv(M, BM),)](
            x,
            w,
            y,
            M,
            N,
            K,
            x.stride(0),
            x.stride(1),
            w.stride(0),
            w.stride(1),
            y.stride(0),
            1e-12,
            BLOCK_M=BM,
            BLOCK_N=BN,
            BLOCK_K=BK,
        )
        return y
