"""The verifier's worker pool: many candidates through warm, sandboxed lanes.

    with VerifierPool(VerifyConfig(), workers=4) as pool:
        results = pool.verify_many([(task, completion), ...])      # input order
        for index, result in pool.imap_unordered(pairs): ...       # as they finish
        future = pool.submit(task, completion)                     # one at a time

Each lane (`tritonrl.verify.pool.lane`) is one sandboxed fork server that keeps torch and
triton imported and forks a fresh, separately Landlock-confined worker per candidate.
The funnel runs in two halves: preparing threads (one per four lanes of a GPU, or of the
CPU) take jobs from one queue and run the trusted side's half (`funnel.prepare`:
extract, static checks, the input sets and their reference outputs); one thread per
lane takes its GPU's prepared jobs and runs the candidate's half (`funnel.finish`) with
the lane as its session factory. A lane thus does not wait for its next job's inputs; a
few jobs per GPU wait prepared (`ahead_for`; their input sets held in memory). Before
a lane runs a job it reserves the job's GPU memory (`job.gpu_estimate`) from its GPU's
budget (`tritonrl.verify.pool.budget`: `verify.gpu_memory_fraction` of the GPU's memory, or
`verify.gpu_memory_budget_mb`) and waits while the lanes running hold too much; a job
larger than the budget runs alone.

Lanes default to one per CPU core (`default_workers`; on CUDA at most `LANES_PER_GPU`
per visible GPU, at least one), spread round-robin over the GPUs (in one rank of
several launched on a node, its own GPU and its share of the cores: `gate.pool_gpus`),
each lane's sandbox seeing only its GPU (`CUDA_VISIBLE_DEVICES`) and the trusted side's
work for it (reference outputs, timing) running on the same device; a gate per GPU
(`tritonrl.verify.pool.gate`) lets correctness runs share it and one timing phase at a time
have it alone. On CUDA the lanes share Triton's C modules (driver utilities, launchers)
built by trusted code (`shared_launchers`, `tritonrl.verify.pool.launchers`), not each job's
gcc, and each zygote compiles one trusted kernel for its GPU first, so that jobs start
past Triton's first-compile cost (`warm_compiler`). Identical (task, candidate) pairs in
one batch are verified once and each gets its own copy of the result (with
`same_program`, pairs whose code is one program: `program_key`). A lane is
recycled (a fresh sandbox) after a timeout, a crash or `recycle_jobs` jobs
(`VerifyConfig.pool_recycle_jobs`, 256). Shared pools for the trainer adapters:
`shared_pool(config, workers)`, created on first use and closed at exit.

The verdicts are the funnel's: the same as `verify()` with a fresh worker per
candidate, including the failure texts of timeouts and crashes.

What it does NOT do: isolate GPU timing from work that outlives a correctness run (a
hung kernel until its worker's deadline: the gate waits `DRAIN_S` and then notes it),
give a lane more than one job at a time, cancel a job once it is being prepared,
keep the compile cache after `close()`, or deduplicate across batches.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import copy
import dataclasses
import hashlib
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed
from contextlib import nullcontext
from pathlib import Path

from tritonrl.astlock import AST_LOCK
from tritonrl.config import VerifyConfig
from tritonrl.extract import try_extract
from tritonrl.tasks.task import Task
from tritonrl.verify.compare import resolve_device
from tritonrl.verify.funnel import finish, prepare
from tritonrl.verify.job import gpu_estimate
from tritonrl.verify.pool.budget import BudgetCancelled, GpuBudget, budget_for, capacity_for
from tritonrl.verify.pool.gate import gate_for, launched_share, pool_gpus
from tritonrl.verify.pool.lane import Lane
from tritonrl.verify.pool.launchers import LauncherStore
from tritonrl.verify.result import VerifyResult

# VerifyConfig fields a lane's sandbox is built from: a job must agree with its pool.
LANE_FIELDS = (
    "device", "memory_mb", "max_procs", "max_file_mb", "sandbox_strict", "cuda_max_connections",
    "nice",
)  # fmt: skip
_STOP = object()


class PoolClosed(RuntimeError):
    """The pool was closed before this candidate's verdict."""


class Batches:
    """`submit_many`, `verify_many` and `imap_unordered` on top of a verifier's `submit`
    (and its `_count` of statistics): the local pool's and the Ray backend's alike."""

    def submit_many(
        self,
        pairs: Iterable[tuple[Task, str | bytes]],
        config: VerifyConfig | None = None,
        same_program: bool = False,
    ) -> list[Future]:
        """One future per pair, in order; identical pairs share one future (one job).
        `same_program`: so do pairs whose code is one program (`program_key`), for a
        caller that reads only the verdict and reward (an error's line numbers are the
        first text's)."""
        seen: dict[tuple, Future] = {}
        futures = []
        for task, candidate in pairs:
            what = program_key(candidate) if same_program else candidate
            key = (task.id, hashlib.sha256(task.source.encode()).hexdigest(), what)
            if key in seen:
                self._count("deduplicated")
            else:
                seen[key] = self.submit(task, candidate, config)
            futures.append(seen[key])
        return futures

    def verify_many(
        self, pairs: Iterable[tuple[Task, str | bytes]], config: VerifyConfig | None = None
    ) -> list[VerifyResult]:
        """Every pair's result, in input order (identical pairs verified once)."""
        futures = self.submit_many(pairs, config)
        return unshared([f.result() for f in futures], futures)

    def imap_unordered(
        self, pairs: Iterable[tuple[Task, str | bytes]], config: VerifyConfig | None = None
    ) -> Iterator[tuple[int, VerifyResult]]:
        """(index, result) for every pair, as each finishes (identical pairs verified once).
        Candidates not started yet (not handed to a lane or an actor) are cancelled if the
        iteration stops early."""
        futures = self.submit_many(pairs, config)
        indices: dict[int, list[int]] = {}
        for i, f in enumerate(futures):
            indices.setdefault(id(f), []).append(i)
        unique = list({id(f): f for f in futures}.values())
        try:
            for f in as_completed(unique):
                result = f.result()
                for n, i in enumerate(indices[id(f)]):
                    yield i, result if n == 0 else copy.deepcopy(result)
        finally:
            for f in unique:
                f.cancel()


class VerifierPool(Batches):
    """Verify candidates on `workers` warm sandboxed lanes (see the module docstring)."""

    def __init__(
        self,
        config: VerifyConfig | None = None,
        workers: int | None = None,
        device: str | None = None,
        recycle_jobs: int | None = None,
        shared_launchers: bool = True,
        warm_compiler: bool = True,
    ) -> None:
        config = config or VerifyConfig()
        self.device = resolve_device(device or config.device)
        self.config = dataclasses.replace(config, device=self.device)
        found = pool_gpus() if self.device == "cuda" else []
        gpus = [name for name, _ in found]
        self._indices = [index for _, index in found]  # torch's numbering of each GPU
        if self.device == "cuda" and not gpus:
            raise ValueError("device cuda: no visible GPU")
        workers = workers or default_workers(gpus)
        self.root = Path(tempfile.mkdtemp(prefix="tritonrl-pool-"))
        gates = [gate_for(g) for g in gpus]
        capabilities = [None] * len(gpus)
        if warm_compiler:  # each lane's zygote compiles once for its GPU
            import torch

            majors_minors = [torch.cuda.get_device_capability(i) for i in self._indices]
            capabilities = [major * 10 + minor for major, minor in majors_minors]
        # Triton's C modules built once by trusted code (tritonrl.verify.pool.launchers).
        self.launchers = None
        if gpus and shared_launchers:
            self.launchers = LauncherStore(self.root / "launchers")
            self.launchers.build_utils()
        self.lanes = [
            Lane(
                i,
                self.root / f"lane-{i}",
                self.root / "cache",
                self.config,
                self.device,
                gpu=gpus[i % len(gpus)] if gpus else None,
                gpu_gate=gates[i % len(gpus)] if gpus else None,
                recycle_jobs=recycle_jobs or self.config.pool_recycle_jobs,
                store=self.launchers,
                capability=capabilities[i % len(gpus)] if gpus else None,
            )  # fmt: skip
            for i in range(workers)
        ]
        self.stats = {"submitted": 0, "verified": 0, "deduplicated": 0}
        self._stats_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        # Per GPU (one group on the CPU): its gate, its lanes, the preparing threads and
        # the queue of prepared jobs between them.
        groups = max(1, min(len(gpus), workers))  # the GPUs that have a lane
        self._gates = gates[:groups] or [None]
        # Per group, the GPU-memory budget its lanes reserve their jobs from (None: none).
        self.budgets: list[GpuBudget | None] = []
        for g in range(groups):
            capacity = capacity_for(self.config, self._indices[g] if gpus else None)
            key = f"gpu{gpus[g]}" if gpus else "cpu"
            self.budgets.append(budget_for(key, capacity) if capacity else None)
        lanes_of = [sum(1 for i in range(workers) if i % groups == g) for g in range(groups)]
        self._ready = [queue.Queue(maxsize=ahead_for(n)) for n in lanes_of]
        self._preparers = [
            threading.Thread(
                target=self._prepare_jobs, args=(g,), daemon=True, name=f"tritonrl-prep-{g}"
            )  # fmt: skip
            for g in range(groups)
            for _ in range(ahead_for(lanes_of[g]))
        ]
        self._threads = [
            threading.Thread(
                target=self._serve, args=(lane, i), daemon=True, name=f"tritonrl-lane-{i}"
            )  # fmt: skip
            for i, lane in enumerate(self.lanes)
        ]
        for t in self._preparers + self._threads:
            t.start()

    # -- submitting -------------------------------------------------------------------
    def submit(
        self, task: Task, candidate: str | bytes, config: VerifyConfig | None = None
    ) -> Future:
        """Queue one candidate; the future's result is its `VerifyResult`. `config` (the
        pool's by default) may change anything but the lane fields (`LANE_FIELDS`)."""
        if self._closed:
            raise PoolClosed("the verifier pool is closed")
        config = self._job_config(config)
        future: Future = Future()
        self._count("submitted")
        self._queue.put((future, task, candidate, config))
        return future

    def _job_config(self, config: VerifyConfig | None) -> VerifyConfig:
        if config is None:
            return self.config
        config = dataclasses.replace(config, device=self.device)
        clash = [f for f in LANE_FIELDS if getattr(config, f) != getattr(self.config, f)]
        if clash:
            raise ValueError(f"a job's config must match its pool's in {clash}")
        return config

    def _count(self, name: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[name] += n

    # -- the lanes ----------------------------------------------------------------------
    def _device_scope(self, group: int, gpus: bool):
        """The GPU the trusted side's work of a group runs on (its references, timing)."""
        if not gpus:
            return nullcontext()
        import torch

        return torch.cuda.device(self._indices[group])

    def _prepare_jobs(self, group: int) -> None:
        """A preparing thread: queued jobs -> `funnel.prepare` -> the group's ready queue."""
        ready, gate = self._ready[group], self._gates[group]
        with self._device_scope(group, gate is not None):
            while True:
                job = self._queue.get()
                if job is _STOP:
                    return
                future, task, candidate, config = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    prepared = prepare(task, candidate, config, gate)
                except BaseException as e:  # noqa: BLE001 - prepare() never raises, but
                    future.set_exception(e)
                    continue
                while not self._closed:  # a full queue: the lanes are busy
                    with contextlib.suppress(queue.Full):
                        ready.put((future, prepared), timeout=0.2)
                        break
                else:
                    future.set_exception(PoolClosed("the verifier pool was closed"))

    def _serve(self, lane: Lane, index: int) -> None:
        """A lane's thread: prepared jobs of its GPU -> `funnel.finish` on this lane."""
        group = index % len(self._ready)
        with self._device_scope(group, lane.gpu is not None):
            try:
                while True:
                    if lane.child is None and not self._closed:
                        # Warm up before the next job arrives; a failure is the next job's.
                        with contextlib.suppress(Exception):
                            lane.start()
                    job = self._ready[group].get()
                    if job is _STOP:
                        return
                    future, prepared = job
                    if self._closed:  # taken between close()'s kill and its drain
                        future.set_exception(PoolClosed("the verifier pool was closed"))
                        continue
                    try:
                        with self._reserved(group, prepared):
                            result = finish(prepared, sessions=lane)
                    except BudgetCancelled:  # the pool closed while the job waited for room
                        future.set_exception(PoolClosed("the verifier pool was closed"))
                        continue
                    except BaseException as e:  # noqa: BLE001 - finish() never raises, but
                        future.set_exception(e)
                        continue
                    self._count("verified")
                    if self._closed:
                        future.set_exception(PoolClosed("the verifier pool was closed"))
                    else:
                        future.set_result(result)
            finally:
                lane.stop()

    def _reserved(self, group: int, prepared):
        """The job's GPU memory held from its group's budget while it runs (waiting for
        room first); a no-op without a budget or for a job that needs no worker."""
        budget = self.budgets[group]
        if budget is None:
            return nullcontext()
        need = gpu_estimate(prepared.sets, prepared.config.gpu_memory_factor)
        return budget.reserve(need, cancelled=lambda: self._closed)

    @property
    def recycled(self) -> int:
        return sum(lane.recycled for lane in self.lanes)

    def close(self) -> None:
        """Cancel what has not started, kill every lane, remove every file; idempotent."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not _STOP:
                job[0].cancel()
        for _ in self._preparers:
            self._queue.put(_STOP)
        for lane in self.lanes:
            lane.kill()
        for t in self._preparers:
            t.join()
        for g, ready in enumerate(self._ready):  # prepared, never run: cancelled as such
            while True:
                try:
                    job = ready.get_nowait()
                except queue.Empty:
                    break
                if job is not _STOP:
                    job[0].set_exception(PoolClosed("the verifier pool was closed"))
            for _ in self.lanes[g :: len(self._ready)]:
                ready.put(_STOP)
        for t in self._threads:
            t.join()
        if self.launchers is not None:
            self.launchers.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Lanes per GPU by default, at most: the gate gives timing the GPU alone whatever the
# count, and lanes overlap the rest. On the H100, 16 lanes verified the most candidates
# per second on three machines of four, 12 on the fourth (docs/benchmarks.md); each
# lane's worker holds a CUDA context of its own.
LANES_PER_GPU = 16


def default_workers(gpus: list[str]) -> int:
    """The pool's lanes when none are asked for: one per CPU core this process may use
    (its share of them in one of several processes launched on a node); with GPUs at most
    LANES_PER_GPU per GPU and at least one per GPU."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    share = launched_share()
    cores = max(1, cores // share[1]) if share else cores
    if not gpus:
        return cores
    return max(len(gpus), min(cores, LANES_PER_GPU * len(gpus)))


def ahead_for(lanes: int) -> int:
    """How many preparing threads, and prepared jobs waiting, a GPU with `lanes` lanes
    gets: one per four lanes (preparing is mostly waiting on the trusted side's lock and
    the GPU gate; each waiting job holds its input sets in memory)."""
    return max(1, (lanes + 3) // 4)


def program_key(candidate: str | bytes) -> tuple[str, str | bytes]:
    """What makes two completions one program: the code the verifier would take from
    them, as Python's AST (comments, blank lines and the prose around the code aside;
    docstrings and every name kept), as `("program", dump)`. A completion whose code
    cannot be taken or parsed is its own text, `("text", candidate)`: no text can pass
    for a program. The verdict of a program does not depend on which of its texts was
    verified, but for an error's line numbers and the timing noise."""
    code, _ = try_extract(candidate)
    if code is None:
        return ("text", candidate)
    try:
        with AST_LOCK:
            return ("program", ast.dump(ast.parse(code)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ("text", candidate)


def unshared(results: list[VerifyResult], futures: list[Future]) -> list[VerifyResult]:
    """Results of `submit_many`'s futures with a copy for every repeat of a shared one."""
    seen: set[int] = set()
    out = []
    for r, f in zip(results, futures, strict=True):
        out.append(copy.deepcopy(r) if id(f) in seen else r)
        seen.add(id(f))
    return out


_SHARED: dict[tuple, VerifierPool] = {}
_SHARED_LOCK = threading.Lock()
_AT_EXIT: list[bool] = []


def shared_pool(config: VerifyConfig | None = None, workers: int | None = None) -> VerifierPool:
    """A process-wide pool for these lane fields and lane count, created on first use and
    closed at exit (the trainer adapters use it)."""
    config = config or VerifyConfig()
    config = dataclasses.replace(config, device=resolve_device(config.device))
    key = (*(getattr(config, f) for f in LANE_FIELDS), config.pool_recycle_jobs, workers)
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None or pool._closed:
            if not _AT_EXIT:
                _AT_EXIT.append(atexit.register(close_shared_pools) is not None)
            pool = _SHARED[key] = VerifierPool(config, workers)
        return pool


def close_shared_pools() -> None:
    with _SHARED_LOCK:
        pools = list(_SHARED.values())
        _SHARED.clear()
    for pool in pools:
        pool.close()
