"""Launch hooks (docs/hacks.md #2, kernel never launched): wrappers for Triton's entry points.

The interpreter's `GridExecutor.__call__`, `JITFunction.run` and
`CompiledKernel.__getitem__` on GPU record each launch (kernel name, grid, number of
programs) into the active `LaunchCounter`s; the autotuner's benchmark loop (`_bench`)
counts its launches apart. While Triton's own machinery runs (argument copies,
compilation, benchmarking) the op audit is paused; grid callables and pre-run hooks are
user code and are audited (`_unpaused`). `hooks.install_hooks` puts the wrappers in
place.

What it does NOT do: see launches that bypass these entry points. Inductor-compiled
kernels launch through their own launchers and are not counted (the static check
refuses torch.compile).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tritonrl.verify.inside.guards.state import COUNTERS, LOCK, STATE, patch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel's name, its grid, and its number of programs
    (None when the grid could not be evaluated)."""

    kernel: str
    grid: tuple | None
    programs: int | None


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    STATE.pause += 1
    try:
        yield
    finally:
        STATE.pause -= 1


def _unpaused(fn: Callable) -> Callable:
    """Run `fn` (user code called from inside launch machinery: a grid callable, a
    pre-run hook) with the op audit listening again."""

    def call(*args: Any, **kwargs: Any) -> Any:
        saved, STATE.pause = STATE.pause, 0
        try:
            return fn(*args, **kwargs)
        finally:
            STATE.pause = saved

    return call


class _GridRecorder:
    """Wraps a launch grid (tuple or callable) and remembers what it evaluated to."""

    def __init__(self, grid: Any):
        self.grid = grid
        self.value: tuple | None = None if callable(grid) else _as_grid(grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = _unpaused(self.grid)(*args, **kwargs)
        self.value = _as_grid(result)
        return result

    def wrapped(self) -> Any:
        return self if callable(self.grid) else self.grid


def _as_grid(grid: Any) -> tuple | None:
    try:
        return tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        return None


def _record_launch(kernel: str, grid: tuple | None) -> None:
    if STATE.bench:
        for c in list(COUNTERS):
            c.benchmark_launches += 1
        return
    programs = math.prod(grid) if grid is not None else None
    launch = Launch(kernel, grid, programs)
    with LOCK:
        counters = list(COUNTERS)
    for c in counters:
        (c.empty_launches if programs == 0 else c.launches).append(launch)
    log.debug("launch %s grid=%s", kernel, grid)


def _kernel_name(fn: Any) -> str:
    inner = getattr(fn, "fn", fn)
    return getattr(inner, "__name__", type(fn).__name__)


def wrap_jit_run(original: Callable) -> Callable:
    """JITFunction.run (GPU): paused for the op audit, except for user callables."""

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _GridRecorder(kwargs.get("grid"))
        if "grid" in kwargs:
            kwargs["grid"] = recorder.wrapped()
        hooks = getattr(self, "pre_run_hooks", None)
        if hooks:
            self.pre_run_hooks = [_unpaused(h) for h in hooks]
        try:
            with _paused():
                result = original(self, *args, **kwargs)
        finally:
            if hooks:
                self.pre_run_hooks = hooks
        if not kwargs.get("warmup", False):
            _record_launch(_kernel_name(self), recorder.value)
        return result

    return run


def _wrap_grid_executor(original: Callable, pause_all: bool) -> Callable:
    """The interpreter's GridExecutor.__call__: one launch. Only Triton's argument
    copies are paused (see `_wrap_paused`), so torch ops a kernel body runs under the
    interpreter are audited; on Triton versions without those methods the whole call
    is paused."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _GridRecorder(self.grid)
        self.grid = recorder.wrapped()
        with _paused() if pause_all else contextlib.nullcontext():
            result = original(self, *args, **kwargs)
        _record_launch(_kernel_name(self), recorder.value)
        return result

    return call


def wrap_compiled_getitem(original: Callable) -> Callable:
    """CompiledKernel.__getitem__ (GPU): `kernel.warmup(...)[grid](...)` launches a
    precompiled kernel without JITFunction.run (the Triton softmax tutorial does this)."""

    def getitem(self: Any, grid: Any) -> Callable:
        with _paused():
            runner = original(self, grid)

        def launch(*args: Any, **kwargs: Any) -> Any:
            with _paused():
                result = runner(*args, **kwargs)
            _record_launch(getattr(self, "name", "compiled_kernel"), _as_grid(grid))
            return result

        return launch

    return getitem


def _wrap_paused(original: Callable) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        with _paused():
            return original(*args, **kwargs)

    return call


def wrap_bench(original: Callable) -> Callable:
    """Autotuner._bench: benchmark launches are neither counted nor audited."""

    def call(*args: Any, **kwargs: Any) -> Any:
        STATE.bench += 1
        try:
            with _paused():
                return original(*args, **kwargs)
        finally:
            STATE.bench -= 1

    return call


def install_interpreter_hooks() -> None:
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - every Triton 3.x ships the interpreter
        log.warning("triton.runtime.interpreter missing: launches under it are not counted")
        return
    executor = getattr(interpreter, "GridExecutor", None)
    if executor is None:  # pragma: no cover
        log.warning("triton interpreter has no GridExecutor: launches are not counted")
        return
    narrow = ("_init_args_hst", "_restore_args_dev")
    pause_all = not all(hasattr(executor, n) for n in narrow)
    patch(executor, "__call__", lambda orig: _wrap_grid_executor(orig, pause_all))
    if not pause_all:
        for n in narrow:
            patch(executor, n, _wrap_paused)
