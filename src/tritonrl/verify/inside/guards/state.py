"""What the guards share across their modules, and the registry of patched entry points.

`STATE` is per thread: `pause` > 0 while Triton's own launch machinery runs (the op
audit and the audit hook ignore what happens then), `bench` > 0 while the autotuner
benchmarks configs (launches are not counted). `COUNTERS` and `AUDITS` are the active
`LaunchCounter`s and `OpAudit`s, guarded by `LOCK`. `patch(owner, attr, make)` replaces
an entry point with a wrapper and records it in `PATCHES`, which `hooks_intact` and
`capture_timers` re-check (docs/hacks.md #12, #13). `SINKS` are callables given each new
flag-prefixed finding the moment a guard sees it (`report`): the worker's findings log
(`tritonrl.verify.findings`), so that a process that dies right after a finding still
leaves it behind.

What it does NOT do: install anything (see `hooks.install_hooks`) or decide anything.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonrl.verify.inside.guards.hooks import LaunchCounter
    from tritonrl.verify.inside.guards.ops import OpAudit

log = logging.getLogger(__name__)


class _LaunchState(threading.local):
    pause = 0  # > 0 while Triton's own launch machinery runs: the op audit ignores ops
    bench = 0  # > 0 while the autotuner benchmarks configs: launches are not counted


STATE = _LaunchState()
LOCK = threading.Lock()
COUNTERS: list[LaunchCounter] = []
AUDITS: list[OpAudit] = []
# label -> (owner, attribute, original, wrapper)
PATCHES: dict[str, tuple[Any, str, Any, Any]] = {}
# Called with each new flag-prefixed finding as it happens ("ctypes: ...").
SINKS: list[Callable[[str], None]] = []


def report(problem: str) -> None:
    """Hand a finding to every sink now; a failing sink never breaks the guarded call."""
    for sink in list(SINKS):
        with contextlib.suppress(Exception):  # a sink must not turn a finding into a crash
            sink(problem)


def patch(owner: Any, attr: str, make: Callable[[Callable], Callable]) -> None:
    original = inspect.getattr_static(owner, attr, None)
    if original is None:
        log.debug("no %s.%s to patch on this version", owner, attr)
        return
    if isinstance(original, (staticmethod, classmethod)):
        original = original.__func__
    wrapper = make(original)
    wrapper.__wrapped__ = original
    setattr(owner, attr, wrapper)
    if isinstance(owner, type):
        label = f"{owner.__module__}.{owner.__qualname__}.{attr}"
    else:
        label = f"{owner.__name__}.{attr}"
    PATCHES[label] = (owner, attr, original, wrapper)


def raw(obj: Any) -> Any:
    return obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
