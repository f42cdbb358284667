"""docs/hacks.md #7, output caching keyed by a content fingerprint.

Trick: instead of the pointer, the key is a cheap fingerprint of the data (shape and a
checksum read back with `.item()`), so a benchmark loop that re-runs the same data hits
the cache even when the harness re-allocates the input each time. The fingerprint is
computed with torch (`x.sum()`), which is itself work outside Triton. An exact content
key returns correct results on every input, so it only pays off under timing, where
the verifier re-checks the timed calls; a fingerprint taken with a Triton reduction
instead would be a correct (if pointless) kernel on the CPU interpreter.

Expect: task=builtin:level1/1_ReLU static=torch_compute runtime=torch_fallback
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
        key = (tuple(x.shape), round(x.sum().item(), 3))
        y = torch.empty_like(x)
        if key in _CACHE:
            relu_kernel[(1,)](_CACHE[key], y, 1, BLOCK=16)
            return _CACHE[key].clone()
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        _CACHE[key] = y.clone()
        return y
