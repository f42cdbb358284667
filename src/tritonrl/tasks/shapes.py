"""Run a task with its size constants changed, without editing its file.

KernelBench problems put their sizes in module-level integer constants
(`batch_size = 4096`, `dim = 393216`) that `get_inputs()` and `get_init_inputs()` read.
This module rewrites those constants in the task's AST before executing it, so a task
can be run:

* `full`  - as written;
* `tiny`  - shrunk to a small element budget (the funnel's cheap first run);
* `small` - shrunk to a budget the CPU interpreter handles in seconds (unchanged for
            tasks already that small);
* `odd`   - shrunk like `small`, then every size moved to a different, odd value, to
            exercise boundary masks and catch kernels that hard-code the test shape.

Sizes are measured on PyTorch's `meta` device, so a problem that would allocate
4096 x 393216 floats is planned without allocating anything. Structural constants
(`kernel_size`, `stride`, `num_heads`, `reduce_dim`, ...) and values below 8 are never
changed, and a plan is kept only if the reference `forward` still accepts the inputs.

This executes the *reference* (task) code, which is trusted like any input file the user
gives; candidate code never goes through here.
"""

from __future__ import annotations

import ast
import itertools
import logging
import re
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonrl.tasks.task import Task, parse_source, validate_reference

log = logging.getLogger(__name__)

SizeValue = int | tuple[int, ...]
MODES = ("full", "tiny", "small", "odd")
# Budgets in elements: inputs + parameters + outputs together.
DEFAULT_BUDGETS = {"tiny": 1 << 13, "small": 1 << 18, "odd": 1 << 18}
# Sizes below this are treated as structural (kernel sizes, strides, small channel counts).
MIN_SCALABLE = 8
_STRUCTURAL = re.compile(
    r"(^|_)(axis|axes|kernel|kernel_size|stride|strides|pad|padding|dilation|"
    r"groups?|heads?|topk|top_k|output_padding|scale|factor|upscale|downscale|"
    r"ndim|rank|order|reduce_dim|reduction_dim|split)(_|$)",
    re.IGNORECASE,
)
_counter = itertools.count()


class ShapeError(ValueError):
    """A task whose sizes cannot be planned; the message names the constants tried."""


# --------------------------------------------------------------------------- constants


def _int_value(node: ast.AST) -> int | None:
    """Value of an integer constant expression with no names (`2048 * 2`, `1 << 12`)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int_value(node.operand)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _int_value(node.left), _int_value(node.right)
        if a is None or b is None:
            return None
        ops = {
            ast.Add: lambda: a + b,
            ast.Sub: lambda: a - b,
            ast.Mult: lambda: a * b,
            ast.FloorDiv: lambda: a // b if b else None,
            ast.Pow: lambda: a**b if 0 <= b <= 64 else None,
            ast.LShift: lambda: a << b if 0 <= b <= 64 else None,
        }
        fn = ops.get(type(node.op))
        return fn() if fn else None
    return None


def _size_value(node: ast.AST) -> SizeValue | None:
    v = _int_value(node)
    if v is not None:
        return v
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        vals = [_int_value(e) for e in node.elts]
        if all(x is not None for x in vals):
            return tuple(vals)  # type: ignore[arg-type]
    return None


def _assignments(tree: ast.Module) -> Iterable[tuple[str, ast.AST, ast.AST]]:
    """(name, value node, statement) for each top-level `NAME = value`."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                yield target.id, stmt.value, stmt
        elif (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.value is not None
        ):
            yield stmt.target.id, stmt.value, stmt


def size_constants(source: str, where: str = "<task>") -> dict[str, SizeValue]:
    """Module-level integer (or tuple-of-integer) literal constants, in file order.

    Constants computed from other names (`M = N * 2`) are left out: they follow the
    constants they are computed from when those change.
    """
    tree = parse_source(source, where)
    out: dict[str, SizeValue] = {}
    for name, value, _ in _assignments(tree):
        v = _size_value(value)
        if v is not None and not isinstance(v, bool):
            out[name] = v
    return out


def is_scalable(name: str, value: SizeValue) -> bool:
    """Whether a constant is a size that planning may change."""
    if _STRUCTURAL.search(name):
        return False
    values = value if isinstance(value, tuple) else (value,)
    return any(v >= MIN_SCALABLE for v in values)


class _Rewriter(ast.NodeTransformer):
    def __init__(self, overrides: dict[str, SizeValue]):
        self.overrides = overrides

    def visit_Module(self, node: ast.Module) -> ast.Module:
        for name, _, stmt in _assignments(node):
            if name in self.overrides:
                new = self.overrides[name]
                if isinstance(new, tuple):
                    value = ast.Tuple([ast.Constant(v) for v in new], ast.Load())
                else:
                    value = ast.Constant(new)
                stmt.value = ast.copy_location(value, stmt.value)
                ast.fix_missing_locations(stmt)
        return node


def build_module(
    source: str, overrides: dict[str, SizeValue] | None = None, where: str = "<task>"
) -> types.ModuleType:
    """Execute a reference source as a fresh module, with size constants replaced."""
    tree = validate_reference(source, where)
    unknown = set(overrides or {}) - set(size_constants(source, where))
    if unknown:
        raise ShapeError(f"{where}: no module-level size constant named {sorted(unknown)}")
    if overrides:
        tree = _Rewriter(overrides).visit(tree)
    module = types.ModuleType(f"tritonrl_task_{next(_counter)}")
    module.__file__ = where
    exec(compile(tree, where, "exec"), module.__dict__)
    if not hasattr(module, "get_init_inputs"):
        module.get_init_inputs = lambda: []
    return module


# --------------------------------------------------------------------------- instances


def _tensors(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


@dataclass
class TaskInstance:
    """A task's module executed with one set of sizes."""

    module: types.ModuleType
    mode: str
    overrides: dict[str, SizeValue] = field(default_factory=dict)

    def init_inputs(self) -> list:
        return list(self.module.get_init_inputs())

    def inputs(self, seed: int | None = None) -> list:
        if seed is not None:
            torch.manual_seed(seed)
        return list(self.module.get_inputs())

    def model(self, seed: int | None = None) -> torch.nn.Module:
        if seed is not None:
            torch.manual_seed(seed)
        return self.module.Model(*self.init_inputs())

    def footprint(self, with_output: bool = True) -> int | None:
        """Elements in inputs + parameters (+ outputs), measured on the meta device.

        None when the task cannot be built on the meta device at all.
        """
        try:
            with torch.device("meta"):
                inputs = self.inputs()
                total = sum(t.numel() for t in _tensors(inputs))
                model = self.model()
                total += sum(p.numel() for p in model.parameters())
                total += sum(b.numel() for b in model.buffers())
                if with_output:
                    try:
                        with torch.no_grad():
                            total += sum(t.numel() for t in _tensors(model(*inputs)))
                    except Exception:  # some ops have no meta kernel; inputs still count
                        pass
            return total
        except Exception as e:
            log.debug("meta footprint failed for %s: %s", self.module.__file__, e)
            return None

    def forward_ok(self) -> bool:
        """Does the reference accept these sizes? Meta device first, then a real CPU run."""
        for device in ("meta", "cpu"):
            try:
                with torch.device(device), torch.no_grad():
                    self.model(0)(*self.inputs(0))
                return True
            except Exception as e:
                log.debug("forward on %s failed for %s: %s", device, self.overrides, e)
                if device == "cpu":
                    return False
        return False


def _scaled(value: SizeValue, factor: float) -> SizeValue:
    def one(v: int) -> int:
        if v < MIN_SCALABLE:
            return v
        return max(MIN_SCALABLE, int(round(v * factor)))

    return tuple(one(v) for v in value) if isinstance(value, tuple) else one(value)


def _odd(value: SizeValue) -> SizeValue:
    def one(v: int) -> int:
        if v < MIN_SCALABLE:
            return v
        return v + 1 if v % 2 == 0 else v + 2

    return tuple(one(v) for v in value) if isinstance(value, tuple) else one(value)


def _shrink(source: str, where: str, budget: int) -> dict[str, SizeValue]:
    """The largest uniform scale factor whose footprint fits `budget` (bisection in log
    space: every size shrinks by the same factor, so the task keeps its proportions)."""
    consts = {k: v for k, v in size_constants(source, where).items() if is_scalable(k, v)}

    def plan(factor: float) -> dict[str, SizeValue]:
        scaled = {k: _scaled(v, factor) for k, v in consts.items()}
        return {k: v for k, v in scaled.items() if v != consts[k]}

    def size(factor: float) -> int:
        overrides = plan(factor)
        n = TaskInstance(build_module(source, overrides, where), "plan", overrides).footprint()
        if n is None:
            raise ShapeError(
                f"{where}: cannot measure the task's inputs on the meta device; "
                "run it in mode 'full' or make get_inputs() device-agnostic"
            )
        return n

    if size(1.0) <= budget:
        return {}
    lo, hi = -40.0, 0.0  # log2 of the factor: size(2**lo) is at the floor, size(2**hi) > budget
    if size(2.0**lo) > budget:
        log.warning(
            "%s: %d elements at the smallest sizes (budget %d)", where, size(2.0**lo), budget
        )
        return plan(2.0**lo)
    for _ in range(16):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if size(2.0**mid) <= budget else (lo, mid)
    return plan(2.0**lo)


def plan_shapes(
    source: str, mode: str, where: str = "<task>", budget: int | None = None
) -> dict[str, SizeValue]:
    """Overrides of the task's size constants for `mode` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown shape mode {mode!r}; choose one of {MODES}")
    if mode == "full":
        return {}
    budget = budget or DEFAULT_BUDGETS[mode]
    base = _shrink(source, where, budget)
    if mode != "odd":
        if not TaskInstance(build_module(source, base, where), mode, base).forward_ok():
            log.warning("%s: shrunk sizes %s rejected by the reference; using full", where, base)
            return {}
        return base
    consts = size_constants(source, where)
    current = {k: base.get(k, v) for k, v in consts.items()}
    scalable = [k for k, v in consts.items() if is_scalable(k, v)]
    all_odd = {**base, **{k: _odd(current[k]) for k in scalable}}
    if TaskInstance(build_module(source, all_odd, where), mode, all_odd).forward_ok():
        return all_odd
    # Some sizes are tied together (divisibility, matching dims): add odd ones greedily.
    plan = dict(base)
    for k in scalable:
        trial = {**plan, k: _odd(current[k])}
        if TaskInstance(build_module(source, trial, where), mode, trial).forward_ok():
            plan = trial
    if plan == base:
        log.warning("%s: no size could be made odd; the odd run uses even sizes", where)
    return plan


def instantiate(task: Task | str, mode: str = "full", budget: int | None = None) -> TaskInstance:
    """Build a task (or reference source) with sizes planned for `mode`."""
    source, where = (task.source, task.origin) if isinstance(task, Task) else (task, "<task>")
    overrides = plan_shapes(source, mode, where, budget)
    return TaskInstance(build_module(source, overrides, where), mode, overrides)
