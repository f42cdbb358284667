"""Softmax family: softmax or log-softmax along the rows or the columns of a 2-D batch,
optionally with a temperature (`softmax(x / T)`).

Signature: `softmax:<softmax|log_softmax>:<rows|cols>:<plain|temp>[:moved]` (`moved`:
`axis`'s moved style, the dim moved last first). Held out: `HELDOUT` (log-softmax along
columns with a temperature, plain softmax along columns; in both styles).

The solution is the online softmax: one pass keeps each line's running max and its sum
of exponentials rescaled as the max grows, a second pass writes the outputs; tiles are
wide along the contiguous dimension (`tritonrl.tasks.families.axis`). It reads the input
twice where a row fitting one tile could be read once: PyTorch's own softmax kernel is
already a fused two-pass kernel, so parity, not a large speedup, is what to expect.

Where it cannot reach eager PyTorch: in the reward's measure, which times each call with
its launch inside (as KernelBench's harness does). On the GPU alone the kernel beats
eager's at most draws; but a Triton call costs some tens of microseconds more than an
eager PyTorch call, and at these sizes the kernel runs for about as long, so the launch
decides. The figures are in docs/benchmarks.md ("Task families' solutions through the
verifier").
"""

from __future__ import annotations

import random

from tritonrl.tasks.families import axis
from tritonrl.tasks.families.base import (
    Drawn,
    indent,
    launch,
    reference_source,
    size,
    solution_source,
)

NAME = "softmax"
POLICY = "strict"
HELDOUT = frozenset(
    sig + style
    for sig in ("softmax:log_softmax:cols:temp", "softmax:softmax:cols:plain")
    for style in ("", ":moved")
)
TEMPERATURES = (0.5, 2.0, 4.0, 0.25)

_KERNEL = """
@triton.jit
def {op}_kernel(x_ptr, y_ptr, {params}{temp_param}):
{preamble}
    # Pass 1: running max m and sum s of exp(x - m) per line, rescaled when m grows.
    m = tl.full((BLOCK_O,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_O,), tl.float32)
    for r0 in range(0, R, BLOCK_R):
{load_inf}{scale}
        m_new = tl.maximum(m, tl.max(x, axis=1))
        # Lines with nothing loaded yet (masked) keep a finite shift.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
        m = m_new
    m = tl.where(o_ok, m, 0.0)
    s = tl.where(o_ok, s, 1.0)
{finish}
    # Pass 2: the outputs.
    for r0 in range(0, R, BLOCK_R):
{load_zero}{scale}
        tl.store(y_ptr + offs, {out}, mask=mask)
"""


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    op = rng.choice(("softmax", "log_softmax"))
    along = rng.choice(("rows", "cols"))
    temp = rng.choice(TEMPERATURES) if rng.random() < 0.4 else None
    batch = size(rng, small, (256, 4096), (3, 24))
    dim = size(rng, small, (1024, 16384), (16, 300))
    extra_dtypes = rng.random() < 0.5
    d = 1 if along == "rows" else 0
    title = ("Softmax" if op == "softmax" else "LogSoftmax") + ("_Rows" if d else "_Columns")
    title += "_Temperature" * (temp is not None)
    expr = "x / self.temperature" if temp else "x"
    source = reference_source(
        doc=f"Task family softmax (seed {seed}): {op} along dim {d} of a 2-D batch"
        + (", after dividing by a temperature." if temp else "."),
        forward_args="x: torch.Tensor",
        forward=[f"return torch.{op}({expr}, dim={d})"],
        constants=[("batch_size", batch), ("dim", dim)] + ([("temperature", temp)] if temp else []),
        inputs=[
            "# Scaled so that the lines are far from uniform.",
            "return [torch.randn(batch_size, dim) * 3]",
        ],  # fmt: skip
        init_params="temperature" if temp else "",
        init=["self.temperature = temperature"] if temp else [],
        init_inputs="temperature" if temp else "",
        dtypes=("float16", "bfloat16") if extra_dtypes else (),
    )
    moved = axis.style(NAME, seed) == "moved"
    preamble, params, args = axis.parts(moved)
    scale = "\n        x = x * inv_t" if temp else ""
    if op == "softmax":
        finish, out = "", "tl.exp(x - m[:, None]) / s[:, None]"
    else:
        finish, out = "    log_s = tl.log(s)", "x - m[:, None] - log_s[:, None]"
    kernel = _KERNEL.format(
        op=op, params=params, temp_param=", inv_t" if temp else "",
        preamble=indent(preamble, 4), load_inf=indent(axis.chunk('float("-inf")', moved=moved), 8),
        load_zero=indent(axis.chunk("0.0", moved=moved), 8), scale=scale, finish=finish, out=out,
    )  # fmt: skip
    forward = [
        *(axis.moved_launch_lines(str(d)) if moved else axis.launch_lines(str(d))),
        "y = torch.empty_like(x)",
        *launch(
            f"{op}_kernel[grid]",
            f"x, y, {args}" + (", inv_t=1.0 / self.temperature" if temp else ""),
        ),
        f"return y.movedim(-1, {d})" if moved else "return y",
    ]
    solution = solution_source(
        doc=f"Triton solution: {op} along dim {d}, online max/sum then one write pass.",
        kernels=kernel,
        forward_args="x: torch.Tensor",
        forward=forward,
        init_params="temperature" if temp else "",
        init=["self.temperature = temperature"] if temp else [],
    )
    return Drawn(
        signature=f"softmax:{op}:{along}:{'temp' if temp else 'plain'}" + ":moved" * moved,
        level=2 if temp else 1,
        name=title,
        source=source,
        solution=solution,
    )
