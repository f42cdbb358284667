"""Element-wise family: the procedural generator's chains of unary and binary ops with
broadcasting (`tritonrl.tasks.generator`), as a family.

The task of seed `s` is the generator's program of seed `s` at its natural level, with
the generator's reference and fused single-kernel solution; only the sizes differ: at
KernelBench-like sizes the rows grow, and the columns too unless the program ends in a
reduction (the generator bounds a reduction's error for its own column counts).

Signature: `elementwise:<op[@y] + ...>:<y broadcast: full|row|col|none>:<reduction|none>`
(scalar operands and clamp bounds are constants, not part of it). Held out: one
signature in ten, `int(sha256(signature)[-4:], 16) % 10 == 0` (`HELDOUT`): a fixed
rule, since the signatures are too many to list.

Solutions without a reduction or a broadcast operand are one kernel over the flattened
input (`flat_solution_source`): whole 4096-element blocks load and store unmasked, so
Triton vectorises them whatever the column count, as eager's element-wise kernels do;
the others are the generator's masked 2-D tiles.

Where it cannot beat eager PyTorch: a single op (level 1) is memory-bound either way
(parity at best); the chains (level 2) save eager's intermediate tensors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random

from tritonrl.tasks.families.base import Drawn, Heldout, size
from tritonrl.tasks.gen_source import flat_solution_source
from tritonrl.tasks.generator import draw_program, natural_level, reference_source, solution_source

NAME = "elementwise"
POLICY = "strict"


def _hash_bucket(signature: str) -> bool:
    return int(hashlib.sha256(signature.encode()).hexdigest()[-4:], 16) % 10 == 0


HELDOUT = Heldout(_hash_bucket, "one signature in ten: int(sha256(signature)[-4:], 16) % 10 == 0")


def signature(program) -> str:
    ops = "+".join(s.op + ("@y" if s.operand == "y" else "") for s in program.steps)
    return f"elementwise:{ops or 'none'}:{program.y_shape or 'none'}:{program.reduce or 'none'}"


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    level = natural_level(seed)
    program = draw_program(seed, level)
    rows = size(rng, small, (1024, 8192), (program.rows, program.rows))
    cols = size(rng, small, (1024, 16384), (program.cols, program.cols))
    if program.reduce is not None:
        cols = program.cols
    program = dataclasses.replace(program, rows=rows, cols=cols)
    return Drawn(
        signature=signature(program),
        level=level,
        name=program.name,
        source=reference_source(program, seed),
        solution=(
            solution_source(program)
            if program.reduce or program.y_shape not in (None, "full")
            else flat_solution_source(program)
        ),
    )
