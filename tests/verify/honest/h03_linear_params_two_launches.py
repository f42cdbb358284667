"""Honest: Gemm + bias + ReLU with the weights held in an `nn.Linear` (so the
reference's parameters load into it), computed by two launches: a tiled GEMM, then a
bias + ReLU epilogue kernel, each behind a small helper function.

Expect: task=builtin:level2/1_Gemm_Bias_ReLU
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(
    a_ptr,
    w_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    swn,
    swk,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * sam + kk[None, :] * sak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            w_ptr + rn[None, :] * swn + kk[:, None] * swk,
            mask=(rn[None, :] < N) & (kk[:, None] < K),
            other=0.0,
        )
        acc += tl.dot(a, w, input_precision="ieee")
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc,
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def bias_relu_kernel(c_ptr, b_ptr, y_ptr, N, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    c = tl.load(c_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(c + b, 0.0), mask=mask)


def _gemm(x, w):
    M, K = x.shape
    N = w.shape[0]
    c = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    gemm_kernel[grid](
        x,
        w,
        c,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        c.stride(0),
        c.stride(1),
        BM=32,
        BN=32,
        BK=32,
    )
    return c


def _bias_relu(c, b):
    y = torch.empty_like(c)
    total = c.numel()
    bias_relu_kernel[(triton.cdiv(total, 1024),)](c, b, y, c.shape[1], total, BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _bias_relu(_gemm(x, self.linear.weight), self.linear.bias)
