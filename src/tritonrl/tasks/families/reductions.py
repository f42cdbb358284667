"""Reductions family: sum, mean, max, min, prod, argmax or argmin of a 3-D tensor along a
chosen dim, the value reductions with or without `keepdim`.

Signature: `reductions:<op>:dim<d>[:keepdim]`. Held out: `HELDOUT` (prod along dim 1,
argmin along dim 2, mean along dim 0 with keepdim).

The solution is one kernel over the tensor seen as `[outer, R, inner]`: each program
reduces `BLOCK_O` lines in `BLOCK_R` chunks with an fp32 accumulator (max/min/arg keep a
running best and its index) and writes one value a line: one read of the input, tiles
wide along the contiguous dim (`tritonrl.tasks.families.axis`). PyTorch's reductions are
also single-pass: expect parity, with gains where a strided dim defeats eager's layout.
"""

from __future__ import annotations

import random

from tritonrl.tasks.families import axis
from tritonrl.tasks.families.base import Drawn, indent, reference_source, size, solution_source

NAME = "reductions"
POLICY = "strict"
OPS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin")
HELDOUT = frozenset(
    {"reductions:prod:dim1", "reductions:argmin:dim2", "reductions:mean:dim0:keepdim"}
)
# op -> (masked lanes' value, accumulator init, update lines, result)
_RULES = {
    "sum": ("0.0", "tl.zeros((BLOCK_O,), tl.float32)", "acc += tl.sum(x, axis=1)", "acc"),
    "mean": ("0.0", "tl.zeros((BLOCK_O,), tl.float32)", "acc += tl.sum(x, axis=1)", "acc / R"),
    "max": ('float("-inf")', 'tl.full((BLOCK_O,), float("-inf"), tl.float32)',
            "acc = tl.maximum(acc, tl.max(x, axis=1))", "acc"),
    "min": ('float("inf")', 'tl.full((BLOCK_O,), float("inf"), tl.float32)',
            "acc = tl.minimum(acc, tl.min(x, axis=1))", "acc"),
    "prod": ("1.0", "tl.full((BLOCK_O,), 1.0, tl.float32)",
             "acc *= tl.reduce(x, 1, _multiply)", "acc"),
    "argmax": ('float("-inf")', 'tl.full((BLOCK_O,), float("-inf"), tl.float32)',
               "best = tl.max(x, axis=1)\n"
               "where = tl.argmax(x, axis=1)\n"
               "# strictly better only: the first index wins ties, as in PyTorch\n"
               "better = best > acc\n"
               "idx = tl.where(better, r0 + where, idx)\n"
               "acc = tl.where(better, best, acc)", "idx"),
    "argmin": ('float("inf")', 'tl.full((BLOCK_O,), float("inf"), tl.float32)',
               "best = tl.min(x, axis=1)\n"
               "where = tl.argmin(x, axis=1)\n"
               "# strictly better only: the first index wins ties, as in PyTorch\n"
               "better = best < acc\n"
               "idx = tl.where(better, r0 + where, idx)\n"
               "acc = tl.where(better, best, acc)", "idx"),
}  # fmt: skip

_MULTIPLY = """
@triton.jit
def _multiply(a, b):
    return a * b
"""

_KERNEL = """
@triton.jit
def {op}_kernel(x_ptr, out_ptr, {params}):
{preamble}
    acc = {init}{idx_init}
    for r0 in range(0, R, BLOCK_R):
{load}
{update}
    tl.store(out_ptr + o, {result}, mask=o_ok)
"""


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    op = rng.choice(OPS)
    dim = rng.randrange(3)
    keepdim = op not in ("argmax", "argmin") and rng.random() < 0.3
    shape = [size(rng, small, (8, 64), (2, 5)), size(rng, small, (128, 1024), (8, 40)),
             size(rng, small, (128, 1024), (8, 40))]  # fmt: skip
    extra_dtypes = op in ("max", "min", "mean") and rng.random() < 0.5
    kw = ", keepdim=True" if keepdim else ""
    call = f"torch.{op}(x, dim=self.dim{kw})" + (".values" if op in ("max", "min") else "")
    inputs = (
        "return [torch.rand(batch_size, dim1, dim2) * 0.4 + 0.8]  # products stay finite"
        if op == "prod"
        else "return [torch.randn(batch_size, dim1, dim2)]"
    )
    source = reference_source(
        doc=f"Task family reductions (seed {seed}): {op} over dim {dim} of a 3-D tensor"
        + (", keeping the dim." if keepdim else "."),
        forward_args="x: torch.Tensor",
        forward=[f"return {call}"],
        constants=[
            ("batch_size", shape[0]),
            ("dim1", shape[1]),
            ("dim2", shape[2]),
            ("reduce_dim", dim),
        ],  # fmt: skip
        inputs=[inputs],
        init_params="dim: int",
        init=["self.dim = dim"],
        init_inputs="reduce_dim",
        dtypes=("float16", "bfloat16") if extra_dtypes else (),
    )
    other, init, update, result = _RULES[op]
    arg = op in ("argmax", "argmin")
    kernel = (_MULTIPLY if op == "prod" else "") + _KERNEL.format(
        op=op, params=axis.PARAMS, preamble=indent(axis.PREAMBLE, 4), init=init,
        idx_init="\n    idx = tl.zeros((BLOCK_O,), tl.int64)" if arg else "",
        load=indent(axis.chunk(other), 8), update=indent(update, 8), result=result,
    )  # fmt: skip
    out_dtype = "torch.int64" if arg else "x.dtype"
    forward = [
        *axis.launch_lines("self.dim"),
        "shape = list(x.shape)",
        "shape[self.dim] = 1" if keepdim else "del shape[self.dim]",
        f"out = torch.empty(shape, device=x.device, dtype={out_dtype})",
        f"{op}_kernel[grid](x, out, {axis.ARGS})",
        "return out",
    ]
    solution = solution_source(
        doc=f"Triton solution: {op} along a dim, one read, an fp32 accumulator a line.",
        kernels=kernel,
        forward_args="x: torch.Tensor",
        forward=forward,
        init_params="dim: int",
        init=["self.dim = dim"],
    )
    title = {"sum": "Sum", "mean": "Mean", "max": "Max", "min": "Min", "prod": "Product",
             "argmax": "Argmax", "argmin": "Argmin"}[op]  # fmt: skip
    return Drawn(
        signature=f"reductions:{op}:dim{dim}" + (":keepdim" if keepdim else ""),
        level=1,
        name=f"{title}_Reduction_Dim{dim}" + ("_KeepDim" if keepdim else ""),
        source=source,
        solution=solution,
    )
