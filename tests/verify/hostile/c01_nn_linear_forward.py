"""docs/hacks.md #1, library fallback: the GEMM is `nn.Linear.forward` (cuBLAS / MKL); only the
ReLU epilogue is a Triton kernel.

Trick: the expensive part of Gemm_Bias_ReLU runs in the library, the cheap part in
Triton. A harness that checks "some Triton kernel was launched and the output matches"
accepts it; the speed-up then measures cuBLAS, not the policy's kernel.

Expect: task=builtin:level2/1_Gemm_Bias_ReLU static=nn_compute_layer runtime=torch_fallback
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
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x).contiguous()
        y = torch.empty_like(h)
        relu_kernel[(triton.cdiv(h.numel(), 1024),)](h, y, h.numel(), BLOCK=1024)
        return y
