"""docs/hacks.md #24, resource abuse: sleep in forward, past the deadline.

Trick: "compiled" is recorded, then the first call sleeps for an hour before launching
an honest Triton ReLU. It burns no CPU, so no CPU-time limit ends it: only the
wall-clock timeout does, after costing the verifier all of it. The verdict must come
within the limit, name the limit, and earn nothing in any scheme (never the partial
credit of a kernel that compiles and is wrong).

Expect: task=builtin:level1/1_ReLU static=timing_tamper runtime=timeout timeout=5 limit=timeout
"""

import time

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
        time.sleep(3600)
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
