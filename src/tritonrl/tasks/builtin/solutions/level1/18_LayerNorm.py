"""Triton solution: LayerNorm, several whole rows per program, affine from nn.LayerNorm."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    n_rows,
    n_cols,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    offs = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    xc = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        # Same parameters as the reference; the kernel reads ln.weight / ln.bias.
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.ln.weight.contiguous()
        b = self.ln.bias.contiguous()
        n_cols = w.numel()
        n_rows = x.numel() // n_cols
        y = torch.empty_like(x)
        BLOCK_N = triton.next_power_of_2(n_cols)
        BLOCK_M = max(1, min(32, 4096 // BLOCK_N))
        grid = (triton.cdiv(n_rows, BLOCK_M),)
        layer_norm_kernel[grid](
            x, w, b, y, n_rows, n_cols, self.ln.eps, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N
        )
        return y
