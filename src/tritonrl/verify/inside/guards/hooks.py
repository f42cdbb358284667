"""Installing the guards' hooks, checking they are still there, and counting launches.

`install_hooks()` patches, at class level, Triton's launch entry points (`launches`),
torch's host round-trips and the ways to switch the op audit's dispatch mode off
(`host`), and thread starts (#10); it also adds the Python audit hook (`audit`). Call it
BEFORE the candidate module is imported, so that a candidate cannot keep a reference to
an unpatched entry point. It is idempotent and changes no behaviour. `hooks_intact()`
names the patched entry points that no longer hold our wrapper (docs/hacks.md #12, #13);
`LaunchCounter` counts launches while active (#2).

What it does NOT do: defend the hooks. Code in the same process can restore the
originals; `hooks_intact` and `timers_intact` re-check identities after the candidate
ran, and the static checks flag the monkeypatching it takes.
"""

from __future__ import annotations

import inspect
import logging
import threading

from tritonrl.verify.inside.guards.audit import install_audit_hook
from tritonrl.verify.inside.guards.host import (
    install_dispatch_hooks,
    install_host_hooks,
    wrap_thread_start,
)
from tritonrl.verify.inside.guards.launches import (
    Launch,
    install_interpreter_hooks,
    wrap_bench,
    wrap_compiled_getitem,
    wrap_jit_run,
)
from tritonrl.verify.inside.guards.state import COUNTERS, LOCK, PATCHES, patch, raw

log = logging.getLogger(__name__)


def install_hooks() -> list[str]:
    """Patch launch entry points and host round-trips (idempotent); returns the labels of
    what is patched. Must run before candidate code is imported (#2, #1)."""
    with LOCK:
        if PATCHES:
            return list(PATCHES)
        from triton.runtime import autotuner
        from triton.runtime import jit as triton_jit

        patch(triton_jit.JITFunction, "run", wrap_jit_run)
        patch(autotuner.Autotuner, "_bench", wrap_bench)
        try:
            from triton.compiler.compiler import CompiledKernel

            patch(CompiledKernel, "__getitem__", wrap_compiled_getitem)
        except ImportError:  # pragma: no cover
            log.warning("triton.compiler.compiler.CompiledKernel missing: not hooked")
        install_interpreter_hooks()
        install_host_hooks()
        install_dispatch_hooks()
        import _thread

        patch(_thread, "start_new_thread", wrap_thread_start)
        if hasattr(threading, "_start_new_thread"):
            patch(threading, "_start_new_thread", wrap_thread_start)
        install_audit_hook()
        log.debug("installed hooks: %s", sorted(PATCHES))
        return list(PATCHES)


def hooks_intact() -> list[str]:
    """Patched entry points that no longer hold our wrapper (#12, #13)."""
    return [
        f"timer_tampering: launch hook {label} was replaced"
        for label, (owner, attr, _, wrapper) in PATCHES.items()
        if raw(inspect.getattr_static(owner, attr, None)) is not wrapper
    ]


class LaunchCounter:
    """Counts Triton kernel launches while active (docs/hacks.md #2, kernel never launched).

    Works under the interpreter (GridExecutor) and on GPU (JITFunction.run), through
    @triton.autotune and @triton.heuristics (one user launch counts once; the autotuner's
    benchmark launches go to `benchmark_launches`). Launches with an empty grid (zero
    programs: nothing runs) go to `empty_launches` and do not count.
    """

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.empty_launches: list[Launch] = []
        self.benchmark_launches = 0

    @property
    def count(self) -> int:
        return len(self.launches)

    def install(self) -> LaunchCounter:
        """Install the hooks and start counting (until `uninstall()`)."""
        install_hooks()
        with LOCK:
            if self not in COUNTERS:
                COUNTERS.append(self)
        return self

    def uninstall(self) -> None:
        with LOCK:
            if self in COUNTERS:
                COUNTERS.remove(self)

    @property
    def active(self) -> bool:
        return self in COUNTERS

    def reset(self) -> None:
        """Forget the launches seen so far (between calls)."""
        self.launches.clear()
        self.empty_launches.clear()
        self.benchmark_launches = 0

    def __enter__(self) -> LaunchCounter:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
