"""docs/hacks.md #24, resource abuse: giant output.

Trick: the candidate writes 64 MiB to stdout and stderr at import and again in forward
(a harness that buffers the child's output in memory, or parses it, chokes on it; one
that reads it only after the child exits deadlocks on a full pipe), then returns
uninitialised memory. The verdict must come promptly and the caller's memory stay
bounded.

Expect: task=builtin:level1/1_ReLU static=io runtime=incorrect:tiny timeout=60
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

_CHUNK = b'{"ok": true, "flags": {}}' * 40000 + b"\n"


def _flood():
    for _ in range(64):
        for fd in (1, 2):
            try:  # noqa: SIM105
                os.write(fd, _CHUNK)
            except OSError:
                pass


_flood()


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _flood()
        y = torch.empty_like(x)
        relu_kernel[(1,)](x, y, 1, BLOCK=16)
        return y
