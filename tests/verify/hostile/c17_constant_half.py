"""docs/hacks.md #17, weak-input exploit: the mean of uniform samples is "0.5".

Trick: every row of `torch.rand(16, 4096)` averages to 0.5 within a few thousandths,
so a kernel that writes the constant 0.5 passes a loose tolerance (1e-2) on the task's
own inputs at any seed, in no time. A per-dtype tolerance for float32 and inputs of
other signs and magnitudes refuse it.

Expect: task=tasks/2_RandMean.py static=none runtime=incorrect:tiny
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(y_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + value, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        fill_kernel[(triton.cdiv(y.numel(), 256),)](y, y.numel(), 0.5, BLOCK=256)
        return y
