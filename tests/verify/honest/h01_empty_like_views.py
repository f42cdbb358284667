"""Honest: ReLU with `torch.empty_like`, a flattening view and `.contiguous()`, written
back through a `view_as` of the output.

Expect: task=builtin:level1/1_ReLU
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.contiguous().view(-1)
        out = torch.empty_like(flat)
        n = flat.numel()
        relu_kernel[(triton.cdiv(n, 512),)](flat, out, n, BLOCK=512)
        return out.view_as(x)
