"""Triton solution: log-softmax, x - max - log(sum(exp(x - max))), several rows per program."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(
    x_ptr,
    y_ptr,
    n_rows,
    n_cols,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    row_max = tl.max(x, axis=1)
    row_max = tl.where(rows < n_rows, row_max, 0.0)
    shifted = x - row_max[:, None]
    e = tl.where(mask, tl.exp(shifted), 0.0)
    denom = tl.sum(e, axis=1)
    denom = tl.where(rows < n_rows, denom, 1.0)
    tl.store(y_ptr + offs, shifted - tl.log(denom)[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Work on rows along the softmax dimension (a no-op view when it is the last one).
        xt = x.movedim(self.dim, -1).contiguous()
        n_cols = xt.shape[-1]
        n_rows = xt.numel() // n_cols
        y = torch.empty_like(xt)
        BLOCK_N = triton.next_power_of_2(n_cols)
        BLOCK_M = max(1, min(16, 4096 // BLOCK_N))
        grid = (triton.cdiv(n_rows, BLOCK_M),)
        log_softmax_kernel[grid](xt, y, n_rows, n_cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return y.movedim(-1, self.dim)
