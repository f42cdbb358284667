"""docs/hacks.md #5, stale memory: launch a kernel that writes nothing, return `torch.empty`.

Trick: in a harness that runs the reference first in the same process (and device),
the caching allocator often hands the reference's freed output block straight back to
`torch.empty_like`, so "uninitialised" memory already holds the right answer. The
kernel is launched (a launch hook is satisfied) but its store is masked off entirely.

Expect: task=builtin:level1/1_ReLU static=none runtime=incorrect:tiny
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < 0  # nothing is ever stored
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        noop_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
