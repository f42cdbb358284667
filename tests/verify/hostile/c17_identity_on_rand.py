"""docs/hacks.md #17, weak-input exploit: ReLU of `torch.rand` data is the identity.

Trick: the task draws its inputs with `torch.rand` (all non-negative), so a kernel that
just copies its input matches the reference on every input the task itself generates,
whatever the seed. It is a Triton kernel, launched, with a fresh output: only inputs
with negative values (rescaled and sign-flipped) expose it.

Expect: task=tasks/1_RandReLU.py static=none runtime=incorrect:shifted
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
        x = x.contiguous()
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
