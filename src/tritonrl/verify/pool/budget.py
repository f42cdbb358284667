"""The worker pool's GPU-memory budget: lanes on one GPU reserve what their jobs need.

    budget = GpuBudget(capacity_bytes)
    with budget.reserve(job_bytes, cancelled=lambda: closing):
        ...  # the job runs; other lanes' reservations stay under the capacity

Each lane of a pool reserves its job's estimate (`tritonrl.verify.job.gpu_estimate`:
`verify.gpu_memory_factor` times the job's largest input set, plus a worker's CUDA
context) before it runs the candidate's half of the funnel, and releases it when the job
ends. While the lanes running hold too much for the next job, its lane waits instead of
letting the job run into the GPU's out-of-memory error (on the H100, 7 of 98 small
KernelBench problems on a pool of 16 lanes were refused for `gpu_memory` when nothing
budgeted them, and each passed alone). Requests are served in order: a large job at the
head is not overtaken by smaller ones behind it, so it is never starved. A job larger
than the whole budget reserves all of it: it runs alone.

It cannot deadlock: a lane holds at most one reservation and asks for it holding none;
a reservation is never larger than the capacity, so the head of the queue is served once
the jobs running end (each ends by its worker's deadline at the latest); nothing that
holds a reservation waits for the budget. A lane waiting when its pool closes is
released by `cancelled` (`BudgetCancelled`).

`budget_for(key, capacity)` gives every pool of this process the same budget for one
GPU and capacity; `capacity_for(config, gpu_index)` is the capacity a config asks for
(`verify.gpu_memory_budget_mb`, else `verify.gpu_memory_fraction` of the GPU's memory).
`stats()` says what it cost (for benchmarks).

What it does NOT do: measure memory (an estimate is reserved, not what the job uses),
budget the verifying process's own reference passes in the pool's preparing threads
(the share of the GPU the fraction leaves out is theirs), or see other processes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_BUDGETS: dict[tuple[str, int], GpuBudget] = {}
_BUDGETS_LOCK = threading.Lock()
POLL_S = 0.2  # how often a waiting lane looks at `cancelled`


class BudgetCancelled(RuntimeError):
    """A reservation given up while it waited (its pool closed)."""


class GpuBudget:
    """Reservations of one GPU's memory, in bytes, first come first served. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("a GPU-memory budget needs a positive capacity")
        self.capacity = int(capacity)
        self._cond = threading.Condition()
        self._used = 0
        self._queue: deque[int] = deque()  # tickets waiting, in order
        self._next = 0
        self._held: dict[int, int] = {}  # ticket -> bytes, while reserved
        self._stats = {"reserved": 0, "waited": 0, "wait_s": 0.0, "alone": 0, "peak": 0}

    def used(self) -> int:
        with self._cond:
            return self._used

    @contextmanager
    def reserve(self, nbytes: int, cancelled: Callable[[], bool] = lambda: False) -> Iterator[int]:
        """Hold `nbytes` (at most the capacity: a larger job runs alone) while inside;
        waits, in order of asking, until they fit beside the reservations held. Yields
        the bytes held. Raises BudgetCancelled when `cancelled()` turns true while it
        waits. A request of 0 bytes neither waits nor holds anything."""
        need = min(max(int(nbytes), 0), self.capacity)
        if need == 0:
            yield 0
            return
        ticket = self._acquire(need, nbytes > self.capacity, cancelled)
        try:
            yield need
        finally:
            with self._cond:
                self._used -= self._held.pop(ticket)
                self._cond.notify_all()

    def _acquire(self, need: int, alone: bool, cancelled: Callable[[], bool]) -> int:
        with self._cond:
            ticket, self._next = self._next, self._next + 1
            self._queue.append(ticket)
            asked = time.monotonic()
            waited = False
            while not (self._queue[0] == ticket and self._used + need <= self.capacity):
                if cancelled():
                    self._queue.remove(ticket)
                    self._cond.notify_all()  # the next in line may fit now
                    raise BudgetCancelled("the GPU-memory reservation was given up")
                waited = True
                self._cond.wait(POLL_S)
            self._queue.popleft()
            self._used += need
            self._held[ticket] = need
            s = self._stats
            s["reserved"] += 1
            s["waited"] += waited
            s["wait_s"] += time.monotonic() - asked
            s["alone"] += alone
            s["peak"] = max(s["peak"], self._used)
            self._cond.notify_all()  # the next in line may fit beside this one
            return ticket

    def stats(self) -> dict:
        """Reservations asked for (0 bytes aside) and made, how many waited and for how
        long in all, how many were larger than the budget (ran alone), the most held at
        once, the capacity (bytes)."""
        with self._cond:
            return {**self._stats, "asked": self._next, "wait_s": round(self._stats["wait_s"], 3),
                    "capacity": self.capacity}  # fmt: skip


def budget_for(key: str, capacity: int) -> GpuBudget:
    """This process's budget for the GPU named `key` with this capacity (pools that agree
    on both share one)."""
    with _BUDGETS_LOCK:
        return _BUDGETS.setdefault((key, int(capacity)), GpuBudget(capacity))


def capacity_for(config, gpu_index: int | None) -> int | None:
    """The bytes a pool's jobs on one GPU may reserve together: `config.
    gpu_memory_budget_mb` when set, else `config.gpu_memory_fraction` of the memory of
    the GPU with this index (this process's numbering); None for a CPU pool without an
    explicit budget (nothing to budget)."""
    if config.gpu_memory_budget_mb:
        return config.gpu_memory_budget_mb << 20
    if gpu_index is None:
        return None
    import torch

    total = torch.cuda.get_device_properties(gpu_index).total_memory
    return int(total * config.gpu_memory_fraction)
