"""Run a task with its size constants changed, without editing its file.

KernelBench problems put their sizes in module-level integer constants
(`batch_size = 4096`, `dim = 393216`) that `get_inputs()` and `get_init_inputs()` read.
This module rewrites those constants in the task's AST before executing it, so a task
can be run:

* `full`  - as written, or, given a budget the written sizes exceed, shrunk to it
            (KernelBench's newer problems hold up to 14 GiB of float32 a set: several such
            sets at once, each kept on the host too, exhaust a machine's memory);
* `tiny`  - shrunk to a small element budget (the funnel's cheap first run);
* `small` - shrunk to a budget the CPU interpreter handles in seconds (unchanged for
            tasks already that small);
* `odd`   - shrunk like `small`, then every size moved to a different, odd value, to
            exercise boundary masks and catch kernels that hard-code the test shape.

Sizes are measured with fake tensors (shapes without storage), so a problem that would allocate
4096 x 393216 floats is planned without allocating anything. Structural constants
(`kernel_size`, `stride`, `num_heads`, `reduce_dim`, ...) and values below 8 are never
changed, and a plan is kept only if the reference `forward` still accepts the inputs.

This executes the *reference* (task) code, which is trusted like any input file the user
gives; candidate code never goes through here.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import itertools
import logging
import re
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonrl.astlock import AST_LOCK
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


def _assignments(tree: ast.Module) -> Iterable[tuple[str, ast.AST, ast.AST, int | None]]:
    """(name, value node, statement, tuple position) for each top-level `NAME = value`,
    including `height, width = 32, 32` (position = index in the tuple)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                yield target.id, stmt.value, stmt, None
            elif (
                isinstance(target, ast.Tuple)
                and isinstance(stmt.value, ast.Tuple)
                and len(target.elts) == len(stmt.value.elts)
            ):
                for i, (t, v) in enumerate(zip(target.elts, stmt.value.elts, strict=True)):
                    if isinstance(t, ast.Name):
                        yield t.id, v, stmt, i
        elif (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.value is not None
        ):
            yield stmt.target.id, stmt.value, stmt, None


def size_constants(source: str, where: str = "<task>") -> dict[str, SizeValue]:
    """Module-level integer (or tuple-of-integer) literal constants, in file order.

    Constants computed from other names (`M = N * 2`) are left out: they follow the
    constants they are computed from when those change.
    """
    tree = parse_source(source, where)
    out: dict[str, SizeValue] = {}
    for name, value, _, _ in _assignments(tree):
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
        for name, old, stmt, pos in list(_assignments(node)):
            if name not in self.overrides:
                continue
            new = self.overrides[name]
            if isinstance(new, tuple):
                seq = ast.List if isinstance(old, ast.List) else ast.Tuple
                value = seq([ast.Constant(v) for v in new], ast.Load())
            else:
                value = ast.Constant(new)
            ast.copy_location(value, old)
            if pos is None:
                stmt.value = value
            else:
                stmt.value.elts[pos] = value
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
    with AST_LOCK:
        code = compile(tree, where, "exec")
    exec(code, module.__dict__)
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
        """Elements in inputs + parameters (+ outputs), measured without allocating
        (fake tensors, else the meta device). None when the task cannot be built so."""
        return self.measure(with_output)[0]

    def measure(self, with_output: bool = True) -> tuple[int | None, bool]:
        """`footprint`, and whether the reference's forward ran on fake tensors (False
        also for an op without a fake kernel: the inputs and parameters still count)."""
        for kind in ("fake", "meta"):
            try:
                with _no_alloc(kind):
                    inputs = self.inputs()
                    total = sum(t.numel() for t in _tensors(inputs))
                    model = self.model()
                    total += sum(p.numel() for p in model.parameters())
                    total += sum(b.numel() for b in model.buffers())
                    ran = False
                    if with_output:
                        try:
                            with torch.no_grad():
                                total += sum(t.numel() for t in _tensors(model(*inputs)))
                            ran = kind == "fake"
                        except Exception:  # an op without a fake kernel; inputs still count
                            pass
                return total, ran
            except Exception as e:
                log.debug("%s footprint failed for %s: %s", kind, self.module.__file__, e)
        return None, False

    def forward_ok(self) -> bool:
        """Does the reference accept these sizes? Fake tensors first, then a real CPU run."""
        for kind in ("fake", "cpu"):
            try:
                with _no_alloc(kind), torch.no_grad():
                    self.model(0)(*self.inputs(0))
                return True
            except Exception as e:
                log.debug("forward (%s) failed for %s: %s", kind, self.overrides, e)
        return False


@contextlib.contextmanager
def _no_alloc(kind: str):
    """`fake`: FakeTensorMode (shapes only, handles most ops); `meta`: the meta device;
    `cpu`: a real run."""
    if kind == "fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            yield
    elif kind == "meta":
        with torch.device("meta"):
            yield
    else:
        yield


def _scaled(value: SizeValue, shift: int) -> SizeValue:
    """Halve a size `shift` times (never below MIN_SCALABLE). Halving keeps the power-of-two
    factors that group counts, head counts and tile sizes usually divide."""

    def one(v: int) -> int:
        if v < MIN_SCALABLE:
            return v
        return max(MIN_SCALABLE, (v + (1 << shift) // 2) >> shift)

    return tuple(one(v) for v in value) if isinstance(value, tuple) else one(value)


def _odd(value: SizeValue) -> SizeValue:
    def one(v: int) -> int:
        if v < MIN_SCALABLE:
            return v
        return v + 1 if v % 2 == 0 else v + 2

    return tuple(one(v) for v in value) if isinstance(value, tuple) else one(value)


def _shrink(source: str, where: str, budget: int) -> dict[str, SizeValue]:
    """Halve sizes until the footprint fits `budget`.

    First every size together (the task keeps its proportions); when a plan is rejected
    (a group count no longer dividing the channels), each remaining size alone, round by
    round, keeping only halvings the reference accepts. If nothing fits, the smallest
    plan that builds is used, with a warning. Where the reference's forward runs on fake
    tensors at the written sizes, a plan it does not run on is rejected too (sizes tied
    only at the written values: `LayerNorm(out_channels)` over a width that must equal it).
    """
    consts = {k: v for k, v in size_constants(source, where).items() if is_scalable(k, v)}
    must_run = False

    def footprint(shifts: dict[str, int]) -> int | None:
        overrides = _plan(consts, shifts)
        inst = TaskInstance(build_module(source, overrides, where), "plan", overrides)
        n, ran = inst.measure()
        return None if must_run and not ran else n

    shifts = dict.fromkeys(consts, 0)
    size, must_run = TaskInstance(build_module(source, {}, where), "plan", {}).measure()
    if size is None:
        raise ShapeError(
            f"{where}: the task cannot be built on the meta device; use shape mode "
            "'full' or make get_inputs() device-agnostic"
        )
    while size > budget:  # phase 1: all sizes together
        trial = {k: s + 1 for k, s in shifts.items()}
        n = footprint(trial) if _plan(consts, trial) != _plan(consts, shifts) else None
        if n is None:
            break
        shifts, size = trial, n
    frozen: set[str] = set()
    while size > budget and len(frozen) < len(consts):  # phase 2: one size at a time
        for k in consts:
            if k in frozen or size <= budget:
                continue
            trial = {**shifts, k: shifts[k] + 1}
            n = footprint(trial) if _plan(consts, trial) != _plan(consts, shifts) else None
            if n is None:
                frozen.add(k)
            else:
                shifts, size = trial, n
    if size > budget:
        log.warning(
            "%s: %d elements at the smallest sizes the task accepts (budget %d)",
            where,
            size,
            budget,
        )
    return _plan(consts, shifts)


def _plan(consts: dict[str, SizeValue], shifts: dict[str, int]) -> dict[str, SizeValue]:
    scaled = {k: _scaled(v, shifts[k]) for k, v in consts.items()}
    return {k: v for k, v in scaled.items() if v != consts[k]}


def plan_shapes(
    source: str, mode: str, where: str = "<task>", budget: int | None = None
) -> dict[str, SizeValue]:
    """Overrides of the task's size constants for `mode` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown shape mode {mode!r}; choose one of {MODES}")
    return dict(_plan_cached(source, mode, where, budget))


@functools.lru_cache(maxsize=512)
def _plan_cached(
    source: str, mode: str, where: str, budget: int | None
) -> tuple[tuple[str, SizeValue], ...]:
    """`plan_shapes`, once per task, mode and budget: every evaluation of a task plans the
    same sizes (each input set, each sample), and shrinking builds the task many times."""
    return tuple(_plan_shapes(source, mode, where, budget).items())


def _plan_shapes(source: str, mode: str, where: str, budget: int | None) -> dict[str, SizeValue]:
    if mode == "full":
        if not budget:
            return {}
        size, _ = TaskInstance(build_module(source, {}, where), "plan", {}).measure()
        if size is None or size <= budget:
            return {}
    budget = budget or DEFAULT_BUDGETS[mode]
    base = _shrink(source, where, budget)
    if not TaskInstance(build_module(source, base, where), mode, base).forward_ok():
        # sizes tied in a way halving breaks (LayerNorm(channels) over the last dim)
        log.warning("%s: shrunk sizes %s rejected by the reference; using full", where, base)
        base = {}
    if mode != "odd":
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
