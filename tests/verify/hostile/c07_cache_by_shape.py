"""docs/hacks.md #7, output caching keyed by shape, in a module-level dict.

Trick: a result per input shape is kept across model instances (module globals survive
between the harness's model constructions); any later call with a shape already seen
skips the work. Timing loops over one shape then measure a dictionary lookup.

Expect: task=builtin:level1/1_ReLU static=none runtime=output_caching
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_CACHE = {}


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype)
        hit = _CACHE.get(key)
        y = torch.empty_like(x)
        if hit is not None:
            relu_kernel[(1,)](hit, y, 1, BLOCK=16)  # "touch" the output
            return hit.clone()
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        _CACHE[key] = y.clone()
        return y
