"""What every task family shares: the drawn program (`Drawn`), the seeded RNG, size
drawing for the GPU or the CPU interpreter, and the writers of the two sources.

A family module draws the options that change the program (its signature) and the sizes,
then writes a KernelBench-format reference (`class Model`, module-level size constants,
`get_inputs()`, `get_init_inputs()`) and a Triton `class ModelNew` through
`reference_source` and `solution_source`.

What it does NOT do: it knows no family, draws no program and runs nothing; the registry
(`tritonrl.tasks.families`) builds the `Task`s and the tests verify them.
"""

from __future__ import annotations

import random
import re
import textwrap
from dataclasses import dataclass

# Activations shared by the matmul and fused families: (name in task names, PyTorch
# expression of `x`, Triton line that updates the tile `v`). Each Triton line is written
# so that it cannot overflow for any fp32 input (exp of a non-positive value only).
ACTIVATIONS: dict[str, tuple[str, str, str]] = {
    "relu": ("ReLU", "torch.relu(x)", "v = tl.maximum(v, 0.0)"),
    "sigmoid": (
        "Sigmoid",
        "torch.sigmoid(x)",
        "e = tl.exp(-tl.abs(v))\nv = tl.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))",
    ),
    "tanh": (
        "Tanh",
        "torch.tanh(x)",
        "e = tl.exp(-2.0 * tl.abs(v))\nv = tl.where(v >= 0, 1.0, -1.0) * (1.0 - e) / (1.0 + e)",
    ),
    "gelu": (
        "GELU",
        "torch.nn.functional.gelu(x)",
        "v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))",
    ),
    "silu": (
        "SiLU",
        "torch.nn.functional.silu(x)",
        "e = tl.exp(-tl.abs(v))\nv = v * tl.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))",
    ),
    "leaky_relu": (
        "LeakyReLU",
        "torch.nn.functional.leaky_relu(x, 0.01)",
        "v = tl.where(v >= 0, v, 0.01 * v)",
    ),
}


@dataclass(frozen=True)
class Drawn:
    """One drawn task of a family, before it becomes a `Task`.

    signature: the family and the options that change the program, not the sizes
        (`matmul:trans_b:bias+relu`); the train / held-out split is by signature.
    level: 1 a single op, 2 a fusion.
    name: the task's name (`Matmul_TransB_Bias_ReLU`).
    source / solution: the reference and its Triton `ModelNew`.
    """

    signature: str
    level: int
    name: str
    source: str
    solution: str


def family_rng(family: str, seed: int) -> random.Random:
    """The RNG of (family, seed): a string seed is hashed with SHA-512, so it is stable
    across runs, processes and Python versions."""
    return random.Random(f"tritonrl.families:{family}:{seed}")


def size(rng: random.Random, small: bool, gpu: tuple[int, int], cpu: tuple[int, int]) -> int:
    """A size drawn from `cpu` (for the Triton interpreter) or `gpu` (KernelBench-like);
    one RNG call either way, so the draws that follow are the same for both."""
    u = rng.random()
    lo, hi = cpu if small else gpu
    return lo + int(u * (hi - lo + 1))


def pow2_size(rng: random.Random, small: bool, gpu: tuple[int, int], cpu: tuple[int, int]) -> int:
    """A power of two between the bounds' exponents (`gpu=(10, 14)`: 1024 .. 16384)."""
    return 1 << size(rng, small, gpu, cpu)


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments of a call (brackets and strings respected)."""
    parts, depth, current, quote = [], 0, "", ""
    for ch in " ".join(args.split()):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def launch(head: str, args: str, width: int = 92) -> list[str]:
    """A kernel launch `head(args)` as forward lines: one line when it fits in `width`,
    else the arguments packed into lines inside the call's parentheses."""
    parts = _split_args(args)
    one = f"{head}({', '.join(parts)})"
    if len(one) <= width:
        return [one]
    lines, current = [f"{head}("], ""
    for part in parts:
        if current and len(current) + len(part) + 2 > width - 4:
            lines.append(f"    {current}")
            current = ""
        current = f"{current} {part}," if current else f"{part},"
    lines += [f"    {current}", ")"]
    return lines


def _wrap_defs(kernels: str) -> str:
    """Kernel `def` lines longer than 100 columns with their parameters packed on lines
    of their own, and two blank lines between kernels."""
    out = []
    kernels = re.sub(r"\n+@triton.jit", "\n\n\n@triton.jit", kernels.strip("\n"))
    for line in kernels.splitlines():
        if line.startswith("def ") and line.endswith("):") and len(line) > 100:
            head, _, params = line[: -len("):")].partition("(")
            out += launch(head, params, width=96)[:-1] + ["):"]
        else:
            out.append(line)
    return "\n".join(out)


def _doc(doc: str) -> list[str]:
    """A module docstring, wrapped to 88 columns."""
    wrapped = textwrap.wrap(doc, 88)
    if len(wrapped) == 1:
        return [f'"""{doc}"""']
    return [f'"""{wrapped[0]}', *wrapped[1:], '"""']


def _indent(lines: list[str] | str, n: int) -> list[str]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [(" " * n + line) if line else "" for line in lines]


def reference_source(
    doc: str,
    forward_args: str,
    forward: list[str] | str,
    constants: list[tuple[str, int | float]],
    inputs: list[str] | str,
    init_params: str = "",
    init: list[str] | str = (),
    init_inputs: str = "",
    dtypes: tuple[str, ...] = (),
) -> str:
    """A KernelBench-format reference. `forward_args`: after `self`; `forward`: the body;
    `constants`: the module-level sizes and options; `inputs`: the body of get_inputs;
    `init_params` / `init`: __init__'s parameters and body after super(); `init_inputs`:
    what get_init_inputs returns (inside the brackets); `dtypes`: the other dtypes the
    verifier may test (`DTYPES`)."""
    params = f", {init_params}" if init_params else ""
    lines = [
        *_doc(doc),
        "",
        "import torch",
        "import torch.nn as nn",
        "",
        "",
        "class Model(nn.Module):",
        f"    def __init__(self{params}):",
        "        super().__init__()",
        *_indent(list(init), 8),
        "",
        f"    def forward(self, {forward_args}) -> torch.Tensor:",
        *_indent(forward, 8),
        "",
        "",
        *(f"{name} = {value!r}" for name, value in constants),
    ]
    if dtypes:
        lines.append(f"DTYPES = {['float32', *dtypes]!r}")
    lines += [
        "",
        "",
        "def get_inputs():",
        *_indent(inputs, 4),
        "",
        "",
        "def get_init_inputs():",
        f"    return [{init_inputs}]",
        "",
    ]
    return "\n".join(lines)


def solution_source(
    doc: str,
    kernels: str,
    forward_args: str,
    forward: list[str] | str,
    init_params: str = "",
    init: list[str] | str = (),
) -> str:
    """A Triton `ModelNew`: the kernels (source text, `@triton.jit` functions), then the
    module whose __init__ takes `init_params` and whose forward launches them."""
    params = f", {init_params}" if init_params else ""
    lines = [
        *_doc(doc),
        "",
        "import torch",
        "import torch.nn as nn",
        "import triton",
        "import triton.language as tl",
        "",
        "",
        _wrap_defs(kernels),
        "",
        "",
        "class ModelNew(nn.Module):",
        f"    def __init__(self{params}):",
        "        super().__init__()",
        *_indent(list(init), 8),
        "",
        f"    def forward(self, {forward_args}) -> torch.Tensor:",
        *_indent(forward, 8),
        "",
    ]
    return "\n".join(lines)


def indent(text: str, n: int) -> str:
    """`text` with every non-empty line indented by `n` spaces (for kernel templates)."""
    return "\n".join(_indent(text, n))


class Heldout:
    """A family's held-out signatures given by a rule (where they are too many to list):
    `signature in HELDOUT` asks the rule. `description` says it in words for the docs."""

    def __init__(self, rule, description: str):
        self.rule = rule
        self.description = description

    def __contains__(self, signature: object) -> bool:
        return isinstance(signature, str) and bool(self.rule(signature))

    def __repr__(self) -> str:
        return f"Heldout({self.description})"
