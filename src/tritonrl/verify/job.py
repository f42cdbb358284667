"""One candidate's job in a worker: what the funnel and the timing phase both use.

The work dir it is written to (`write_job`: the candidate's code and its input sets as
tensor files; `Staging`: the sets written later, one at a time), the worker's limits
sized to the task's data (`sized_config`, `file_mb_for`), the GPU memory a pool
reserves for it (`gpu_estimate`), one command to the worker with its flags recorded
(`call`), the stages a result's seconds are counted under (`stage`), the shared side
of a pooled session's GPU gate (`shared`, `gate_shared`), and a set's float64 reference
for the second look at a float32 near miss (`widened_for`, the same in both phases). It
runs nothing itself: the funnel (`tritonrl.verify.funnel`) and the timing phase
(`tritonrl.verify.timing_phase`) drive the worker through it.

Staging: the sets are written before the worker starts, in funnel order, while they
come to at most `STAGE_AHEAD_BYTES` together (the worker reads them, and deletes their
files, before the candidate is imported: docs/hacks.md #15); the rest, a full-size
problem's GB-sized sets, are written one at a time just before the command that uses
them, and the worker takes each (maps it and deletes its files) before any candidate
code of that command runs and frees it when it is done with it, so the staging disk
holds one such set at a time (and the timed set's parameters). A set that does not fit
the disk raises OSError(ENOSPC) before a byte of it is written.
"""

from __future__ import annotations

import dataclasses
import errno
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import torch

from tritonrl.config import VerifyConfig
from tritonrl.tasks.task import Task
from tritonrl.verify import tensorfile
from tritonrl.verify.inputs import PreparedSet, widened_reference
from tritonrl.verify.pool.gate import GpuGate
from tritonrl.verify.result import VerifyResult
from tritonrl.verify.session import Session, reply_limit


@contextmanager
def stage(result: VerifyResult, name: str):
    """Seconds spent inside, added to `result.stage_times[name]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        result.stage_times[name] = result.stage_times.get(name, 0.0) + time.perf_counter() - start


def shared(
    session: Session, config: VerifyConfig, label: str, result: VerifyResult | None = None
):  # fmt: skip
    """The shared side of a pooled session's GPU gate (a no-op without one, or when the
    job does not ask for exclusive timing); `label` names the holds in `gate.stats()`.
    The wait to enter is the verifier's queue, not the candidate's time: it moves the
    session's deadline (`Session.extend_deadline`) and is added to `result`'s stage
    `gate_wait` (inside whichever stage holds it: a reader tells the queue from the work)."""
    gate = gate_shared(session.gpu_gate, config, label)
    if gate is nullcontext:
        return nullcontext

    @contextmanager
    def hold() -> Iterator[None]:
        with gate() as waited:
            session.extend_deadline(waited)
            if result is not None:
                times = result.stage_times
                times["gate_wait"] = times.get("gate_wait", 0.0) + waited
            yield

    return hold


def gate_shared(gate: GpuGate | None, config: VerifyConfig, label: str):
    """`gate`'s shared side, or a no-op (no gate, or the job times beside other work)."""
    if gate is None or not config.exclusive_timing:
        return nullcontext
    return partial(gate.shared, label)


def widened_for(
    session: Session, task: Task, s: PreparedSet, device: str, gpu=nullcontext
) -> Callable[[], Any]:
    """`compare.compare_outputs`' `widened` for set `s`: the reference's outputs for the
    inputs of `s` computed in float64 (`inputs.widened_reference`), made at the first
    call and kept for the next (the timing phase compares one set twice). That pass is
    the trusted side's: its time moves the session's deadline. `gpu`: a context held
    around it (the gate's shared side, where the caller does not hold it already). A
    forward that cannot run in float64 (an op without it, memory) gives None: no second
    look, the first verdict stands."""
    made: list[Any] = []

    def widened() -> Any:
        if not made:
            with gpu():
                started = time.monotonic()
                try:
                    made.append(widened_reference(task, s, device))
                except Exception:  # noqa: BLE001 - the first verdict stands
                    made.append(None)
                finally:
                    session.extend_deadline(time.monotonic() - started)
        return made[0]

    return widened


STAGE_AHEAD_BYTES = 1 << 30  # the sets written before the worker starts, at most


def set_bytes(s: PreparedSet) -> int:
    """What staging set `s` writes: its inputs and parameters."""
    return data_bytes(s.inputs) + data_bytes(s.state_dict)


def plan_staging(
    sets: list[PreparedSet], ahead: int | None = None
) -> tuple[list[PreparedSet], list[PreparedSet]]:
    """(the sets written before the worker starts, those written one at a time later):
    the longest run of sets, in order, that comes to at most `ahead` bytes
    (STAGE_AHEAD_BYTES by default), then the rest."""
    ahead = STAGE_AHEAD_BYTES if ahead is None else ahead
    total = 0
    for i, s in enumerate(sets):
        total += set_bytes(s)
        if total > ahead:
            return sets[:i], sets[i:]
    return list(sets), []


def _room(workdir: Path, need: int, what: str) -> None:
    free = shutil.disk_usage(workdir).free
    if need > free:
        raise OSError(errno.ENOSPC, f"{what} need {need / 1e9:.2f} GB, {free / 1e9:.2f} GB free")


def _write_set(workdir: Path, s: PreparedSet) -> None:
    payload = {
        "init_inputs": s.init_inputs,
        "inputs": s.inputs,
        "state_dict": s.state_dict,
        "seed": s.spec.param_seed,
        "dtype": str(s.spec.dtype).removeprefix("torch.") if s.spec.dtype else None,
    }
    tensorfile.save(payload, workdir / "sets" / f"{s.spec.name}.pt")
    if s.spec.name != "seed_a":  # only the timed set's inputs are needed again
        s.inputs = None


class Staging:
    """The sets of a job not written yet (`write_job`'s `later`): `stage(name)` writes
    one just before the command that uses it, and says whether it did (the command then
    tells the worker to take it: `"staged": true`). Each is checked against the free
    disk first: OSError(ENOSPC) when it does not fit."""

    def __init__(self, workdir: Path, later: list[PreparedSet] | None = None) -> None:
        self.workdir = workdir
        self.pending = {s.spec.name: s for s in later or []}

    def stage(self, name: str | None) -> bool:
        s = self.pending.pop(name, None) if name else None
        if s is None:
            return False
        _room(self.workdir, set_bytes(s), f"input set {name} (written when it is run)")
        _write_set(self.workdir, s)
        return True


def write_job(workdir: Path, code: str, sets: list[PreparedSet]) -> Staging:
    """The candidate's code in `workdir`, and each set's inputs, parameters and seeds as
    far as `plan_staging` writes them ahead (the worker reads and deletes those before
    the candidate is imported); returns the `Staging` of the others. The inputs of every
    set but the timed one are dropped here once written. Raises OSError(ENOSPC) before a
    byte is written when the sets written ahead, and the largest of the others, do not
    fit the disk `workdir` is on."""
    now, later = plan_staging(sets)
    need = sum(set_bytes(s) for s in now) + max((set_bytes(s) for s in later), default=0)
    what = "the input sets" if not later else (
        f"the input sets written ahead and the largest of {len(later)} written one at a time"
    )  # fmt: skip
    _room(workdir, need, what)
    (workdir / "candidate.py").write_text(code, encoding="utf-8")
    (workdir / "sets").mkdir()
    for s in now:
        _write_set(workdir, s)
    return Staging(workdir, later)


def call(session: Session, result: VerifyResult, cmd: dict) -> dict:
    """One command; the reply's flags and the findings log's are recorded. A call that
    failed on a sandbox limit (an allocation refused under RLIMIT_AS, say) ends the
    session as a kill by that limit would: WorkerError."""
    reply = session.call(cmd)
    result.add_flags(reply.get("flags"))
    result.add_findings(session.findings())
    limit = reply_limit(reply)
    if limit:
        raise session.limit_error(limit, reply["error"])
    return reply


def file_mb_for(config: VerifyConfig, sets) -> int:
    """The worker's file-size limit in MB: room for the largest outputs it writes
    (full-size tasks on CUDA), never under `config.max_file_mb`."""
    need = max(output_bytes(s.expected) for s in sets) >> 20
    return max(config.max_file_mb, int(need * 1.25) + 64)


# What the worker needs beside its data: the interpreter, torch, triton and, on CUDA,
# the host side of a CUDA context.
WORKER_BASE_MB = {False: 1024, True: 3072}
SECONDS_PER_GB = 2.0  # the timeout's allowance per GB of inputs and outputs moved
STAGE_SECONDS_PER_GB = 2.0  # and per GB of sets written while the worker runs


def sized_config(config: VerifyConfig, sets, device: str) -> VerifyConfig:
    """`config` with the worker's memory limit and timeout grown to the task's data
    (never below the configured ones): the worker maps every set's inputs (file-backed,
    reclaimable), holds one set's inputs and parameters while it moves them to the
    device, and one set's outputs twice while it writes them (a host copy and the file's
    dirty pages). Full-size KernelBench problems move several GB per set."""
    largest_in = max(data_bytes(s.inputs) + data_bytes(s.state_dict) for s in sets)
    largest_out = max(output_bytes(s.expected) for s in sets)
    need_mb = WORKER_BASE_MB[device == "cuda"] + int(1.25 * (largest_in + 2 * largest_out)) // (
        1 << 20
    )
    moved_gb = sum(data_bytes(s.inputs) + output_bytes(s.expected) for s in sets) / 1e9
    staged_gb = sum(set_bytes(s) for s in plan_staging(sets)[1]) / 1e9  # inside the deadline
    timeout = config.timeout_s + round(  # whole seconds
        SECONDS_PER_GB * moved_gb + STAGE_SECONDS_PER_GB * staged_gb
    )
    if need_mb <= config.memory_mb and timeout == config.timeout_s:
        return config
    return dataclasses.replace(config, memory_mb=max(config.memory_mb, need_mb), timeout_s=timeout)


# A worker's GPU memory beside its data: its CUDA context, the timer's L2 flush buffer,
# library workspaces.
WORKER_GPU_BASE_BYTES = 1 << 30


def gpu_estimate(sets, factor: float) -> int:
    """The GPU memory a job needs, as a pool's budget reserves it
    (`tritonrl.verify.pool.budget`): `factor` times its largest set's inputs, parameters and
    reference outputs, plus WORKER_GPU_BASE_BYTES; 0 for a job with no set (the funnel
    ended before the worker). The worker holds the timed set beside the one it runs,
    the timing phase a copy of the inputs and both outputs, the trusted side the
    reference alone after it (docs: `verify.gpu_memory_factor`)."""
    if not sets:
        return 0
    largest = max(set_bytes(s) + output_bytes(s.expected) for s in sets)
    return WORKER_GPU_BASE_BYTES + int(factor * largest)


def data_bytes(obj) -> int:
    """Bytes of every tensor in `obj` (nested lists, tuples and dicts)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(data_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(data_bytes(x) for x in obj.values())
    return 0


def output_bytes(out) -> int:
    """Bytes an output must at least be written with (its storage, so broadcast views of
    a small buffer count small)."""
    if isinstance(out, torch.Tensor):
        return min(out.numel() * out.element_size(), out.untyped_storage().nbytes())
    if isinstance(out, (list, tuple)):
        return sum(output_bytes(x) for x in out)
    return 0
