"""Background threads (docs/hacks.md #10): the threads alive before and after a call.

`thread_snapshot` records Python thread idents and OS thread ids (/proc/self/task);
`new_threads` names the threads that appeared since (Python threads by name, OS threads
by count, those the CUDA runtime starts itself excepted). `warm_runtime` starts the
pools torch, numpy's BLAS and CUDA create lazily, so that they are not blamed on the
candidate.

What it does NOT do: stop a thread, or see one that is already gone when threads are
counted (the thread-start hook in `host` records those).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ThreadSnapshot:
    python: frozenset[int]  # threading idents
    os_tids: frozenset[int] | None  # /proc/self/task entries (None where unavailable)


def _os_tids() -> frozenset[int] | None:
    try:
        return frozenset(int(n) for n in os.listdir("/proc/self/task"))
    except OSError:
        return None


def thread_snapshot(warm: str | None = "cpu") -> ThreadSnapshot:
    """Threads alive now (docs/hacks.md #10). Torch, numpy's BLAS and CUDA start their pools
    lazily on first use; `warm` (a device, or None) runs `warm_runtime` first so that
    they are not blamed on the candidate. Pass the device the candidate will use."""
    if warm is not None:
        warm_runtime(warm)
    return ThreadSnapshot(frozenset(t.ident for t in threading.enumerate()), _os_tids())


def new_threads(before: ThreadSnapshot, os_threads: bool = True) -> list[str]:
    """Threads alive now that were not in `before` (docs/hacks.md #10, background threads):
    Python threads by name, and OS threads (e.g. `_thread`, native code) by count."""
    now = thread_snapshot()
    fresh = [t for t in threading.enumerate() if t.ident not in before.python and t.is_alive()]
    problems = [f"background_thread: python thread {t.name!r} still running" for t in fresh]
    if os_threads and before.os_tids is not None and now.os_tids is not None:
        known = {getattr(t, "native_id", None) for t in fresh}
        extra = [
            (tid, name)
            for tid in sorted(now.os_tids - before.os_tids - known)
            if not (name := _thread_name(tid)).startswith(_RUNTIME_THREAD_PREFIXES)
        ]
        if extra:
            names = [name for _, name in extra]
            problems.append(f"background_thread: {len(extra)} new OS threads {names}")
    return problems


# OS threads the CUDA driver and runtime start on their own (their names are set in
# native code; Python threads are recognised by ident, whatever their name).
_RUNTIME_THREAD_PREFIXES = ("cuda",)


def _thread_name(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return str(tid)


_WARMED: set[str] = set()


def warm_runtime(device: str | torch.device = "cpu") -> None:
    """Start the thread pools torch (intra-op), numpy's BLAS and CUDA create lazily, so
    that `thread_snapshot()` taken afterwards does not blame the candidate for them.
    Does the work once per device."""
    if "cpu" not in _WARMED:
        a = torch.ones(512, 512)
        (a @ a).add_(1).sum()
        a.t().contiguous()
        try:
            import numpy as np

            b = np.ones((256, 256), dtype=np.float32)
            b.dot(b)
        except ImportError:  # pragma: no cover
            pass
        _WARMED.add("cpu")
    kind = str(device)
    if kind.startswith("cuda") and kind not in _WARMED and torch.cuda.is_available():
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize()
        _WARMED.add(kind)
