"""docs/hacks.md #15 (precomputed outputs), taken further: read the harness's input files.

Trick: the worker's input sets are files in the candidate's working directory. At
import the candidate loads every one it finds, computes the answers with torch there
(import time: no forward-only audit looks), and indexes them by a few sampled values.
Forward recognises its input and launches a Triton copy of the stored answer, so the
forward pass itself is squeaky clean.

Expect: task=builtin:level1/1_ReLU static=io runtime=incorrect:tiny
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

_ANSWERS = {}


def _key(x):
    flat = x.reshape(-1)
    return (tuple(x.shape), round(flat[0].item(), 6), round(flat[-1].item(), 6))


def _precompute():
    if not os.path.isdir("sets"):
        return
    for name in os.listdir("sets"):
        data = torch.load(os.path.join("sets", name), weights_only=True)
        for x in data["inputs"]:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                _ANSWERS[_key(x)] = torch.relu(x)


_precompute()


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        src = _ANSWERS.get(_key(x), x)
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](src, out, x.numel(), BLOCK=1024)
        return out
