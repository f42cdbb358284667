"""The op table of the task generator: what each element-wise op and reduction is.

For every op, `OpSpec` holds its name in task names, its PyTorch expression, the Triton
lines that apply it to the kernel's value `v`, its value at a point (used to simulate a
program in plain Python) and its interval rule (used to keep values bounded); `Reduction`
does the same for the final reductions. `Step` and `Program` describe a drawn program.

What it does NOT do: it does not draw programs (`tritonrl.tasks.generator`) or assemble
whole sources (`tritonrl.tasks.gen_source`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Interval = tuple[float, float]
Operand = str | float | tuple[float, float] | None

# Operands a binary op may take instead of `y`, clamp's bounds, and the shapes of `y`.
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


def clip(v: float, b: Interval) -> float:
    """`v` clamped into the interval `b` (clamp's point rule; also bounds sampled inputs)."""
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
        clip,
        lambda a, b: (clip(a[0], b), clip(a[1], b)),
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
