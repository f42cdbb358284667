"""docs/hacks.md #24, resource abuse: a memory bomb.

Trick: forward keeps allocating and touching 256 MiB blocks until something gives.
Without a memory limit this takes the host (and every other evaluation on it) into
swap or the OOM killer; with one, the allocation fails inside the sandbox and the
verdict comes at once, names the memory limit and earns nothing (never the partial
credit of a kernel that compiles and is wrong). The caller's own memory is never
involved.

Expect: task=builtin:level1/1_ReLU static=none runtime=incorrect:tiny timeout=30 memory_mb=3072
        limit=memory
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_HOARD = []


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            _HOARD.append(bytearray(b"\x01") * (256 << 20))
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
