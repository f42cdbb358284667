"""`verify(task, candidate, config) -> VerifyResult`: the staged funnel.

    extract -> static checks -> compile/import (sandbox) -> tiny run -> every input set
            -> timing (CUDA, correct kernels only; elsewhere the result says "not timed")

Each stage records its time and, when the funnel is on, a failing stage ends the
evaluation. The trusted side (this process) builds inputs, runs the reference, compares
outputs and decides; the candidate only ever runs in the sandboxed worker
(`tritonrl.verify.inside.worker`), which never sees a reference output. The worker's flags come
from its replies and from its findings log, read after every reply and when the worker
dies or times out (a forward that segfaults right after a host round-trip is flagged,
not merely "wrong"); a set during which the worker died is a failed input set.

A set's outputs that do not match are a wrong answer, except: on a set written into an
earlier set's buffers (`refill_of`: seed_b), outputs that hold the earlier set's answer
(`STALE_SHARE` of the elements where the two answers differ) are `output_caching`
(docs/hacks.md #7); and a mismatch while the GPU ran out of memory (an allocation the
CUDA caching allocator refused during the set, in the worker or in the reference's
passes here: a library such as cuDNN catches it and computes another way) is the limit
`gpu_memory`, never a cheat. The trusted side's own out-of-memory errors (the
reference's passes, comparing outputs) are `gpu_memory` too.

Never raises for a bad candidate: every outcome is a `VerifyResult`. By default each
candidate gets a fresh `WorkerSession`; `sessions` (a `session.SessionFactory`: the
worker pool's lanes, `tritonrl.verify.pool.lane`) gives the work dir and the session
instead. `verify` is `finish(prepare(...))`: `prepare` is the trusted side's half up to
the input sets and their reference outputs, which needs no worker (the pool runs it
ahead of the lanes); `finish` runs the candidate.
"""

from __future__ import annotations

import errno
import logging
import shutil
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from tritonrl.config import VerifyConfig
from tritonrl.extract import try_extract
from tritonrl.tasks.families import verify_config_for
from tritonrl.tasks.task import Task
from tritonrl.verify import tensorfile
from tritonrl.verify.compare import compare_outputs, resolve_device, stale_share
from tritonrl.verify.findings import read_findings
from tritonrl.verify.inputs import (
    TRUSTED_LOCK,
    PreparedSet,
    plan_input_sets,
    prepare_set,
    timing_check_set,
)
from tritonrl.verify.job import (
    Staging,
    call,
    file_mb_for,
    gate_shared,
    shared,
    sized_config,
    stage,
    widened_for,
    write_job,
)
from tritonrl.verify.pool.gate import GpuGate, current_gate
from tritonrl.verify.result import InputSetOutcome, VerifyResult
from tritonrl.verify.session import FreshSessions, Session, SessionFactory, WorkerError
from tritonrl.verify.static import static_check
from tritonrl.verify.timing_phase import not_timed, time_phase

log = logging.getLogger(__name__)
BIG_SET_BYTES = 256 << 20  # the trusted side's CUDA cache unused beyond this is given back
# A refill set's wrong outputs that hold the refilled set's answer in at least this share
# of the elements where the two answers differ are a stale cached result (output_caching);
# a kernel that computes the new inputs, however inexactly, holds it in almost none.
STALE_SHARE = 0.9


def verify(
    task: Task,
    candidate: str | bytes,
    config: VerifyConfig | None = None,
    sessions: SessionFactory | None = None,
) -> VerifyResult:
    """Verify one candidate (raw code or a whole model completion) for `task`. `sessions`:
    where its work dir and session come from (None: a temp dir and a fresh worker)."""
    gate = sessions.gpu_gate if sessions is not None else None
    return finish(prepare(task, candidate, config, gate), sessions)


@dataclass
class Prepared:
    """A candidate after the trusted side's half of the funnel (extract, static checks,
    the input sets and their reference outputs), before any of its code has run. `sets`
    is None when the funnel already ended (`result` says why)."""

    task: Task
    config: VerifyConfig
    result: VerifyResult
    code: str | None = None
    sets: list[PreparedSet] | None = None
    check: PreparedSet | None = None


def prepare(
    task: Task,
    candidate: str | bytes,
    config: VerifyConfig | None = None,
    gpu_gate: GpuGate | None = None,
) -> Prepared:
    """The trusted side's half of `verify`: needs no worker, so the pool runs it ahead of
    the lanes (`tritonrl.verify.pool.pool`). `gpu_gate`: the GPU gate whose shared side the
    reference's passes hold (`tritonrl.verify.pool.gate`; None: on CUDA, `current_gate()`).
    Never raises."""
    config = verify_config_for(config or VerifyConfig(), task.id)
    result = VerifyResult(task=task.id, device=resolve_device(config.device))
    prepared = Prepared(task, config, result)
    try:
        if gpu_gate is None and result.device == "cuda":  # a lone verify: its GPU's gate
            gpu_gate = current_gate()
        _prepare(prepared, candidate, gpu_gate)
    except Exception as e:  # a verifier bug must still give a verdict, never a traceback
        _verifier_error(prepared.result, task, e)
    return prepared


def finish(prepared: Prepared, sessions: SessionFactory | None = None) -> VerifyResult:
    """The candidate's half of `verify`: its worker, every input set and the timing
    phase. `sessions` as `verify`'s. Never raises."""
    task, result = prepared.task, prepared.result
    if prepared.sets is not None:
        try:
            _run_prepared(prepared, sessions)
        except Exception as e:  # a verifier bug must still give a verdict, never a traceback
            _verifier_error(result, task, e)
    return result


def _verifier_error(result: VerifyResult, task: Task, e: Exception) -> None:
    """The verdict for an exception on the trusted side. Two are the machine's limits,
    named as such with how to make room: the GPU had no memory left for the reference's
    passes (`gpu_memory`), or the disk the input sets are staged on filled (`disk`).
    Anything else is a verifier bug, logged with its traceback."""
    if isinstance(e, torch.OutOfMemoryError):
        result.limit = result.limit or "gpu_memory"
        result.fail(result.stage, (
            f"limit gpu_memory: the verifier's side found no GPU memory at stage "
            f"{result.stage} (for the reference's passes, comparing outputs or timing the "
            f"reference alone: this task's data beside the candidate's worker does not fit "
            f"this GPU; run fewer jobs on it at once, lower verify.gpu_memory_fraction, or "
            f"use a larger GPU): {str(e).splitlines()[0][:160]}"
        ))  # fmt: skip
    elif isinstance(e, OSError) and e.errno == errno.ENOSPC:
        result.limit = result.limit or "disk"
        result.fail(result.stage, (
            f"limit disk: no space left to stage the input sets in {tempfile.gettempdir()} "
            f"at stage {result.stage}: {e.strerror} (a full-size problem's sets are on disk "
            f"one at a time, a small problem's all at once; point TMPDIR at a larger disk)"
        ))  # fmt: skip
    else:
        log.exception("verifier error on %s", task.id)
        result.fail(result.stage, f"verifier error: {type(e).__name__}: {e}")


def _prepare(prepared: Prepared, candidate, gpu_gate: GpuGate | None) -> None:
    task, config, result = prepared.task, prepared.config, prepared.result
    with stage(result, "extract"), TRUSTED_LOCK:
        code, error = try_extract(candidate)
    if code is None:
        result.fail("extract", error or "no code found")
        return
    result.stage = "static"
    with stage(result, "static"), TRUSTED_LOCK:
        findings = (
            static_check(code, config.policy, frozenset(config.allowed_torch_ops))
            if config.static_checks
            else []
        )
    for f in findings:  # line 0: the whole file (no kernel at all), not a line of it
        result.flag(f.flag, f"line {f.line}: {f.detail}" if f.line else f.detail)
    if result.cheated and config.funnel:
        first = findings[0]
        where = f" (line {first.line})" if first.line else ""
        result.fail("static", f"static checks: {first.flag}{where}")
        return
    # The reference's pass on the GPU: beside other lanes' checks, never while one times.
    gpu = gate_shared(gpu_gate, config, "prepare")
    with stage(result, "prepare"):
        sets = _prepare_sets(task, config, result, gpu)
    if sets is None:
        return
    check = None
    if result.device == "cuda" and config.timing:
        with stage(result, "prepare"):
            seed_a = next((s for s in sets if s.spec.name == "seed_a"), None)
            check = seed_a and prepare_set(
                task, timing_check_set(seed_a.spec), result.device, gpu, seed_a.state_dict
            )
    prepared.code, prepared.sets, prepared.check = code, sets, check
    if result.device == "cuda" and unused_cuda_cache() > BIG_SET_BYTES:
        # The reference's passes of a full-size problem left GBs in this process's CUDA
        # cache (inputs drawn and cloned, however small the output), which the
        # candidate's worker needs on the same GPU.
        torch.cuda.empty_cache()


def unused_cuda_cache() -> int:
    """Bytes this process's CUDA caching allocator holds and no tensor uses."""
    return torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


def _run_prepared(prepared: Prepared, sessions: SessionFactory | None = None) -> None:
    task, config, result = prepared.task, prepared.config, prepared.result
    sets, check = prepared.sets, prepared.check
    session_for = sessions if sessions is not None else FreshSessions()
    workdir = session_for.workdir()
    every = sets + ([check] if check else [])
    # the worker's memory limit and timeout grow with the task's data (sized before the
    # inputs that are written are dropped)
    sized = sized_config(config, every, result.device)
    try:
        with stage(result, "write"):
            staging = write_job(workdir, prepared.code, every)
        # A `with` statement, its start and its end timed as stages of their own.
        with stage(result, "start"):
            session = session_for(workdir, sized, result.device, file_mb_for(config, sets))
            session.__enter__()
        try:
            result.sandbox = {"enforced": session.enforced, "missing": session.missing}
            _run_in_worker(session, task, sets, config, result, check, staging)
        finally:
            # The worker's CUDA context is torn down as it exits: GPU work as well.
            with stage(result, "teardown"), shared(session, config, "teardown", result)():
                session.__exit__(*sys.exc_info())
    except WorkerError as e:
        # The worker is dead (killed by now): what its guards saw before it died is in
        # its findings log, the one record that survives a segfault or the deadline.
        result.add_findings(read_findings(workdir))
        result.timed_out = result.timed_out or e.timed_out
        result.limit = result.limit or e.limit  # a limit ended it, whatever the stage
        result.fail(result.stage, str(e))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _prepare_sets(
    task: Task, config: VerifyConfig, result: VerifyResult, gpu=nullcontext
) -> list | None:
    sets = []
    specs = plan_input_sets(
        task, result.device, config.num_input_sets, config.multi_input, config.tiny_run_first,
        config.full_max_elements,
    )  # fmt: skip
    for spec in specs:
        # a set refilled into another's buffers keeps that set's model in the worker
        state = next((s.state_dict for s in sets if s.spec.name == spec.refill_of), None)
        try:
            sets.append(prepare_set(task, spec, result.device, gpu, state))
        except torch.OutOfMemoryError:  # the machine's limit, not the task's: named as such
            raise
        except Exception as e:  # the task's own code failed: not the candidate's fault
            result.fail(
                "compile", f"reference failed on input set {spec.name}: {type(e).__name__}: {e}"
            )
            return None
    return sets


class KernelNotCompiled(Exception):
    """Triton's compiler refused one of the candidate's kernels when it was launched: the
    candidate loaded (its module ran) but did not compile, and earns no partial credit for
    compiling (`VerifyResult.compiled` stays false; the staged reward's 0.3 is for kernels
    that compiled and then computed wrong values). On the CPU, Triton's interpreter runs
    kernels without compiling them, so the same mistake fails there as a run-time error."""


def _run_in_worker(
    session: Session, task: Task, sets, config: VerifyConfig, result: VerifyResult,
    check: PreparedSet | None = None, staging: Staging | None = None,
):  # fmt: skip
    staging = staging or Staging(session.workdir)
    result.stage = "compile"

    def gpu(label: str):  # the gate's shared side, its holds named `label`
        return shared(session, config, label, result)()

    # `load` makes the worker's CUDA context and runs the candidate's module code, both
    # of which may use the GPU: beside other lanes' checks, never while one times.
    with stage(result, "compile"), gpu("load"):
        reply = call(
            session,
            result,
            {
                "op": "load",
                "device": result.device,
                "policy": config.policy,
                "allowed": list(config.allowed_torch_ops),
                "max_block_elements": config.max_block_elements,
            },
        )
    if not reply.get("ok"):
        result.fail("compile", reply.get("error", "candidate failed to load"))
        return
    result.compiled = True
    result.stage = "correctness"
    all_ok = True
    # Sets the worker must keep on its device after their run: those refilled in place
    # later, and the timed one (seed_a); the others' memory is freed for the next set.
    keep = {s.spec.refill_of for s in [*sets, check] if s is not None} | {"seed_a"}
    held: dict[str, PreparedSet] = {}  # buffers -> the set whose data they hold
    for s in sets:
        stage_name = "tiny" if s.spec.name == "tiny" else "correctness"
        with stage(result, "write"):  # a full-size set is written just before its run
            staged = staging.stage(s.spec.name)
        stale = held.get(s.spec.refill_of) if s.spec.refill_of else None
        held[s.spec.refill_of or s.spec.name] = s
        with stage(result, stage_name), gpu(stage_name):
            try:
                ok, detail = _check_set(
                    session, s, result, s.spec.name in keep, staged, stale, task
                )
            except WorkerError as e:  # the worker died (or hung) on this set: it failed
                result.input_sets.append(InputSetOutcome(s.spec.name, False, str(e)))
                raise
            except KernelNotCompiled as e:  # Triton's JIT refused a kernel: not compiled
                result.input_sets.append(InputSetOutcome(s.spec.name, False, str(e)))
                result.compiled = False
                result.fail("compile", f"input set {s.spec.name}: {e}")
                return
        result.input_sets.append(InputSetOutcome(s.spec.name, ok, detail))
        if s is sets[0]:  # the tiny run, or the first full set when it is switched off
            result.tiny_correct = ok and not result.cheated
        all_ok = all_ok and ok
        if (not ok or result.cheated) and config.funnel:
            result.fail(
                "correctness",
                f"input set {s.spec.name}: {detail}"
                if not ok
                else f"run-time check: {', '.join(result.flags)}",
            )
            return
    result.correct = all_ok and not result.cheated
    if not result.correct:
        failed = [o for o in result.input_sets if not o.ok]
        result.fail(
            "correctness",
            f"input set {failed[0].name}: {failed[0].detail}"
            if failed
            else f"run-time check: {', '.join(result.flags)}",
        )
        if config.funnel and config.skip_timing_on_failure:
            return
    if config.timing and result.device != "cuda":
        result.notes.append(not_timed(result.device))
    elif config.timing:
        result.stage = "performance"
        time_phase(session, task, sets, check, config, result, staging)
    result.stage = "done" if result.correct and not result.cheated else result.stage


def _check_set(
    session: Session, s: PreparedSet, result: VerifyResult, keep: bool = True,
    staged: bool = False, stale: PreparedSet | None = None, task: Task | None = None,
) -> tuple[bool, str]:  # fmt: skip
    """Run set `s` in the worker and compare its outputs with the reference's. `staged`:
    its file was just written (the worker takes it). `stale`: the set whose data the
    buffers `s` is written into held before (its answer is what a cached result holds).
    `task`: the reference's float64 outputs for a float32 near miss come from it (that
    pass, the trusted side's, moves the session's deadline). A mismatch under GPU memory
    pressure raises the limit (a WorkerError)."""

    cmd = {
        "op": "run", "set": s.spec.name, "refill_of": s.spec.refill_of, "keep": keep,
        "staged": staged,
    }  # fmt: skip
    reply = call(session, result, cmd)
    if not reply.get("ok") and reply.get("kernel_compile"):
        raise KernelNotCompiled(reply.get("error", "a Triton kernel did not compile"))
    if not reply.get("ok"):
        return False, reply.get("error", "forward failed")
    out_path = session.workdir / "out" / f"{s.spec.name}.pt"
    if not out_path.is_file():
        return False, "no outputs were produced"
    stale_in = None
    try:
        # Written by untrusted code: a weights-only header, the raw parts read a chunk at
        # a time as they are compared, never mapped (the worker could truncate them).
        got = tensorfile.load(out_path, lazy=True)
        widened = widened_for(session, task, s, result.device) if task is not None else None
        reason = compare_outputs(s.expected, got, widened)
        if reason and stale is not None:
            stale_in = stale_share(stale.expected, s.expected, got)
    except torch.OutOfMemoryError:  # this side's GPU memory: a limit, not the candidate's
        raise
    except Exception as e:
        return False, f"unreadable outputs: {type(e).__name__}"
    finally:
        for path in [out_path, *tensorfile.parts(out_path)]:  # a full-size set's are GB
            path.unlink(missing_ok=True)
    if reason and stale_in is not None and stale_in >= STALE_SHARE:
        reason += (
            f" ({stale_in:.0%} of the elements where its answer and {stale.spec.name}'s "
            f"differ hold {stale.spec.name}'s: a stale cached result; inputs refilled in "
            f"place after {s.spec.refill_of})"
        )
        result.flag("output_caching", reason)
    elif reason:
        _pressure(session, reply, s, reason)
        if s.random_reference:
            reason += f" ({s.random_reference})"
    return reason is None, reason or ("ok" + (f" ({s.note})" if s.note else ""))


def _pressure(session: Session, reply: dict, s: PreparedSet, reason: str) -> None:
    """Raise the `gpu_memory` limit for a wrong answer computed while the GPU ran out of
    memory: allocations the CUDA caching allocator refused in the worker during the set
    (`reply["ooms"]`, untrusted: it can only turn a wrong answer into a limit, which
    earns no more) or here while the reference's outputs were made (`s.pressure`). A
    library that catches one (cuDNN tries another engine, with another precision)
    computes a different answer; that is the machine's limit, not the candidate's."""
    worker = reply.get("ooms")
    worker = worker if isinstance(worker, int) and worker > 0 else 0
    if not worker and not s.pressure:
        return
    where = " and ".join(
        x for x in (
            f"{worker} in the worker" if worker else "",
            f"{s.pressure} while the reference's outputs were made" if s.pressure else "",
        ) if x
    )  # fmt: skip
    raise session.limit_error(
        "gpu_memory",
        f"input set {s.spec.name}: {reason}, while the GPU refused allocations ({where}): a "
        "library may have computed it another way (run fewer jobs on this GPU at once)",
    )
