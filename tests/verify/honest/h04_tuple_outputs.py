"""Honest: one kernel, two outputs, returned as a tuple.

Expect: task=tasks/1_SumAndProduct.py
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_prod_kernel(a_ptr, b_ptr, s_ptr, p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(s_ptr + offs, a + b, mask=mask)
    tl.store(p_ptr + offs, a * b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        a, b = a.contiguous(), b.contiguous()
        s = torch.empty_like(a)
        p = torch.empty_like(a)
        n = a.numel()
        sum_prod_kernel[(triton.cdiv(n, 1024),)](a, b, s, p, n, BLOCK=1024)
        return s, p
