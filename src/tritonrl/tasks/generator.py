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
within the verifier's tolerances (`tritonrl.verify.compare.TOLERANCES`) on the CPU
interpreter and on a GPU. A program whose output would be (nearly) one constant or not
depend on `x` (a max over clamped values, `min(max(x, y), y)`) is caught by running it in
plain Python on random rows, and redrawn.

This module does not generate matmuls, convolutions or parameterised layers, and does not
run what it generates: `tritonrl.verify.solution_check.check_task` does (tests run every kind).

This module draws programs, rejects degenerate ones and builds the `Task`s; the op table
(`UNARY`, `BINARY`, `REDUCTIONS`, `Step`, `Program`) is `tritonrl.tasks.gen_ops` and the
reference / solution sources are written by `tritonrl.tasks.gen_source`.
"""

from __future__ import annotations

import logging
import math
import random

from tritonrl.tasks.gen_ops import (
    ADD_SCALARS,
    BINARY,
    CLAMP_HIGHS,
    CLAMP_LOWS,
    MUL_SCALARS,
    REDUCTIONS,
    SCALAR_OPERANDS,
    UNARY,
    Y_SHAPES,
    Interval,
    Operand,
    OpSpec,
    Program,
    Reduction,
    Step,
    clip,
)
from tritonrl.tasks.gen_source import formula, reference_source, solution_source
from tritonrl.tasks.task import Task

log = logging.getLogger(__name__)

# The public API; the op table and the source writers are re-exported from here.
__all__ = [
    "ADD_SCALARS",
    "BINARY",
    "BOUNDED_RANGE",
    "CLAMP_HIGHS",
    "CLAMP_LOWS",
    "COLS",
    "Interval",
    "LIMIT",
    "MIN_WIDTH",
    "MUL_SCALARS",
    "OpSpec",
    "Operand",
    "Program",
    "RANDN_RANGE",
    "REDUCTIONS",
    "ROWS",
    "Reduction",
    "SCALAR_OPERANDS",
    "SIM_ROWS",
    "SUM_LIMIT",
    "Step",
    "UNARY",
    "Y_SHAPES",
    "draw_program",
    "formula",
    "generate_task",
    "generate_tasks",
    "is_degenerate",
    "natural_level",
    "reference_source",
    "simulate",
    "solution_source",
]

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
    return [clip(v, BOUNDED_RANGE) for v in values] if bounded else values


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
