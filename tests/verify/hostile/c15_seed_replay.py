"""docs/hacks.md #15, seed replay: precompute the answers for the common seeds.

Trick: harnesses generate inputs with `torch.manual_seed(0)` (or 42, 1234) and the task's
`get_inputs()`. In `__init__` (where torch work is not audited by a forward-only check)
the candidate replays those seeds, computes the reference outputs with torch and keeps
them; forward recognises the input by a few sampled values and returns the stored
answer through a Triton copy kernel. Secret per-evaluation seeds leave it nothing to
recognise, and it returns the copy of its input instead.

Expect: task=builtin:level1/1_ReLU static=none runtime=incorrect:tiny
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

SHAPES = [(64, 1024), (16, 256), (65, 1025)]


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = {}
        for seed in (0, 1, 42, 1234, 2024):
            for shape in SHAPES:
                torch.manual_seed(seed)
                x = torch.randn(*shape)
                key = (shape, round(x[0, 0].item(), 5), round(x[0, 1].item(), 5))
                self.table[key] = torch.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), round(x[0, 0].item(), 5), round(x[0, 1].item(), 5))
        src = self.table.get(key, x)
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](src, out, x.numel(), BLOCK=1024)
        return out
