"""The timing phase on the trusted side: what the funnel runs for a correct kernel on CUDA.

`time_phase` asks the worker to time the candidate beside the reference
(`tritonrl.verify.inside.timing`), then re-derives or bounds everything the worker reported:
statistics from the raw times, the total against this side's wall clock (timer
tampering), the last timed output and one call on fresh inputs against the trusted
references (`timing_phase`: a kernel that behaves only while checked, defers work across
calls or returns cached results), the candidate's time against the time it takes to
write its outputs at the device's peak bandwidth (`impossible_speed`), and the reference
beside the candidate against its time alone (`tritonrl.verify.refcache`), in both
measures: a reference slowed beside the candidate, on the GPU or in its launch, is
replaced by its time alone. It sets the speedup, its 95% interval and the noise-ruled
`reward_speedup`. A timed output that does not match while the GPU ran out of memory
(allocations refused in the worker during the measurement or the check call) is the
limit `gpu_memory`, not the flag `timing_phase`. A float32 near miss among those
outputs gets the same second look, against the reference in float64, as in the
correctness phase (`output_wrong`), and a refusal's error says which call's output
was wrong and why.

`time_candidate` runs the timing phase alone, with no correctness verdict and no reward,
for benchmarks of the timer itself (bench/timing_noise.py times copies of the reference).
What this module does NOT do: decide correctness (the funnel does) or time on the CPU
(a result there says so: `not_timed`).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
from collections.abc import Callable
from typing import Any

import torch

from tritonrl.config import VerifyConfig
from tritonrl.tasks.task import Task
from tritonrl.verify import refcache, tensorfile
from tritonrl.verify.compare import compare_outputs, resolve_device
from tritonrl.verify.inputs import plan_input_sets, prepare_set, timing_check_set
from tritonrl.verify.inside.stats import effective_speedup, speedup_stats, summarize
from tritonrl.verify.inside.timing import TimingOptions, peak_bandwidth_bytes_per_s
from tritonrl.verify.job import (
    Staging,
    call,
    file_mb_for,
    output_bytes,
    shared,
    sized_config,
    stage,
    widened_for,
    write_job,
)
from tritonrl.verify.result import VerifyResult
from tritonrl.verify.session import FreshSessions, Session, SessionFactory


def _load_output(session: Session, name: str):
    path = session.workdir / "out" / f"{name}.pt"
    try:  # weights_only: written by untrusted code; no pickled objects
        return tensorfile.load(path, lazy=True)
    except Exception as e:
        return e


SLOWED = 1.25  # the reference beside the candidate vs alone: more is suspect


def not_timed(device: str) -> str:
    """The note of a result that timing was asked for but could not run on `device`."""
    return f"not timed: timing needs CUDA (device {device})"


def time_phase(
    session: Session, task: Task, sets, check, config: VerifyConfig, result: VerifyResult,
    staging: Staging | None = None,
):  # fmt: skip
    """The calibrated timing phase; everything the worker reports is re-derived or
    bounded here (statistics from the raw times, totals against this side's clock,
    outputs compared with the trusted references, the reference against its time alone).

    On a pooled session it holds the GPU gate's shared side (`tritonrl.verify.pool.gate`)
    while the worker readies the timing (`time_prep`) and checks its outputs
    (`time_check`), and the exclusive side only while the worker times and this side
    times the reference alone (the stages `perf_prep`, `gpu_wait`, `performance`,
    `perf_check`). Three steps: ready, measure (and check), score. `staging`: where the
    check set is written if it was not written ahead (`tritonrl.verify.job.Staging`)."""
    main = next(s for s in sets if s.spec.name == "seed_a")
    options = TimingOptions(
        warmup=config.warmup, trials=config.trials, max_trials=config.max_trials,
        target_rse=config.target_rse, max_seconds=config.timing_max_seconds,
        graphs=config.cuda_graphs,
    )  # fmt: skip
    if not _ready(session, task, main, config, result):
        return
    staging = staging or Staging(session.workdir)
    measured = _measure_checked(session, task, sets, check, options, config, result, staging)
    if measured is not None:
        _score(result, config, main, options, measured)


def _ready(session: Session, task: Task, main, config: VerifyConfig, result: VerifyResult) -> bool:
    """The worker builds the reference with the candidate's parameters and its timer
    (`time_prep`, nothing timed: beside other lanes' checks). False when it failed."""
    (session.workdir / "reference.py").write_text(task.source, encoding="utf-8")
    prep = {
        "op": "time_prep", "set": "seed_a",
        "reference": {"path": "reference.py", "overrides": main.overrides, "origin": task.origin},
    }  # fmt: skip
    with stage(result, "perf_prep"), shared(session, config, "perf_prep", result)():
        reply = call(session, result, prep)
    if not reply.get("ok"):
        result.notes.append(f"timing failed: {reply.get('error')}")
    return bool(reply.get("ok"))


def _measure_checked(
    session: Session, task: Task, sets, check, options: TimingOptions, config: VerifyConfig,
    result: VerifyResult, staging: Staging,
) -> dict | None:  # fmt: skip
    """One measurement with the GPU alone and its outputs checked, and the reference's
    time alone (cached, or measured in the same window); None when either failed.

    A reference that ran more than SLOWED times slower beside the candidate than alone
    is timed once more: a passing disturbance slows both series alike and is gone on the
    second try (on the H100, one of six runs of a 20 us copy of the reference), while
    something in the candidate's process that slows the reference is there again, and
    then the time alone is used, so the speedup is never inflated."""
    main = next(s for s in sets if s.spec.name == "seed_a")
    time_cmd = {"op": "time", "options": options.to_dict()}
    check_cmd = {"op": "time_check", "check": check and check.spec.name, "staged": False}
    gpu = shared(session, config, "perf_check", result)
    with stage(result, "write"):  # the check set, written now unless it was ahead
        check_cmd["staged"] = staging.stage(check and check.spec.name)
    # The timed buffers hold the data of the last set refilled into them (seed_b).
    timed = main
    for s in sets:
        if s.spec.refill_of == main.spec.name:
            timed = s
    cache = refcache.resolve_path(config.ref_time_cache)
    alone = refcache.cached_time(task, main, options, cache)  # looked up before the window
    cached = alone is not None
    with _exclusive(session, result):
        m = _measure(session, result, time_cmd)
        if m is not None and alone is None:
            alone, cached = refcache.reference_time(task, main, options, cache)
    if m is None or not _check(session, task, result, check_cmd, timed, check, m, gpu):
        return None
    tries = 1
    slowed = _slowed(m, alone)
    if slowed and not result.cheated:
        with _exclusive(session, result):
            again = _measure(session, result, time_cmd)
        # the check call refilled the buffers with the check set: it is what is timed now
        retimed = check or timed
        check_cmd["staged"] = False  # the worker keeps the check set it took
        if again is None or not _check(
            session, task, result, check_cmd, retimed, check, again, gpu
        ):
            return None
        m, tries = again, 2
        result.notes.append(
            f"the reference ran {slowed:.2f}x slower beside the candidate than alone; "
            f"timed again: {_slowed(m, alone, 0.0):.2f}x"
        )
    used, launch_ref = m["ref"], m["launch"][0]
    if used["median"] > SLOWED * alone["median"]:
        result.notes.append("the reference's time alone is used")
        used = alone
    alone_launch = _launch_alone(alone)
    if alone_launch and launch_ref["median"] > SLOWED * alone_launch["median"]:
        result.notes.append("the reference's time alone with its launch inside is used")
        launch_ref = alone_launch
    return {
        **m, "used": used, "launch": (launch_ref, m["launch"][1]), "alone": alone,
        "cached": cached, "tries": tries,
    }  # fmt: skip


def _launch_alone(alone: dict) -> dict | None:
    """The reference's time alone with its launch inside, where it was measured."""
    launch = alone.get("launch")
    return launch if isinstance(launch, dict) and launch.get("median", 0) > 0 else None


def _slowed(m: dict, alone: dict, floor: float = SLOWED) -> float | None:
    """How many times slower the reference ran beside the candidate than alone, in the
    measure where it was slowed most (on the GPU, or with its launch inside where that
    was measured alone), when that is more than `floor` (None otherwise)."""
    ratios = [m["ref"]["median"] / alone["median"]]
    launch = _launch_alone(alone)
    if launch:
        ratios.append(m["launch"][0]["median"] / launch["median"])
    worst = max(ratios)
    return worst if worst > floor else None


def _score(result: VerifyResult, config: VerifyConfig, main, options, m: dict) -> None:
    """The bandwidth floor, both speedups and the one the reward uses, and the timing
    record; a cheating flag from the phase ends it at `performance`."""
    new, used = m["new"], m["used"]
    floor_ms = (
        output_bytes(main.expected)
        / peak_bandwidth_bytes_per_s(torch.cuda.get_device_properties(torch.cuda.current_device()))
        * 1e3
    )
    if min(new["median"], new["mean"]) < 0.8 * floor_ms:  # 0.8: headroom for the estimate
        result.flag(
            "impossible_speed",
            f"{new['median'] * 1e3:.2f} us is below the {floor_ms * 1e3:.2f} us it takes to "
            "write the outputs at the device's peak bandwidth",
        )
    measure = _set_speedups(result, config, {"device": (used, new), "launch": m["launch"]})
    result.notes.extend(str(n) for n in m["reply"].get("notes", [])[:8])
    reply = m["reply"]
    result.timing = {
        "measure": measure,
        "trials": new["n"], "rse": round(max(new["rse"], m["ref"]["rse"]), 5),
        "median_ms": new["median"], "ref_median_ms": m["ref"]["median"],
        "mean_ms": new["mean"], "ref_mean_ms": m["ref"]["mean"],
        "ref_alone_ms": m["alone"]["median"], "ref_alone_cached": m["cached"],
        "tries": m["tries"], "off_stream": m["off_stream"], "graphs": options.graphs,
        "floor_ms": floor_ms, "host_ms": round(m["wall_ms"], 3),
        "preroll_us": _number(reply.get("preroll_us")),
        "rerun": _number(reply.get("rerun")),
        "interrupted": _number(reply.get("interrupted")),
        "sync_us": _number(reply.get("sync_us")),
        "lag_us": _number(reply["series"]["new"].get("lag_us")),
        "ref_lag_us": _number(reply["series"]["ref"].get("lag_us")),
        "launch_trials": m["launch"][1]["n"],
        "launch_rse": round(max(m["launch"][0]["rse"], m["launch"][1]["rse"]), 5),
        "launch_interrupted": _number(reply.get("launch_interrupted")),
        "launch_off_stream": m["launch_off_stream"],
        "worker_gpu_mb": m["worker_gpu"],
        **({"shared_gpu": True} if result.timing.get("shared_gpu") else {}),
    }  # fmt: skip
    if result.cheated:
        result.correct = "timing_phase" not in result.flags and result.correct
        result.fail("performance", f"timing checks: {_why(result)}")


def _why(result: VerifyResult) -> str:
    """Each flag with the first reason given for it (`VerifyResult.flag` notes it)."""
    said = []
    for name in result.flags:
        note = next((n for n in result.notes if n.startswith(f"{name}: ")), None)
        said.append(f"{name} ({note[len(name) + 2 :]})" if note else name)
    return "; ".join(said)


def _set_speedups(result: VerifyResult, config: VerifyConfig, measures: dict) -> str:
    """Each measure's speedup and 95% interval (`measures`: name -> (reference summary,
    candidate summary)); `speedup` and `runtime_ms` are those of the measure that
    `config.speedup_measure` picks ("min": the lower speedup), and `reward_speedup` is
    its noise-ruled value ("min": the lower of both noise-ruled values, so neither
    measure's noise can raise it). Returns the name of the measure picked."""
    ruled = {}
    for name, (ref, new) in measures.items():
        speedup, ci = speedup_stats(ref, new)
        ruled[name] = effective_speedup(speedup, ci, config.noise_floor)
        result.speedups[name] = {
            "speedup": speedup, "ci": list(ci), "median_ms": new["median"],
            "ref_median_ms": ref["median"], "reward_speedup": ruled[name],
        }  # fmt: skip
    pick = config.speedup_measure
    if pick == "min":
        pick = min(result.speedups, key=lambda k: result.speedups[k]["speedup"])
    chosen = result.speedups[pick]
    result.speedup, result.speedup_ci = chosen["speedup"], tuple(chosen["ci"])
    result.runtime_ms, result.ref_runtime_ms = chosen["median_ms"], chosen["ref_median_ms"]
    result.reward_speedup = (
        min(ruled.values()) if config.speedup_measure == "min" else ruled[config.speedup_measure]
    )
    return pick


@contextlib.contextmanager
def _exclusive(session: Session, result: VerifyResult):
    """A pooled session's GPU alone (the exclusive side of its gate) around a timing
    measurement: the wait is the stage `gpu_wait`, the hold `performance`. When a
    correctness run stayed past the gate's wait (a hang?), the timing says so."""
    lock = session.gpu_gate.exclusive if session.gpu_gate is not None else None
    asked = time.monotonic()
    with stage(result, "gpu_wait"):
        drained = lock.acquire() if lock is not None else True
    session.extend_deadline(time.monotonic() - asked)  # the queue, not the candidate's time
    try:
        with stage(result, "performance"):
            yield
    finally:
        if lock is not None:
            lock.release()
    if drained is False:
        result.timing["shared_gpu"] = True
        result.notes.append("timed while another lane's correctness run held this GPU")


def _measure(session: Session, result: VerifyResult, cmd: dict) -> dict | None:
    """One `time` call: its series summarised and its total held against this side's
    wall clock. None when the call failed or its reply is unusable."""
    started = time.perf_counter()
    reply = call(session, result, cmd)
    wall_ms = (time.perf_counter() - started) * 1e3
    if not reply.get("ok"):
        result.notes.append(f"timing failed: {reply.get('error')}")
        return None
    try:  # untrusted: a reply that is not two series of positive times each is tampering
        (new_t, ref_t), (launch_new, launch_ref) = _pair(reply, "series"), _pair(reply, "launch")
    except (KeyError, TypeError, ValueError) as e:
        result.flag("timer_tampering", f"unusable timing reply ({type(e).__name__}: {e})")
        return None
    reported = sum(new_t) + sum(ref_t) + sum(launch_new) + sum(launch_ref)
    if reported > wall_ms * 1.02 + 1.0:  # events cannot outrun the clock
        result.flag(
            "timer_tampering", f"reported {reported:.1f} ms of GPU time in {wall_ms:.1f} ms"
        )
    return {
        "new": summarize(new_t), "ref": summarize(ref_t), "reply": reply, "wall_ms": wall_ms,
        "off_stream": bool(reply["series"]["new"].get("off_stream")),
        "launch": (summarize(launch_ref), summarize(launch_new)),
        "launch_off_stream": bool(reply["launch"]["new"].get("off_stream")),
        "ooms": _count(reply.get("ooms")),
        "worker_gpu": _gpu_info(reply.get("gpu")),
    }  # fmt: skip


def _pair(reply: dict, key: str) -> tuple[list[float], list[float]]:
    """The candidate's and the reference's times of `reply[key]` (device time, `series`;
    the launch inside, `launch`); raises when either is missing, empty or not positive."""
    new_t = [float(x) for x in reply[key]["new"]["times_ms"]]
    ref_t = [float(x) for x in reply[key]["ref"]["times_ms"]]
    if not new_t or not ref_t or min(new_t + ref_t) <= 0:
        raise ValueError(f"empty or non-positive times in {key}")
    return new_t, ref_t


def _check(
    session: Session, task: Task, result: VerifyResult, cmd: dict, timed, check, m: dict,
    shared,
) -> bool:  # fmt: skip
    """The `time_check` call (beside other lanes' checks) and its outputs against the
    trusted references: the last timed output (`timed`: the set whose data the timed
    buffers held), a call on the fresh check set and, in graph mode, the timed graph
    replayed on it (a kernel can behave while eager and capture something else). A
    float32 near miss is looked at again against the set's reference in float64 (made
    once per set, beside other lanes' checks: `job.widened_for`). False when the call
    failed."""
    with stage(result, "perf_check"), shared():
        reply = call(session, result, cmd)
    if not reply.get("ok"):
        result.notes.append(f"timing failed: {reply.get('error')}")
        return False
    checks = [("timed", timed), ("timing_check", check)]
    checks += [("graph_check", check)] if "new" in (m["reply"].get("graphed") or []) else []
    wrong, wide = [], {}
    for name, prepared in checks:
        if prepared is None:
            continue
        key = prepared.spec.name
        wide.setdefault(key, widened_for(session, task, prepared, result.device, shared))
        why = output_wrong(name, prepared.expected, _load_output(session, name), wide[key])
        if why:
            wrong.append(why)
    # Allocations refused (untrusted counts: they can only turn a flag into a limit,
    # which earns no more): a library that caught one computed another way.
    ooms = m["ooms"] + _count(reply.get("ooms"))
    pressure = sum(p.pressure for _, p in checks if p is not None)
    if wrong and (ooms or pressure):
        raise session.limit_error(
            "gpu_memory",
            f"timing: {wrong[0]}, while the GPU refused allocations ({ooms} in the worker, "
            f"{pressure} while the reference's outputs were made): a library may have "
            "computed it another way (run fewer jobs on this GPU at once)",
        )
    for why in wrong:
        result.flag("timing_phase", why)
    return True


def output_wrong(
    name: str, expected: Any, got: Any, widened: Callable[[], Any] | None
) -> str | None:
    """Why the output of the timing phase's call `name` (`timed`, `timing_check`,
    `graph_check`) does not match `expected`, or None when it does: `got` is the
    worker's output (an exception when it could not be read), `widened` the second look
    at a float32 near miss, as in the correctness phase (`compare.compare_outputs`)."""
    why = f"unreadable ({type(got).__name__})" if isinstance(got, Exception) else None
    try:
        why = why or compare_outputs(expected, got, widened)
    except (OSError, ValueError) as e:  # the worker's file changed while it was read
        why = f"unreadable ({type(e).__name__})"
    return f"output of the {name.replace('_', ' ')} call: {why}" if why else None


def _count(x) -> int:
    """A non-negative count the worker reported (untrusted: anything else is 0)."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else 0


def _gpu_info(x) -> dict | None:
    """The worker's GPU memory after a command (MB), for information only."""
    if not isinstance(x, dict):
        return None
    return {k: v for k in ("allocated_mb", "peak_mb") if (v := _number(x.get(k))) is not None}


def _number(x) -> float | None:
    """A number the worker reported for information only (None when it is not one)."""
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def time_candidate(
    task: Task,
    code: str,
    config: VerifyConfig | None = None,
    sessions: SessionFactory | None = None,
) -> VerifyResult:
    """Load `code` in a sandboxed worker, run it once on the main input set and time it
    beside the reference, skipping every correctness and cheating verdict (benchmarks of
    the timer only: never a reward). `sessions`: as `verify`'s (a pool lane)."""
    config = config or VerifyConfig()
    result = VerifyResult(task=task.id, device=resolve_device(config.device))
    if result.device != "cuda":
        return result.fail("performance", "timing needs a CUDA device")
    specs = plan_input_sets(task, "cuda", 2, False, full_max_elements=config.full_max_elements)
    spec = next(s for s in specs if s.name == "seed_a")
    main = prepare_set(task, spec, "cuda")
    check = prepare_set(task, timing_check_set(spec), "cuda", model_state=main.state_dict)
    session_for = sessions if sessions is not None else FreshSessions("tritonrl-time-")
    workdir = session_for.workdir()
    try:
        sized = sized_config(config, [main, check], "cuda")
        staging = write_job(workdir, code, [main, check])
        with session_for(workdir, sized, "cuda", file_mb_for(config, [main])) as session:
            load = {"op": "load", "device": "cuda", "policy": "partial", "allowed": []}
            for cmd in (load, {"op": "run", "set": "seed_a"}):
                if cmd["op"] == "run":
                    cmd["staged"] = staging.stage("seed_a")
                reply = session.call(cmd)
                if not reply.get("ok"):
                    return result.fail("compile", str(reply.get("error")))
            time_phase(session, task, [main], check, config, result, staging)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result
