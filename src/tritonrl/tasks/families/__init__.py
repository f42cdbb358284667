"""Task families: parameterised generators of KernelBench-format tasks, each task with a
Triton solution written here (the project's own KernelBook).

    family_task("matmul", 7)                 the task `fam:matmul:7` (KernelBench-like sizes)
    family_task("matmul", 7, small=True)     the same program at sizes for the CPU interpreter
    draw(100, seed=0, split="train")         100 tasks over all families, none held out
    draw(20, seed=0, split="heldout", families=["norms"])
    load_spec("fam:matmul:50:3:heldout")     the task spec `tritonrl.tasks.load_tasks` reads

A task is deterministic in (family, seed): one string-seeded RNG draws the options, then
the sizes. Its signature is the family and the options that change the program (not the
sizes or scalar constants); each family lists a fixed set of held-out signatures
(`HELDOUT` in its module) that no training task has, so a model can be scored on
programs it never saw. `draw` walks seeds `seed, seed + 1, ...` round-robin over the
families and keeps the tasks of the asked split, so a task's id `fam:<family>:<seed>`
names one source whichever split asked for it.

Task spec: `fam:[FAMILY:]N[:SEED][:SPLIT]` with SPLIT one of train, heldout, all (default
all; seed 0) and `:small` at the end for interpreter sizes (`fam:norms:8:0:train:small`).

What it does NOT do: verify the solutions (the tests run every family through the
verifier) or decontaminate against KernelBench (the families are written here; their
programs are KernelBench-like by design).
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from tritonrl.config import PARTIAL_TORCH_OPS, VerifyConfig
from tritonrl.tasks.families import (
    conv,
    elementwise,
    fused,
    losses,
    matmul,
    norms,
    pooling,
    reductions,
    scans,
    softmax,
)
from tritonrl.tasks.families.base import Drawn, family_rng
from tritonrl.tasks.task import Task

FAMILIES: dict[str, ModuleType] = {
    m.NAME: m
    for m in (matmul, softmax, norms, reductions, pooling, scans, losses, elementwise, fused, conv)
}
SPLITS = ("train", "heldout", "all")
PREFIX = "fam:"


def _family(name: str) -> ModuleType:
    if name not in FAMILIES:
        raise ValueError(f"unknown task family {name!r}; the families are {', '.join(FAMILIES)}")
    return FAMILIES[name]


def draw_one(family: str, seed: int, small: bool = False) -> Drawn:
    """The drawn program of (family, seed)."""
    return _family(family).draw(family_rng(family, seed), seed, small)


def is_heldout(signature: str) -> bool:
    family = signature.split(":", 1)[0]
    return signature in _family(family).HELDOUT


def family_task(family: str, seed: int, small: bool = False) -> Task:
    """The task `fam:<family>:<seed>` (`...:small` at interpreter sizes)."""
    d = draw_one(family, seed, small)
    suffix = ":small" if small else ""
    return Task(
        id=f"{PREFIX}{family}:{seed}{suffix}",
        level=d.level,
        name=d.name,
        source=d.source,
        origin=f"family:{family}:{seed}{suffix}",
        solution=d.solution,
    )


def signature(task_id: str) -> str:
    """The signature of a family task, from its id."""
    family, seed = task_id.removeprefix(PREFIX).split(":")[:2]
    return draw_one(family, int(seed), small=True).signature


def policy(family: str) -> str:
    """The verifier policy a family's solutions need: strict, or partial (torch for the
    named ops of `tritonrl.config.PARTIAL_TORCH_OPS`)."""
    return _family(family).POLICY


def task_policy(task_id: str) -> str | None:
    """The policy the solution of the family task `task_id` needs; None for a task of no
    family."""
    name = task_id.removeprefix(PREFIX).split(":", 1)[0] if task_id.startswith(PREFIX) else ""
    return FAMILIES[name].POLICY if name in FAMILIES else None


def verify_config_for(config: VerifyConfig, task_id: str) -> VerifyConfig:
    """`config` as the task `task_id` is prompted and verified under: where `config` is
    strict, a family task whose solution needs the partial policy (the fused family's
    layer left to torch) gets it, with `PARTIAL_TORCH_OPS`, as its prepared prompts say;
    every other task gets `config` itself."""
    if config.policy == "strict" and task_policy(task_id) == "partial":
        return dataclasses.replace(config, policy="partial",
                                   allowed_torch_ops=list(PARTIAL_TORCH_OPS))  # fmt: skip
    return config


def draw(
    n: int,
    seed: int = 0,
    split: str = "train",
    families: list[str] | tuple[str, ...] | None = None,
    small: bool = False,
) -> list[Task]:
    """`n` tasks of `split` from `families` (all by default), round-robin over the families
    from seed `seed` on; a task whose source repeats an earlier one is skipped."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    if n < 0:
        raise ValueError(f"the number of tasks must be >= 0, not {n}")
    names = list(families or FAMILIES)
    for name in names:
        _family(name)
    tasks: list[Task] = []
    seen: set[str] = set()
    for s in range(seed, seed + 50 * n + 50):
        for name in names:
            if len(tasks) == n:
                return tasks
            d = draw_one(name, s, small)
            held = d.signature in FAMILIES[name].HELDOUT
            if (split == "train" and held) or (split == "heldout" and not held):
                continue
            if d.source in seen:
                continue
            seen.add(d.source)
            tasks.append(family_task(name, s, small))
    if len(tasks) < n:
        raise ValueError(f"only {len(tasks)} {split} tasks of {names} from seed {seed}")
    return tasks


def is_spec(spec: str) -> bool:
    return spec.startswith(PREFIX)


def load_spec(spec: str) -> list[Task]:
    """The tasks of a spec `fam:[FAMILY:]N[:SEED][:SPLIT][:small]` (module docstring)."""
    parts = spec.removeprefix(PREFIX).split(":")
    small = parts[-1] == "small"
    parts = parts[:-1] if small else parts
    families = None
    if parts and parts[0] in FAMILIES:
        families, parts = [parts[0]], parts[1:]
    split = "all"
    if parts and parts[-1] in SPLITS:
        split, parts = parts[-1], parts[:-1]
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        raise ValueError(
            f"{spec}: a family spec is fam:[FAMILY:]N[:SEED][:train|heldout|all][:small] "
            f"(FAMILY one of {', '.join(FAMILIES)}), e.g. fam:matmul:20:0:train"
        )
    n, seed = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    return draw(n, seed, split, families, small)


__all__ = [
    "FAMILIES",
    "PREFIX",
    "SPLITS",
    "Drawn",
    "draw",
    "draw_one",
    "family_task",
    "is_heldout",
    "is_spec",
    "load_spec",
    "policy",
    "signature",
]
