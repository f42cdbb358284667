"""docs/hacks.md #1, library fallback, hidden from type inference.

Trick: the input is put in a dict and the ReLU is written as `v * (v > 0)` on the value
read back from it, through a bound method held under an innocent name. An AST check
that infers which names hold tensors loses track of the tensor; the multiply and the
comparison are still torch ops executed inside forward.

Expect: task=builtin:level1/1_ReLU static=none runtime=torch_fallback
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        box = {"v": x}
        y = box["v"] * (box["v"] > 0)
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](y, out, x.numel(), BLOCK=1024)
        return out
