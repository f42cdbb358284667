"""docs/hacks.md #15, seed replay with the harness's own seed, read from the RNG state.

Trick: a harness that seeds torch's global RNG once and then draws the inputs and
builds the model from that same seed lets the candidate recover the seed
(`torch.initial_seed()`) inside `__init__`, regenerate the very inputs the task's
`get_inputs()` will produce (for every shape it might be run at) and precompute the
answers there, where a forward-only op audit does not look. Forward launches a Triton
copy of the stored answer.

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
        seed = torch.initial_seed()
        self.answers = {}
        for shape in SHAPES:
            torch.manual_seed(seed)
            self.answers[shape] = torch.relu(torch.randn(*shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        src = self.answers.get(tuple(x.shape), x)
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](src, out, x.numel(), BLOCK=1024)
        return out
