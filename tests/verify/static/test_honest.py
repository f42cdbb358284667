"""Static checks on honest code: realistic kernels, every builtin solution and an
LLM-style softmax give no findings at all (the checks lean towards flagging odd code,
never honest code).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tritonrl
from tritonrl.verify.static import static_check

SOLUTIONS = Path(tritonrl.__file__).parent / "tasks" / "builtin" / "solutions"

HONEST_FULL = '''
"""Fused linear + bias + activation with autotuning; several launches and outputs."""
import math
import os
import time
from typing import Optional

import torch
import torch.nn as nn
import triton
import triton.language as tl

try:
    from triton.language.extra import libdevice
except ImportError:  # older triton
    libdevice = None

LOG2E = math.log2(math.e)


def _configs():
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": 32}, num_warps=4) for bm in (16, 32)]


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  EVEN_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :] * sxk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + kk[:, None] * swk,
                    mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, b)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc = acc + bias[None, :]
    acc = tl.exp2(acc * 1.4426950408889634) / (1.0 + tl.exp2(acc * 1.4426950408889634))
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _row_max(v):
    return tl.max(v, axis=0)


@triton.jit
def rowmax_kernel(y_ptr, out_ptr, idx_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(y_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    tl.store(out_ptr + row, _row_max(v))
    tl.store(idx_ptr + row, tl.argmax(v, axis=0))


def linear_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    assert x.is_contiguous() and x.dim() == 2
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    linear_kernel[grid](x, weight, bias, y, M, N, K, x.stride(0), x.stride(1),
                        weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
                        BLOCK_K=32)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float = 1.0):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.extra = nn.Parameter(torch.randn(out_features) * 0.02)
        nn.init.kaiming_uniform_(self.linear.weight, a=math.sqrt(5))
        self.register_buffer("offsets", torch.arange(out_features))
        self.scale = scale / math.sqrt(in_features)
        self.block = max(16, triton.next_power_of_2(out_features))

    def _rowmax(self, y: torch.Tensor):
        M, N = y.shape
        out = y.new_empty(M)
        idx = torch.empty(M, dtype=torch.int64, device=y.device)
        rowmax_kernel[(M,)](y, out, idx, N, y.stride(0), BLOCK=self.block)
        return out, idx

    def forward(self, x: torch.Tensor, dim: int = 1, eps: Optional[float] = None):
        orig_shape = x.shape
        x2 = x.reshape(-1, orig_shape[-1]).contiguous()
        x2 = x2.to(torch.float32)
        w, b = self.linear.weight, self.linear.bias
        w_t = w.t().contiguous().t()
        y = linear_act(x2, w_t, b.detach())
        m, idx = self._rowmax(y)
        n_rows = x2.shape[0] * dim
        half = n_rows // 2 + (orig_shape[0] - 1) % 2
        if y.dtype != x.dtype or x.numel() == 0 or eps is not None:
            pass
        y = y.view(*orig_shape[:-1], -1).to(x.dtype)
        return y, m.unsqueeze(-1).expand(-1, 2), idx[:half]


batch_size = 8
in_features = 32
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features).abs() + 1]


def get_init_inputs():
    return [in_features, out_features]


if __name__ == "__main__":
    model = ModelNew(*get_init_inputs())
    x = get_inputs()[0]
    start = time.perf_counter()
    out = model(x)[0]
    ref = torch.sigmoid(x @ model.linear.weight.t() + model.linear.bias)
    print(torch.allclose(out, ref), time.perf_counter() - start, os.getpid())
'''

HONEST_AUTOGRAD = '''
import torch
import torch.nn as nn
from triton import jit, cdiv
import triton.language as tl


@jit
def scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * s, mask=m)


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        y = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(cdiv(n, 128),)](x, y, n, s, BLOCK=128)
        ctx.save_for_backward(x)
        return y


def matmul(a, b):
    """A helper that happens to share a torch name; it launches a kernel."""
    return _Scale.apply(a, 2.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def softmax(self, x):
        return matmul(x, x)

    def forward(self, *args):
        x = args[0].contiguous().view(-1)
        with torch.no_grad():
            y = self.softmax(x)
        out = torch.zeros_like(x)
        out.copy_(y)
        out[:1] = y[:1]
        return out.view_as(args[0]).clone()
'''

HONEST_TRITON_JIT_CALL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _fill(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32) + 1.0, mask=offs < n)


fill = triton.jit(_fill)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty(x.shape[0], y.shape[1], device=x.device)
        outs = []
        for i in range(2):
            t = torch.empty_strided((4, 4), (4, 1), device=x.device)
            fill[(1,)](t, t.numel(), BLOCK=16)
            outs.append(t.permute(1, 0).flatten().unsqueeze(0).squeeze(0))
        fill[(triton.cdiv(out.numel(), 64),)](out, out.numel(), BLOCK=64)
        return out, outs[0].reshape(4, 4), x.new_zeros(3).float()
"""

HONEST = {"full": HONEST_FULL, "autograd": HONEST_AUTOGRAD, "jit-call": HONEST_TRITON_JIT_CALL}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_kernel_has_no_findings(name: str) -> None:
    assert static_check(HONEST[name]) == []


def _solutions() -> list[Path]:
    return sorted(SOLUTIONS.rglob("*.py"))


def test_builtin_solutions_exist() -> None:
    assert len(_solutions()) >= 2


@pytest.mark.parametrize("path", _solutions(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_builtin_solution_has_no_findings(path: Path) -> None:
    assert static_check(path.read_text(encoding="utf-8")) == []


LLM_STYLE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                   BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    row = tl.load(row_start_ptr + col_offsets, mask=col_offsets < n_cols, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    softmax_output = numerator / tl.sum(numerator, axis=0)
    tl.store(output_ptr + row_idx * output_row_stride + col_offsets, softmax_output,
             mask=col_offsets < n_cols)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    assert x.is_cuda or x.device.type == "cpu", "tensor must be on a device"
    if not x.is_contiguous():
        x = x.contiguous()
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 4 if BLOCK_SIZE < 2048 else 8
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols,
                              BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return y


class ModelNew(nn.Module):
    """Softmax over the last dimension with a Triton kernel."""

    BLOCK = 128

    def __init__(self, dim: int = -1):
        super(ModelNew, self).__init__()
        self.dim = dim

    @staticmethod
    def _flatten(x):
        return x.reshape(-1, x.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        scale = 1.0 / (x.shape[-1] ** 0.5) if x.ndim > 1 else 1.0
        out_shape = shape[:-1] + (shape[-1],)
        dtype = torch.float16 if x.dtype == torch.float16 else torch.float32
        y = triton_softmax(self._flatten(x).to(dtype))
        return y.view(out_shape)
'''


def test_llm_style_kernel_has_no_findings() -> None:
    assert static_check(LLM_STYLE) == []
