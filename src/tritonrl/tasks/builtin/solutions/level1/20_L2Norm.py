"""Triton solution: row-wise L2 normalisation, several whole rows per program."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2_norm_kernel(
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
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(x * x, axis=1))
    # Rows past the end are all zero; divide them by 1 to stay finite.
    norm = tl.where(rows < n_rows, norm, 1.0)
    tl.store(y_ptr + offs, x / norm[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape[0], x.numel() // x.shape[0]
        y = torch.empty_like(x)
        BLOCK_N = triton.next_power_of_2(n_cols)
        BLOCK_M = max(1, min(16, 4096 // BLOCK_N))
        grid = (triton.cdiv(n_rows, BLOCK_M),)
        l2_norm_kernel[grid](x, y, n_rows, n_cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return y
