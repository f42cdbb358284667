"""Seeded procedural generator of element-wise / fusion tasks, each with a Triton solution.

A task is drawn from a random program over a `[batch_size, dim]` fp32 input `x` and,
sometimes, a second input `y` of shape `[batch_size, dim]`, `[dim]` (broadcast over rows)
or `[batch_size, 1]` (broadcast over columns): a chain of unary ops (relu, sigmoid, tanh,
exp, abs, square, gelu-tanh, silu, softplus, negative, clamp) and binary ops (add, sub,
mul with `y` or a scalar; maximum, minimum with `y`), optionally ending in a reduction
(sum, mean or max over the last dim). Level 1 is a single op, level 2 a chain of two or
more (a fusion). The reference is a KernelBench-format source; the solution is generated
Triton code (`class ModelNew`) computing the whole program in one fused, fully masked
kernel whose grid and blocks come from the actual input shapes.

The same seed (and level) always gives the same source. Value ranges are tracked through
the program so that nothing overflows and no intermediate grows past `LIMIT` (exp and
softplus only see bounded values), which keeps the fp32 results of PyTorch and Triton
within `check.TOLERANCES` on the CPU interpreter and on a GPU. A program whose output
would be (nearly) one constant or not depend on `x` (a max over clamped values,
`min(max(x, y), y)`) is caught by running it in plain Python on random rows, and redrawn.

This module does not generate matmuls, convolutions or parameterised layers, and does not
run what it generates: `tritonrl.tasks.check.check_task` does (tests run every kind).
"""

from __future__ import annotations

import logging
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonrl.tasks.task import Task

log = logging.getLogger(__name__)

Interval = tuple[float, float]
Operand = str | float | tuple[float, float] | None

# Largest magnitude any intermediate may reach, and the one a sum may reduce (its
# rounding error grows with the magnitudes summed; atol is 1e-4).
LIMIT = 30.0
SUM_LIMIT = 20.0
# Narrower ranges than this are (nearly) constant: the op would make the task degenerate.
MIN_WIDTH = 0.05
# Nominal range of torch.randn inputs, and of inputs clamped to +-3.
RANDN_RANGE: Interval = (-5.0, 5.0)
BOUNDED_RANGE: Interval = (-3.0, 3.0)
ROWS = (16, 64)
SIM_ROWS = 6  # rows simulated in Python to reject degenerate programs
COLS = (64, 512)
ADD_SCALARS = (0.25, 0.5, 1.0, 2.0)
MUL_SCALARS = (0.1, 0.5, 1.5, 2.0, 3.0, -1.0)
CLAMP_LOWS = (-2.0, -1.0, -0.5, 0.0)
CLAMP_HIGHS = (0.5, 1.0, 2.0)
Y_SHAPES = ("full", "row", "col")  # [batch_size, dim], [dim], [batch_size, 1]


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def _abs(a: Interval, _b: Interval) -> Interval:
    lo, hi = a
    if lo >= 0:
        return a
    if hi <= 0:
        return (-hi, -lo)
    return (0.0, max(-lo, hi))


def _mul(a: Interval, b: Interval) -> Interval:
    products = [x * y for x in a for y in b]
    return (min(products), max(products))


def _clip(v: float, b: Interval) -> float:
    return min(max(v, b[0]), b[1])


def _gelu(v: float) -> float:
    return 0.5 * v * (1.0 + math.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))


def _softplus(v: float) -> float:
    return v if v > 20 else math.log1p(math.exp(v))


@dataclass(frozen=True)
class OpSpec:
    """One op: its name in task names, its PyTorch expression (`{o}`: the operand), the
    kernel lines that update `v` (`{o}` likewise), its value at a point (value, operand),
    and its interval rule (None: non-decreasing in the value, taken from `point`)."""

    name: str
    torch: str
    triton: tuple[str, ...]
    point: Callable[[float, Any], float]
    rule: Callable[[Interval, Interval], Interval] | None = None
    functional: bool = False  # uses `F.`

    def bounds(self, value: Interval, other: Interval) -> Interval:
        if self.rule is not None:
            return self.rule(value, other)
        return (self.point(value[0], other[0]), self.point(value[1], other[1]))


UNARY: dict[str, OpSpec] = {
    "relu": OpSpec("ReLU", "torch.relu(x)", ("v = tl.maximum(v, 0.0)",), lambda v, _: max(v, 0.0)),
    "sigmoid": OpSpec(
        "Sigmoid", "torch.sigmoid(x)", ("v = 1.0 / (1.0 + tl.exp(-v))",), lambda v, _: _sigmoid(v)
    ),
    "tanh": OpSpec(
        "Tanh",
        "torch.tanh(x)",
        ("v = 1.0 - 2.0 / (tl.exp(2.0 * v) + 1.0)",),
        lambda v, _: math.tanh(v),
    ),
    "exp": OpSpec("Exp", "torch.exp(x)", ("v = tl.exp(v)",), lambda v, _: math.exp(v)),
    "abs": OpSpec("Abs", "torch.abs(x)", ("v = tl.abs(v)",), lambda v, _: abs(v), _abs),
    "square": OpSpec(
        "Square",
        "torch.square(x)",
        ("v = v * v",),
        lambda v, _: v * v,
        lambda a, b: _mul(_abs(a, b), _abs(a, b)),
    ),
    "gelu": OpSpec(
        "GELU",
        'F.gelu(x, approximate="tanh")',
        # 0.5 v (1 + tanh t) = v - v / (exp(2t) + 1); the exponent is capped against overflow.
        (
            "t = 0.7978845608028654 * (v + 0.044715 * v * v * v)",
            "v = v - v / (tl.exp(tl.minimum(2.0 * t, 60.0)) + 1.0)",
        ),
        lambda v, _: _gelu(v),
        lambda a, _b: (-0.2 if a[0] < 0 else 0.0, max(a[1], 0.0)),
        functional=True,
    ),
    "silu": OpSpec(
        "SiLU",
        "F.silu(x)",
        ("v = v / (1.0 + tl.exp(-v))",),
        lambda v, _: v * _sigmoid(v),
        lambda a, _b: (-0.3 if a[0] < 0 else 0.0, max(a[1], 0.0)),
        functional=True,
    ),
    "softplus": OpSpec(
        "Softplus",
        "F.softplus(x)",
        # PyTorch returns x itself above its threshold (20).
        ("v = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",),
        lambda v, _: _softplus(v),
        functional=True,
    ),
    "neg": OpSpec("Neg", "-x", ("v = -v",), lambda v, _: -v, lambda a, _b: (-a[1], -a[0])),
    "clamp": OpSpec(
        "Clamp",
        "torch.clamp(x, min={o[0]}, max={o[1]})",
        ("v = tl.minimum(tl.maximum(v, {o[0]}), {o[1]})",),
        _clip,
        lambda a, b: (_clip(a[0], b), _clip(a[1], b)),
    ),
}
BINARY: dict[str, OpSpec] = {
    "add": OpSpec("Add", "x + {o}", ("v = v + {o}",), lambda v, o: v + o),
    "sub": OpSpec(
        "Sub",
        "x - {o}",
        ("v = v - {o}",),
        lambda v, o: v - o,
        lambda a, b: (a[0] - b[1], a[1] - b[0]),
    ),
    "mul": OpSpec("Mul", "x * {o}", ("v = v * {o}",), lambda v, o: v * o, _mul),
    "maximum": OpSpec(
        "Maximum", "torch.maximum(x, {o})", ("v = tl.maximum(v, {o})",), lambda v, o: max(v, o)
    ),
    "minimum": OpSpec(
        "Minimum", "torch.minimum(x, {o})", ("v = tl.minimum(v, {o})",), lambda v, o: min(v, o)
    ),
}
SCALAR_OPERANDS: dict[str, tuple[float, ...]] = {
    "add": ADD_SCALARS,
    "sub": ADD_SCALARS,
    "mul": MUL_SCALARS,
}


@dataclass(frozen=True)
class Reduction:
    """A final reduction over the last dim: reference expression, accumulator set-up,
    per-tile update (masked lanes neutral) and the value stored."""

    name: str
    torch: str
    init: str
    update: str
    result: str


REDUCTIONS: dict[str, Reduction] = {
    "sum": Reduction(
        "Sum",
        "torch.sum(x, dim=-1)",
        "acc = tl.zeros([BLOCK_R], dtype=tl.float32)",
        "acc += tl.sum(tl.where(mask, v, 0.0), axis=1)",
        "acc",
    ),
    "mean": Reduction(
        "Mean",
        "x.mean(dim=-1)",
        "acc = tl.zeros([BLOCK_R], dtype=tl.float32)",
        "acc += tl.sum(tl.where(mask, v, 0.0), axis=1)",
        "acc / n_cols",
    ),
    "max": Reduction(
        "Max",
        "torch.max(x, dim=-1).values",
        'acc = tl.full([BLOCK_R], float("-inf"), tl.float32)',
        'acc = tl.maximum(acc, tl.max(tl.where(mask, v, float("-inf")), axis=1))',
        "acc",
    ),
}
_Y_LOADS = {
    "full": "y = tl.load(y_ptr + offs, mask=mask, other=0.0)",
    "row": "y = tl.load(y_ptr + cols, mask=col_ok, other=0.0)[None, :]",
    "col": "y = tl.load(y_ptr + rows, mask=row_ok, other=0.0)[:, None]",
}
_Y_INPUTS = {"full": "batch_size, dim", "row": "dim", "col": "batch_size, 1"}


@dataclass(frozen=True)
class Step:
    """One element-wise op; `operand` is "y", a scalar, or clamp's (min, max)."""

    op: str
    operand: Operand = None

    @property
    def spec(self) -> OpSpec:
        return UNARY.get(self.op) or BINARY[self.op]


@dataclass(frozen=True)
class Program:
    """What a generated task computes, and the sizes and input ranges it runs at."""

    steps: tuple[Step, ...]
    reduce: str | None
    y_shape: str | None
    bounded: bool
    rows: int
    cols: int

    @property
    def n_ops(self) -> int:
        return len(self.steps) + (self.reduce is not None)

    @property
    def name(self) -> str:
        parts = [s.spec.name for s in self.steps]
        if self.reduce:
            parts.append(REDUCTIONS[self.reduce].name)
        return "_".join(parts)


# --------------------------------------------------------------------------- programs


def _rng(seed: int, level: int | None) -> random.Random:
    # A string seed is hashed with SHA-512: stable across runs and Python versions.
    return random.Random(f"tritonrl.generator:{seed}:{level}")


def natural_level(seed: int) -> int:
    """The level `generate_task(seed)` picks when none is asked for."""
    return 1 if _rng(seed, None).random() < 0.3 else 2


def _input_range(bounded: bool) -> Interval:
    return BOUNDED_RANGE if bounded else RANDN_RANGE


def _apply(step: Step, value: Interval, y_range: Interval) -> Interval:
    operand = step.operand
    if operand == "y":
        other = y_range
    elif isinstance(operand, tuple):
        other = operand
    elif isinstance(operand, float):
        other = (operand, operand)
    else:
        other = value
    return step.spec.bounds(value, other)


def _acceptable(step: Step, before: Interval, after: Interval) -> bool:
    """Bounded, not (nearly) constant, and not the identity on the current range."""
    if max(abs(after[0]), abs(after[1])) > LIMIT or after[1] - after[0] < MIN_WIDTH:
        return False
    return not (step.op in ("relu", "abs", "clamp", "maximum", "minimum") and after == before)


def _candidates(rng: random.Random, op: str, has_y: bool) -> list[Step]:
    if op == "clamp":
        return [Step(op, (lo, hi)) for lo in CLAMP_LOWS for hi in CLAMP_HIGHS]
    if op in UNARY:
        return [Step(op)]
    steps = [Step(op, "y")] if has_y else []
    if op in SCALAR_OPERANDS and (not has_y or rng.random() < 0.5):
        steps += [Step(op, c) for c in SCALAR_OPERANDS[op]]
    return steps


def _draw_step(
    rng: random.Random, value: Interval, y_range: Interval, ops: list[str], has_y: bool, prev: str
) -> tuple[Step, Interval] | None:
    """A random acceptable step among `ops` (None when none is)."""
    ops = [op for op in ops if op != prev]
    rng.shuffle(ops)
    for op in ops:
        steps = _candidates(rng, op, has_y)
        rng.shuffle(steps)
        for step in steps:
            after = _apply(step, value, y_range)
            if _acceptable(step, value, after):
                return step, after
    return None


def _draw_reduce(rng: random.Random, value: Interval) -> str:
    options = ["mean", "max"]
    if max(abs(value[0]), abs(value[1])) <= SUM_LIMIT:
        options.append("sum")
    return rng.choice(sorted(options))


def _draw_single(rng: random.Random, rows: int, cols: int) -> Program:
    kind = rng.choices(["unary", "binary", "reduce"], weights=[5, 3, 2])[0]
    if kind == "reduce":
        return Program((), rng.choice(sorted(REDUCTIONS)), None, False, rows, cols)
    ops = sorted(UNARY) if kind == "unary" else sorted(BINARY)
    op = rng.choice(ops)
    bounded = op in ("exp", "softplus")
    has_y = kind == "binary" and (op in ("maximum", "minimum") or rng.random() < 0.6)
    y_shape = rng.choice(Y_SHAPES) if has_y else None
    value = _input_range(bounded)
    drawn = _draw_step(rng, value, value, [op], has_y, prev="")
    step = drawn[0] if drawn else Step("tanh")
    if has_y and step.operand != "y":
        step = Step(op, "y")
    return Program((step,), None, y_shape, bounded, rows, cols)


def _draw_chain(rng: random.Random, rows: int, cols: int) -> Program:
    bounded = rng.random() < 0.4
    y_shape = rng.choice(Y_SHAPES) if rng.random() < 0.5 else None
    reduce = rng.random() < 0.4
    n = rng.randint(1, 3) if reduce else rng.randint(2, 4)
    y_at = rng.randrange(n) if y_shape else -1
    value = y_range = _input_range(bounded)
    steps: list[Step] = []
    for i in range(n):
        if i == y_at:
            step, value = _force_y(rng, value, y_range)
        else:
            prev = steps[-1].op if steps else ""
            ops = sorted([*UNARY, *BINARY])
            drawn = _draw_step(rng, value, y_range, ops, y_shape is not None, prev)
            step, value = drawn or (Step("tanh"), _apply(Step("tanh"), value, y_range))
        steps.append(step)
    reduction = _draw_reduce(rng, value) if reduce else None
    return Program(tuple(steps), reduction, y_shape, bounded, rows, cols)


def _force_y(rng: random.Random, value: Interval, y_range: Interval) -> tuple[Step, Interval]:
    """A binary step with `y` (the input must be used), `add` when no other fits."""
    for op in rng.sample(sorted(BINARY), len(BINARY)):
        step = Step(op, "y")
        after = _apply(step, value, y_range)
        if _acceptable(step, value, after):
            return step, after
    step = Step("add", "y")
    return step, _apply(step, value, y_range)


# --------------------------------------------------------------------------- degeneracy


def _sample(rng: random.Random, n: int, bounded: bool) -> list[float]:
    values = [rng.gauss(0.0, 1.0) for _ in range(n)]
    return [_clip(v, BOUNDED_RANGE) for v in values] if bounded else values


def _y_value(p: Program, y: list, r: int, c: int) -> float:
    if p.y_shape == "full":
        return y[r][c]
    return y[c] if p.y_shape == "row" else y[r]


def _reduce(kind: str | None, values: list[float]) -> list[float]:
    if kind == "sum":
        return [math.fsum(values)]
    if kind == "mean":
        return [math.fsum(values) / len(values)]
    return [max(values)] if kind == "max" else values


def simulate(p: Program, x: list[list[float]], y: list | None = None) -> list[float]:
    """The program's outputs in plain Python for input rows `x` (and `y`: rows for
    "full", one value per column for "row", one per row for "col"), flattened."""
    out: list[float] = []
    for r, row in enumerate(x):
        values = []
        for c, v in enumerate(row):
            for step in p.steps:
                other = _y_value(p, y, r, c) if step.operand == "y" else step.operand
                v = step.spec.point(v, other)
            values.append(v)
        out += _reduce(p.reduce, values)
    return out


def _close_fraction(a: list[float], b: list[float]) -> float:
    close = [abs(u - v) <= 1e-3 + 1e-3 * abs(u) for u, v in zip(a, b, strict=True)]
    return sum(close) / len(close)


def is_degenerate(p: Program, rng: random.Random) -> bool:
    """Whether (almost) every output is one constant, or does not depend on `x`: then a
    kernel that ignores its input would pass the check. Tried on `SIM_ROWS` random rows
    (a max over hundreds of clamped or saturated values is the usual culprit)."""
    x1 = [_sample(rng, p.cols, p.bounded) for _ in range(SIM_ROWS)]
    x2 = [_sample(rng, p.cols, p.bounded) for _ in range(SIM_ROWS)]
    if p.y_shape == "full":
        y: list = [_sample(rng, p.cols, p.bounded) for _ in range(SIM_ROWS)]
    else:
        y = _sample(rng, p.cols if p.y_shape == "row" else SIM_ROWS, p.bounded)
    a, b = simulate(p, x1, y), simulate(p, x2, y)
    median = sorted(a)[len(a) // 2]
    return _close_fraction(a, [median] * len(a)) >= 0.8 or _close_fraction(a, b) >= 0.8


def draw_program(seed: int, level: int | None = None) -> Program:
    """The random program of `generate_task(seed, level)` (degenerate draws are redrawn)."""
    level = natural_level(seed) if level is None else level
    if level not in (1, 2):
        raise ValueError(f"generated tasks are level 1 or 2, not {level!r}")
    rng = _rng(seed, level)
    for _ in range(100):
        rows, cols = rng.randint(*ROWS), rng.randint(*COLS)
        draw = _draw_single if level == 1 else _draw_chain
        program = draw(rng, rows, cols)
        if not is_degenerate(program, random.Random(rng.random())):
            return program
        log.debug("seed %d: %s is degenerate; drawing again", seed, program.name)
    raise RuntimeError(f"seed {seed}: no non-degenerate program in 100 draws")


# --------------------------------------------------------------------------- sources


def _fmt(step: Step, template: str) -> str:
    return template.format(o=step.operand)


def _forward_lines(p: Program) -> list[str]:
    exprs = [_fmt(s, s.spec.torch) for s in p.steps]
    if p.reduce:
        exprs.append(REDUCTIONS[p.reduce].torch)
    return [f"x = {e}" for e in exprs[:-1]] + [f"return {exprs[-1]}"]


def formula(p: Program) -> str:
    """The whole program as one expression, e.g. `torch.sum(torch.sigmoid(x * y), dim=-1)`."""
    expr = "x"
    templates = [_fmt(s, s.spec.torch) for s in p.steps]
    if p.reduce:
        templates.append(REDUCTIONS[p.reduce].torch)
    for template in templates:
        # Operator results (`x * y`, `-x`) need parentheses where an operator takes them.
        operator = expr != "x" and (expr.startswith("-") or not expr.endswith(")"))
        inner = f"({expr})" if operator and template[0] in "x-" else expr
        expr = re.sub(r"\bx\b", lambda _m, e=inner: e, template, count=1)
    return expr


def _input_expr(shape: str, bounded: bool) -> str:
    expr = f"torch.randn({shape})"
    return f"{expr}.clamp(-3.0, 3.0)" if bounded else expr


def reference_source(p: Program, seed: int) -> str:
    """The KernelBench-format reference of a program."""
    args = "x: torch.Tensor, y: torch.Tensor" if p.y_shape else "x: torch.Tensor"
    summary = formula(p)
    inputs = [f"x = {_input_expr('batch_size, dim', p.bounded)}"]
    if p.y_shape:
        inputs.append(f"y = {_input_expr(_Y_INPUTS[p.y_shape], p.bounded)}")
    uses_f = any(s.spec.functional for s in p.steps)
    lines = [
        f'"""Generated task (seed {seed}): {p.name.replace("_", " -> ")}.',
        "",
        f"{summary}",
        '"""',
        "",
        "import torch",
        "import torch.nn as nn",
        *(["import torch.nn.functional as F"] if uses_f else []),
        "",
        "",
        "class Model(nn.Module):",
        f'    """{p.name}."""',
        "",
        "    def __init__(self):",
        "        super().__init__()",
        "",
        f"    def forward(self, {args}) -> torch.Tensor:",
        *(f"        {line}" for line in _forward_lines(p)),
        "",
        "",
        f"batch_size = {p.rows}",
        f"dim = {p.cols}",
        "",
        "",
        "def get_inputs():",
        *(f"    {line}" for line in inputs),
        f"    return [x{', y' if p.y_shape else ''}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)


def _tile_lines(p: Program) -> list[str]:
    lines = [
        "col_ok = cols < n_cols",
        "mask = row_ok[:, None] & col_ok[None, :]",
        "offs = rows[:, None] * n_cols + cols[None, :]",
        "v = tl.load(x_ptr + offs, mask=mask, other=0.0)",
    ]
    if p.y_shape:
        lines.append(_Y_LOADS[p.y_shape])
    for step in p.steps:
        lines += [_fmt(step, line) for line in step.spec.triton]
    return lines


def _kernel_body(p: Program) -> list[str]:
    head = [
        "rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)",
        "row_ok = rows < n_rows",
    ]
    if p.reduce is None:
        return [
            *head,
            "cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)",
            *_tile_lines(p),
            "tl.store(out_ptr + offs, v, mask=mask)",
        ]
    r = REDUCTIONS[p.reduce]
    loop = ["cols = start + tl.arange(0, BLOCK_C)", *_tile_lines(p), r.update]
    return [
        *head,
        r.init,
        "for start in range(0, n_cols, BLOCK_C):",
        *(f"    {line}" for line in loop),
        f"tl.store(out_ptr + rows, {r.result}, mask=row_ok)",
    ]


def solution_source(p: Program) -> str:
    """Triton `ModelNew` computing the program in one fused kernel."""
    kernel = f"{p.name.lower()}_kernel"
    ptrs = "x_ptr, y_ptr, out_ptr" if p.y_shape else "x_ptr, out_ptr"
    tensors = "x, y, out" if p.y_shape else "x, out"
    args = "x: torch.Tensor, y: torch.Tensor" if p.y_shape else "x: torch.Tensor"
    if p.reduce:
        out = "torch.empty(n_rows, device=x.device, dtype=x.dtype)"
        grid = "(triton.cdiv(n_rows, BLOCK_R),)"
        what = f"{p.name.replace('_', ' -> ')}, one tile of rows per program, looping over columns"
    else:
        out = "torch.empty_like(x)"
        grid = "(triton.cdiv(n_rows, BLOCK_R), triton.cdiv(n_cols, BLOCK_C))"
        what = f"{p.name.replace('_', ' -> ')} over 2-D tiles"
    lines = [
        f'"""Triton solution (generated): {what}, fused into one masked kernel."""',
        "",
        "import torch",
        "import torch.nn as nn",
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        f"def {kernel}(",
        f"    {ptrs}, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr",
        "):",
        *(f"    {line}" for line in _kernel_body(p)),
        "",
        "",
        "class ModelNew(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "",
        f"    def forward(self, {args}) -> torch.Tensor:",
        "        x = x.contiguous()",
        *(["        y = y.contiguous()"] if p.y_shape else []),
        "        n_rows, n_cols = x.shape",
        f"        out = {out}",
        "        BLOCK_C = min(triton.next_power_of_2(n_cols), 1024)",
        "        BLOCK_R = max(1, min(triton.next_power_of_2(n_rows), 4096 // BLOCK_C))",
        f"        grid = {grid}",
        f"        {kernel}[grid]({tensors}, n_rows, n_cols, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C)",
        "        return out",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- tasks


def generate_task(seed: int, level: int | None = None) -> Task:
    """The task of `seed`: at its natural level when `level` is None, else at `level`.

    Its id is `generated:s{seed}` (with `:l{level}` appended when `level` differs from the
    seed's natural level, so that an id names one source).
    """
    natural = natural_level(seed)
    level = natural if level is None else level
    program = draw_program(seed, level)
    suffix = "" if level == natural else f":l{level}"
    return Task(
        id=f"generated:s{seed}{suffix}",
        level=level,
        name=program.name,
        source=reference_source(program, seed),
        origin=f"generated:{seed}{suffix}",
        solution=solution_source(program),
    )


def generate_tasks(n: int, seed: int = 0, level: int | None = None) -> list[Task]:
    """`n` distinct tasks from seeds `seed`, `seed + 1`, ... (a seed whose source repeats
    an earlier one is skipped)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for s in range(seed, seed + 20 * n + 20):
        if len(tasks) == n:
            break
        task = generate_task(s, level)
        if task.source in seen:
            log.debug("seed %d repeats an earlier task; skipped", s)
            continue
        seen.add(task.source)
        tasks.append(task)
    if len(tasks) < n:
        raise ValueError(f"only {len(tasks)} distinct tasks found for n={n}, seed={seed}")
    return tasks
