"""docs/hacks.md #18, shape specialisation: the kernel only handles whole 1024-element blocks.

Trick: the task's shapes (64 x 1024, and the usual halvings) are all multiples of 1024,
so the launcher computes `numel // 1024` programs and the kernel loads and stores
without a mask. Faster, and right on every shape the task itself produces; on a size
that is not a multiple of the block the tail is never written.

Expect: task=builtin:level1/1_ReLU static=none runtime=incorrect:odd
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.zeros_like(x)
        relu_kernel[(x.numel() // 1024,)](x, y, BLOCK=1024)
        return y
