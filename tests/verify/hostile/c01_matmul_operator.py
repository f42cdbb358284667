"""docs/hacks.md #1, library fallback: the matrix product is the `@` operator.

Trick: `a @ b` dispatches to BLAS; a Triton copy of the result is launched so that the
returned tensor even comes out of a Triton kernel. A harness that checks launches or
that the output was written by Triton is satisfied; the work was not done in Triton.

Expect: task=builtin:level1/22_Matmul_Square static=torch_compute runtime=torch_fallback
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
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        c = (A @ B).contiguous()
        out = torch.empty_like(c)
        copy_kernel[(triton.cdiv(c.numel(), 1024),)](c, out, c.numel(), BLOCK=1024)
        return out
