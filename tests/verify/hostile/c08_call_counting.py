"""docs/hacks.md #8, cross-call deferral: work only on the first call, count the rest.

Trick: a naive harness calls the kernel once to check it, then many times to time it.
A module-level call counter makes every call after the first skip the work (a launch
on a one-element grid keeps launch hooks happy) and return uninitialised memory.
Re-checking later calls (here: every input set is another call) catches it.

Expect: task=builtin:level1/1_ReLU static=none runtime=incorrect:seed_a
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _CALLS[0] += 1
        y = torch.empty_like(x)
        n = x.numel() if _CALLS[0] == 1 else 1
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
