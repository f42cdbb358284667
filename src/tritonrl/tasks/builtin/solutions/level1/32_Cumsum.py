"""Triton solution: row-wise inclusive scan with tl.cumsum, several whole rows per program."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(
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
    # Whole rows in one tile; masked-out tail entries are 0 and come after the real ones.
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, tl.cumsum(x, axis=1), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Scan along the last axis (a no-op view when `dim` is already the last one).
        xt = x.movedim(self.dim, -1).contiguous()
        n_cols = xt.shape[-1]
        n_rows = xt.numel() // n_cols
        y = torch.empty_like(xt)
        BLOCK_N = triton.next_power_of_2(n_cols)
        BLOCK_M = max(1, min(16, 4096 // BLOCK_N))
        grid = (triton.cdiv(n_rows, BLOCK_M),)
        cumsum_kernel[grid](xt, y, n_rows, n_cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return y.movedim(-1, self.dim)
