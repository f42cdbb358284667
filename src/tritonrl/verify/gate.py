"""The per-GPU gate of the worker pool: correctness runs share a GPU, timing has it alone.

Lanes on one GPU run their candidates' correctness sets (and the trusted side's
reference passes, and the untimed parts of a timing phase: readying it and checking its
outputs) side by side: `with gate.shared(): ...`. A timing measurement takes the
exclusive side (`gate.exclusive`, also usable as a lock): new shared holders wait while it
waits or holds (so timing is not starved), and it waits for those already inside to
finish. Every lane's throughput waits on these windows, so they hold only the trials.
On the H100, 15 lanes checking other candidates beside a timed 2.7 ms matmul
moved its copy-of-reference speedup to between 0.91 and 1.14 (docs/benchmarks.md).

A candidate that hangs inside a correctness run would hold its shared slot until its
deadline; the exclusive side waits at most `drain_s` for the holders to leave and then
times anyway, and says so: `exclusive.acquire()` returns False, the funnel notes it in
the result (`timing["shared_gpu"]`), a reader can discount that timing.

`gate_for(gpu)` gives every pool and lane of this process the same gate for one GPU.
`VerifyConfig.exclusive_timing = False` makes a job skip the shared side: its runs then
neither wait for timing phases nor are waited for (faster, and its timing is exposed to
the other lanes' work; docs/benchmarks.md has both).

The funnel also holds the shared side while a worker makes its CUDA context and imports
the candidate (`load`) and while it exits (its context torn down), so that the GPU work
of those, and of a candidate's import-time code, stays out of timing windows. On the H100
this changed the pool's throughput by nothing measurable (docs/benchmarks.md).

What it does NOT do: stop GPU work that outlives a run or runs between a worker's
commands (a kernel still spinning after its reply, a thread the candidate started: the
lane kills the worker at its deadline, and the thread is flagged), or order the GPU use
of other processes (two trainer processes with pools on one GPU do not see each other's
gates). The shared side is not re-entrant: a holder must not take it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

DRAIN_S = 10.0  # the longest a timing phase waits for correctness runs to leave
_GATES: dict[str, GpuGate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(gpu: str) -> GpuGate:
    """This process's gate for the GPU that CUDA_VISIBLE_DEVICES names `gpu`."""
    with _GATES_LOCK:
        return _GATES.setdefault(gpu, GpuGate())


class GpuGate:
    """Shared (correctness) and exclusive (timing) use of one GPU. Thread-safe."""

    def __init__(self, drain_s: float = DRAIN_S) -> None:
        self.drain_s = drain_s
        self._cond = threading.Condition()
        self._shared = 0
        self._writers = 0  # waiting or holding
        self._held = False
        self.exclusive = _Exclusive(self)

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._writers == 0)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    def _acquire(self) -> bool:
        with self._cond:
            self._writers += 1
            self._cond.wait_for(lambda: not self._held)
            self._held = True
            deadline = time.monotonic() + self.drain_s
            while self._shared and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return self._shared == 0

    def _release(self) -> None:
        with self._cond:
            self._held = False
            self._writers -= 1
            self._cond.notify_all()


class _Exclusive:
    """The exclusive side as a lock: `acquire()` says whether the GPU was drained."""

    def __init__(self, gate: GpuGate) -> None:
        self._gate = gate

    def acquire(self) -> bool:
        return self._gate._acquire()

    def release(self) -> None:
        self._gate._release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
