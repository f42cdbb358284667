"""docs/hacks.md #1, library fallback on the host, through a raw pointer: a KNOWN RUN-TIME GAP.

Trick: numpy (already loaded by torch, taken from `sys.modules`) is pointed straight at
the tensors' memory with a plain object exposing `__array_interface__` (address from
`data_ptr()`), and `maximum` writes the ReLU into the output buffer. No torch op, no
ctypes, no host round-trip method and no audit event is involved, so nothing in the
candidate's process sees host compute; a copy kernel runs for show. Only the static
layer (numpy via `sys.modules`) refuses it. Closing this at run time needs checks
outside the candidate's process (e.g. a write-provenance check of outputs by the
launched kernels), see the report in tests/verify/test_hostile.py.

Expect: task=builtin:level1/1_ReLU static=introspection runtime=torch_fallback gap=runtime
"""

import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

_np = sys.modules["nu" + "mpy"]


class _Raw:
    def __init__(self, t):
        self.__array_interface__ = {
            "data": (t.data_ptr(), False),
            "shape": (t.numel(),),
            "typestr": "<f4",
            "version": 3,
        }


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        scratch = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, scratch, x.numel(), BLOCK=1024)
        out = torch.empty_like(x)
        _np.maximum(_np.asarray(_Raw(x)), 0.0, out=_np.asarray(_Raw(out)))
        return out
