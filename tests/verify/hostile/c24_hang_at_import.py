"""docs/hacks.md #24, resource abuse: an infinite loop at import.

Trick: a harness that imports the candidate in its own process (or waits on a child
without a deadline) never gets a verdict, and a training run stalls on one sample. The
loop does no I/O and catches every exception, so only a wall-clock kill of the whole
process tree ends it.

Expect: task=builtin:level1/1_ReLU static=none runtime=timeout timeout=10 limit=timeout
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _spin():
    n = 0
    while True:
        try:
            n = (n * 31 + 7) % 1000003
        except BaseException:  # noqa: BLE001 - not even KeyboardInterrupt stops it
            continue


_spin()


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
