"""Honest: row softmax, one program per row, with `torch.empty` from the input's
shape, strides passed explicitly and a transposed-then-contiguous copy of the input
(views and `.contiguous()` are data movement, not compute).

Expect: task=builtin:level1/16_Softmax
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * stride_y + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.t().contiguous().t().contiguous()  # a round trip through a transposed layout
        rows, cols = x.shape
        y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(cols)
        softmax_kernel[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=block)
        return y
