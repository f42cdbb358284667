"""docs/hacks.md #24, resource abuse: an infinite loop in forward, after a clean import.

Trick: "compiled" is recorded, then the first call never returns (the kernel launch is
placed after a loop that never ends). The verdict must still come, within the
configured wall-clock limit, and the process tree must be gone afterwards.

Expect: task=builtin:level1/1_ReLU static=none runtime=timeout timeout=10 limit=timeout
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = 1
        while k:
            k = (k * 3 + 1) % 1000003 or 1
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
