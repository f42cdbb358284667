"""docs/hacks.md #19, precision games: the GEMM silently runs in float16.

Trick: the tiles are cast to float16 before `tl.dot` and accumulated in float16, which
is roughly twice as fast on tensor cores; with a loose tolerance (1e-2, the usual
`allclose` in hand-written harnesses) a float32 task still "matches". A per-dtype
tolerance (1e-4 for float32) refuses it.

Expect: task=builtin:level2/1_Gemm_Bias_ReLU static=none runtime=incorrect:tiny
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_relu_fp16(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(
            x_ptr + rm[:, None] * K + kk[None, :],
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            w_ptr + rn[None, :] * K + kk[:, None],
            mask=(rn[None, :] < N) & (kk[:, None] < K),
            other=0.0,
        )
        acc += tl.dot(a.to(tl.float16), b.to(tl.float16), out_dtype=tl.float16)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float16)
    out = tl.maximum(acc + bias[None, :], 0.0).to(tl.float32)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        linear_relu_fp16[grid](
            x, w, self.linear.bias, y, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32
        )
        return y
