"""docs/hacks.md #24, resource abuse: fill the disk.

Trick: forward writes a 4 GiB file into its own work dir (where it may write) before
launching an honest Triton ReLU. Without a file-size limit it fills the disk the
verifier and every other evaluation share; with one, the write fails with EFBIG at the
limit (Python ignores SIGXFSZ), the verdict comes at once, names the file-size limit
and earns nothing.

Expect: task=builtin:level1/1_ReLU static=io runtime=incorrect:tiny limit=file_size
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = bytes(64 << 20)
        with open("fill.bin", "wb") as f:
            for _ in range(64):
                f.write(block)
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
