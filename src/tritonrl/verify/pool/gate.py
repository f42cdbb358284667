"""The per-GPU gate of the worker pool: correctness runs share a GPU, timing has it alone.

Lanes on one GPU run their candidates' correctness sets (and the trusted side's
reference passes, and the untimed parts of a timing phase: readying it and checking its
outputs) side by side: `with gate.shared(): ...`. A timing measurement takes the
exclusive side (`gate.exclusive`, also usable as a lock): new shared holders wait while it
waits or holds (so timing is not starved), and it waits for those already inside to
finish. Every lane's throughput waits on these windows, so they hold only the trials:
lanes checking other candidates beside a timed kernel move its copy-of-reference speedup
by several per cent.

Filling the drain: while a timing phase waits for the holders inside to leave, a new
holder whose label's holds have lasted, on average (`FILL_WEIGHT`-weighted, over this
gate's past holds), no longer than the holders inside are still expected to last is let
in: it would likely be done before the GPU is free anyway. A label never seen, a
holder that has overrun its own expectation, and the timing itself (once the GPU is
drained) let nobody in, so a window is never starved and never shared; a misjudged
fill makes the wait longer by at most that one hold. Without the fill, a busy batch's
windows are mostly such waits rather than timing.

A candidate that hangs inside a correctness run would hold its shared slot until its
deadline; the exclusive side waits at most `drain_s` for the holders to leave and then
times anyway, and says so: `exclusive.acquire()` returns False, the funnel notes it in
the result (`timing["shared_gpu"]`), a reader can discount that timing.

`gate_for(gpu)` gives every pool and lane of this process the same gate for one GPU;
`current_gate()` gives a lone `verify` on CUDA (its reference's passes and its fresh
worker) the gate of the GPU it uses, so threads calling `verify` at once share it too.

Across processes (two `tritonrl verify` commands, a trainer and an eval on one GPU), a
CUDA gate also holds the GPU's `ProcessLock`: while any of its correctness runs is
inside, the process holds the lock shared; a timing phase, once this process is drained,
takes it alone, after other processes' timing phases (however long) and their
correctness runs (at most `drain_s`, then noted as above). Timing phases of all
processes on a GPU thus run one at a time; the drain is not filled across processes.
`VerifyConfig.exclusive_timing = False` makes a job skip the shared side: its runs then
neither wait for timing phases nor are waited for (faster, and its timing is exposed to
the other lanes' work; docs/benchmarks.md has both).

The funnel also holds the shared side while a worker makes its CUDA context and imports
the candidate (`load`) and while it exits (its context torn down), so that the GPU work
of those, and of a candidate's import-time code, stays out of timing windows. On the H100
this changed the pool's throughput by nothing measurable (docs/benchmarks.md).

`gate.stats()` counts what the gate cost (for benchmarks): per label of the shared side,
its holds and their seconds; the seconds shared holders waited for timing; and the
exclusive windows (from a first timing phase asking until the last one leaves), their
seconds, the timing phases in them and the seconds those held the GPU.

What it does NOT do: stop GPU work that outlives a run or runs between a worker's
commands (a kernel still spinning after its reply, a thread the candidate started: the
lane kills the worker at its deadline, and the thread is flagged), or order the GPU use
of programs that are not tritonrl's. The shared side is not re-entrant: a holder must
not take it again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)
DRAIN_S = 10.0  # the longest a timing phase waits for correctness runs to leave
CROSS_WAIT_S = 600.0  # the longest anyone waits for another process's timing phase
LOCK_DIR = "/tmp/tritonrl-gpu-locks"  # TRITONRL_GPU_LOCK_DIR overrides; not TMPDIR, which
# users move to a larger disk per process
FILL_WEIGHT = 0.2  # of the newest hold, in a label's running mean of its hold seconds
_GATES: dict[str, GpuGate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(gpu: str) -> GpuGate:
    """This process's gate for the GPU that CUDA_VISIBLE_DEVICES names `gpu`; on a CUDA
    machine it also holds the GPU's lock across processes (`ProcessLock`)."""
    with _GATES_LOCK:
        gate = _GATES.get(gpu)
        if gate is None:
            gate = _GATES[gpu] = GpuGate(cross=ProcessLock.for_gpu(gpu))
        return gate


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them."""
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        names = [g.strip() for g in listed.split(",") if g.strip()]
        return names[: torch.cuda.device_count()]
    return [str(i) for i in range(torch.cuda.device_count())]


def launched_share() -> tuple[int, int] | None:
    """(LOCAL_RANK, LOCAL_WORLD_SIZE) when this process is one of several that a launcher
    (`accelerate launch`, `torchrun`) started on this node; None otherwise."""
    try:
        local, count = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    return (local, count) if count > 1 and 0 <= local < count else None


def pool_gpus() -> list[tuple[str, int]]:
    """The GPUs a verifier pool of this process spreads over, each as (its
    CUDA_VISIBLE_DEVICES name, its torch index): every visible one; in one of several
    processes launched on a node (`launched_share`), LOCAL_RANK's alone, the GPU that
    rank trains on and holds, so each rank times on its own GPU beside nobody's training
    and the node's GPUs are not each shared by every rank's lanes."""
    names = visible_gpus()
    share = launched_share()
    if share is not None and names:
        index = share[0] % len(names)
        return [(names[index], index)]
    return [(name, index) for index, name in enumerate(names)]


def current_gpu() -> str:
    """The GPU torch uses now (its current CUDA device), as CUDA_VISIBLE_DEVICES names it."""
    import torch

    gpus = visible_gpus()
    return gpus[torch.cuda.current_device()] if gpus else "0"


def current_gate() -> GpuGate:
    """This process's gate for the GPU torch uses now (its current CUDA device): the one
    a pool's lanes on that GPU hold, so `verify` calls made from several threads, and a
    pool beside them, time one at a time."""
    return gate_for(current_gpu())


class GpuGate:
    """Shared (correctness) and exclusive (timing) use of one GPU. Thread-safe."""

    def __init__(self, drain_s: float = DRAIN_S, cross: ProcessLock | None = None) -> None:
        self.drain_s = drain_s
        self.cross = cross  # the GPU's lock across processes (None: this process only)
        self._cond = threading.Condition()
        self._shared = 0
        self._writers = 0  # waiting or holding
        self._held = False
        self.exclusive = _Exclusive(self)
        self._holds: dict[str, list[float]] = {}  # label -> [count, seconds, longest]
        self._blocked_s = 0.0
        self._windows = [0, 0.0, 0, 0.0]  # count, seconds, timing phases, their holds
        self._window_start = self._held_start = 0.0
        self._timing = False  # a timing phase holds the GPU (drained, or past drain_s)
        self._expected: dict[str, float] = {}  # label -> running mean of its holds (s)
        self._inside: dict[int, float] = {}  # hold -> its expected end
        self._next = 0

    def _may_enter(self, label: str) -> bool:
        """No timing phase asking; or one draining the GPU, and this label's holds would
        likely end before those inside do (the drain filled, not lengthened)."""
        if self._writers == 0:
            return True
        if self._timing or not self._shared or label not in self._expected:
            return False
        now = time.monotonic()
        horizon = max(self._inside.values()) - now
        return self._expected[label] <= horizon

    @contextmanager
    def shared(self, label: str = "run") -> Iterator[float]:
        """Hold the shared side; yields the seconds spent waiting to enter it."""
        with self._cond:
            asked = time.monotonic()
            self._cond.wait_for(lambda: self._may_enter(label))
            if self._shared == 0 and self.cross is not None:
                # The first holder takes the process's shared side across processes
                # (waiting out another process's timing; nobody of ours is inside).
                self.cross.acquire_shared()
            self._shared += 1
            entered = time.monotonic()
            self._blocked_s += entered - asked
            token, self._next = self._next, self._next + 1
            self._inside[token] = entered + self._expected.get(label, 0.0)
        try:
            yield entered - asked
        finally:
            with self._cond:
                self._shared -= 1
                if self._shared == 0 and self.cross is not None:
                    self.cross.release_shared()
                del self._inside[token]
                held = time.monotonic() - entered
                mean = self._expected.get(label)
                self._expected[label] = held if mean is None else mean + FILL_WEIGHT * (held - mean)
                count = self._holds.setdefault(label, [0, 0.0, 0.0])
                count[0] += 1
                count[1] += held
                count[2] = max(count[2], held)
                self._cond.notify_all()

    def _acquire(self) -> bool:
        with self._cond:
            self._writers += 1
            if self._writers == 1:
                self._window_start = time.monotonic()
            self._cond.wait_for(lambda: not self._held)
            self._held = True
            deadline = time.monotonic() + self.drain_s
            while self._shared and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            drained = self._shared == 0
        # Then the other processes: their timing phases (waited for, however long), then
        # their correctness runs (as ours: at most drain_s). Ours still inside hold the
        # shared side across processes too, so then this process cannot have it alone.
        if self.cross is not None:
            drained = self.cross.acquire_exclusive(self.drain_s if drained else 0.0) and drained
        with self._cond:
            self._timing = True
            self._held_start = time.monotonic()
            return drained

    def _release(self) -> None:
        if self.cross is not None:
            self.cross.release_exclusive()
        with self._cond:
            now = time.monotonic()
            self._held = self._timing = False
            self._writers -= 1
            self._windows[2] += 1
            self._windows[3] += now - self._held_start
            if self._writers == 0:
                self._windows[0] += 1
                self._windows[1] += now - self._window_start
            self._cond.notify_all()

    def stats(self, reset: bool = False) -> dict:
        """What the gate has cost so far (see the module docstring), as a copy; `reset`
        starts the counts again from zero (a benchmark's warm-up left out)."""
        with self._cond:
            windows, seconds, timings, held = self._windows
            if reset:
                self._holds, self._blocked_s = {}, 0.0
                self._windows = [0, 0.0, 0, 0.0]
            return {
                "shared": {k: {"holds": int(n), "seconds": round(t, 3), "longest": round(m, 3)}
                           for k, (n, t, m) in sorted(self._holds.items())},
                "shared_blocked_s": round(self._blocked_s, 3),
                "windows": windows, "window_s": round(seconds, 3),
                "timings": timings, "timing_held_s": round(held, 3),
            }  # fmt: skip


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


class ProcessLock:
    """One GPU's gate across processes: `flock` on two files named by the GPU's UUID in
    LOCK_DIR. A process whose gate has correctness runs inside holds the lock file shared
    (its first holder takes it, its last lets go), after passing the turnstile; a timing
    phase holds the turnstile (new shared holders of every process wait behind it), then
    the lock file alone (the others' correctness runs gone). The kernel drops a dead
    process's locks. Waits poll: another process's timing at most CROSS_WAIT_S, its
    correctness runs as the gate's own (`drain_s`); past them the work goes on, reported
    as the gate's own late drains are."""

    def __init__(self, folder: Path, key: str) -> None:
        """The lock named `key` in `folder` (its two files made if missing: OSError)."""
        self.lock_path, self.turn_path = folder / f"{key}.lock", folder / f"{key}.turnstile"
        for path in (self.lock_path, self.turn_path):
            os.close(os.open(path, os.O_RDONLY | os.O_CREAT, 0o666))
        self._shared_fd: int | None = None
        self._held: list[int] = []

    @classmethod
    def for_gpu(cls, gpu: str) -> ProcessLock | None:
        """The lock of the GPU this process calls `gpu` (a CUDA_VISIBLE_DEVICES entry),
        keyed by its UUID; None without CUDA, or where the lock folder cannot be used."""
        import torch

        if not torch.cuda.is_available() or gpu not in (gpus := visible_gpus()):
            return None
        key = f"gpu-{torch.cuda.get_device_properties(gpus.index(gpu)).uuid}"
        folder = Path(os.environ.get("TRITONRL_GPU_LOCK_DIR") or LOCK_DIR)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if folder.stat().st_uid == os.getuid():
                folder.chmod(0o1777)  # every user's verifier shares the GPU's lock
            lock = cls(folder, key)
        except OSError as e:
            log.warning("GPU %s: no lock across processes in %s (%s): other processes' "
                        "verifiers may time beside this one's", gpu, folder, e)  # fmt: skip
            return None
        return lock

    def acquire_shared(self) -> None:
        turn = os.open(self.turn_path, os.O_RDONLY)
        try:
            passed = _flock(turn, fcntl.LOCK_SH, CROSS_WAIT_S)
        finally:
            os.close(turn)  # passed: the turnstile is let go at once
        fd = os.open(self.lock_path, os.O_RDONLY)
        if not (passed and _flock(fd, fcntl.LOCK_SH, CROSS_WAIT_S)):
            log.warning("another process held GPU lock %s past %.0f s", self.lock_path,
                        CROSS_WAIT_S)  # fmt: skip
        self._shared_fd = fd

    def release_shared(self) -> None:
        if self._shared_fd is not None:
            os.close(self._shared_fd)  # closing drops the lock
            self._shared_fd = None

    def acquire_exclusive(self, drain_s: float) -> bool:
        """True once this process holds the GPU alone; False when another process's
        timing (CROSS_WAIT_S) or correctness runs (`drain_s`) stayed past the wait."""
        turn = os.open(self.turn_path, os.O_RDONLY)
        fd = os.open(self.lock_path, os.O_RDONLY)
        self._held = [turn, fd]
        return _flock(turn, fcntl.LOCK_EX, CROSS_WAIT_S) and _flock(fd, fcntl.LOCK_EX, drain_s)

    def release_exclusive(self) -> None:
        held, self._held = self._held, []
        for fd in reversed(held):
            os.close(fd)


def _flock(fd: int, mode: int, wait_s: float) -> bool:
    """`flock(fd, mode)`, polled for at most `wait_s` seconds; whether it was taken."""
    deadline, pause = time.monotonic() + wait_s, 0.001
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
