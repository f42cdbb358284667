"""Element-wise epilogues fused after a matmul or a convolution: the ops a family may
chain (bias, activation, scale, residual add, clamp), their PyTorch lines and their
Triton lines.

An epilogue is a tuple of `Op`s applied in order to the product `x` (reference) or the
accumulator tile `v` (kernel). Scalars are the model's attributes and the kernel's
arguments, never literals in the kernel: a solution stays right for any value.

What it does NOT do: it writes no whole source (the matmul and fused families do).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tritonrl.tasks.families.base import ACTIVATIONS

SCALES = (0.5, 2.0, 0.125, 1.5, -1.0)
CLAMPS = ((-1.0, 1.0), (0.0, 6.0), (-0.5, 0.5), (-2.0, 2.0))


@dataclass(frozen=True)
class Op:
    """kind: bias | act | scale | residual | clamp; arg: the activation's name, the scale,
    or the clamp's (low, high)."""

    kind: str
    arg: object = None

    @property
    def tag(self) -> str:
        """The op in a signature (no constants: they do not change the program)."""
        return str(self.arg) if self.kind == "act" else self.kind

    @property
    def title(self) -> str:
        if self.kind == "act":
            return ACTIVATIONS[self.arg][0]
        return {"bias": "Bias", "scale": "Scale", "residual": "ResidualAdd", "clamp": "Clamp"}[
            self.kind
        ]


def draw_epilogue(rng: random.Random, kinds: tuple[str, ...], most: int = 3) -> tuple[Op, ...]:
    """0 to `most` ops in the canonical order bias, scale, act, residual, clamp, each of
    `kinds` (a subset of those) kept with probability one half."""
    ops = []
    for kind in ("bias", "scale", "act", "residual", "clamp"):
        if kind not in kinds or rng.random() < 0.5 or len(ops) == most:
            continue
        if kind == "act":
            ops.append(Op("act", rng.choice(sorted(ACTIVATIONS))))
        elif kind == "scale":
            ops.append(Op("scale", rng.choice(SCALES)))
        elif kind == "clamp":
            ops.append(Op("clamp", rng.choice(CLAMPS)))
        else:
            ops.append(Op(kind))
    return tuple(ops)


def tags(ops: tuple[Op, ...]) -> str:
    return "+".join(op.tag for op in ops) or "none"


def torch_lines(ops: tuple[Op, ...]) -> list[str]:
    """The reference's lines applying `ops` to `x` (the residual input is `residual`)."""
    lines = []
    for op in ops:
        if op.kind == "bias":
            lines.append("x = x + self.bias")
        elif op.kind == "scale":
            lines.append("x = x * self.scale")
        elif op.kind == "act":
            lines.append(f"x = {ACTIVATIONS[op.arg][1]}")
        elif op.kind == "residual":
            lines.append("x = x + residual")
        else:
            lines.append("x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)")
    return lines


def triton_lines(ops: tuple[Op, ...], bias: str, residual: str) -> list[str]:
    """The kernel's lines applying `ops` to the tile `v`. `bias` is the expression of the
    bias tile (broadcast to `v`), `residual` that of the residual tile."""
    lines = []
    for op in ops:
        if op.kind == "bias":
            lines.append(f"v = v + {bias}")
        elif op.kind == "scale":
            lines.append("v = v * scale")
        elif op.kind == "act":
            lines += ACTIVATIONS[op.arg][2].splitlines()
        elif op.kind == "residual":
            lines.append(f"v = v + {residual}")
        else:
            lines.append("v = tl.minimum(tl.maximum(v, clamp_min), clamp_max)")
    return lines


def scalar_names(ops: tuple[Op, ...]) -> list[str]:
    """The scalar attributes / kernel arguments the ops need, in order."""
    names = []
    for op in ops:
        if op.kind == "scale":
            names.append("scale")
        elif op.kind == "clamp":
            names += ["clamp_min", "clamp_max"]
    return names


def scalar_values(ops: tuple[Op, ...]) -> list[tuple[str, float]]:
    """(module-level constant name, value) of each scalar, in `scalar_names` order."""
    values = []
    for op in ops:
        if op.kind == "scale":
            values.append(("scale", float(op.arg)))
        elif op.kind == "clamp":
            values += [("clamp_min", float(op.arg[0])), ("clamp_max", float(op.arg[1]))]
    return values
