"""The per-GPU gate: correctness runs side by side, a timing phase alone, never starved."""

from __future__ import annotations

import threading
import time

import pytest

from tritonrl.verify.pool.gate import GpuGate


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_shared_holders_overlap_and_the_exclusive_side_waits_for_them():
    gate, events = GpuGate(), []
    inside = threading.Barrier(3)

    def check(name: str) -> None:
        with gate.shared():
            events.append(f"{name} in")
            inside.wait(5)  # both readers are inside at once
            time.sleep(0.05)
            events.append(f"{name} out")

    readers = [_in_thread(lambda n=n: check(n)) for n in ("a", "b")]
    inside.wait(5)
    with gate.exclusive as drained:
        events.append("timing")
    assert drained is True
    for t in readers:
        t.join(5)
    assert events.index("timing") > max(events.index("a out"), events.index("b out"))


def test_a_waiting_timing_phase_holds_new_correctness_runs_back():
    gate, events = GpuGate(), []
    first_in, release_first = threading.Event(), threading.Event()

    def first() -> None:
        with gate.shared():
            first_in.set()
            release_first.wait(5)
            events.append("first out")

    def timing() -> None:
        with gate.exclusive:
            events.append("timing")
            time.sleep(0.05)
            events.append("timing out")

    def late() -> None:
        with gate.shared():
            events.append("late in")

    threads = [_in_thread(first)]
    first_in.wait(5)
    threads.append(_in_thread(timing))
    time.sleep(0.05)  # the timing phase now waits for `first`
    threads.append(_in_thread(late))
    time.sleep(0.05)
    assert events == []  # the late reader did not slip in ahead of the waiting timing
    release_first.set()
    for t in threads:
        t.join(5)
    assert events == ["first out", "timing", "timing out", "late in"]


def test_a_hung_correctness_run_delays_timing_only_so_long_and_is_reported():
    gate = GpuGate(drain_s=0.2)
    hung, release = threading.Event(), threading.Event()

    def stuck() -> None:
        with gate.shared():
            hung.set()
            release.wait(10)

    t = _in_thread(stuck)
    hung.wait(5)
    start = time.monotonic()
    drained = gate.exclusive.acquire()
    waited = time.monotonic() - start
    gate.exclusive.release()
    release.set()
    t.join(5)
    assert drained is False and 0.15 < waited < 2.0
    with gate.exclusive as drained_now:  # nothing inside any more
        assert drained_now is True


def test_one_gate_per_gpu_for_the_whole_process():
    from tritonrl.verify.pool.gate import gate_for

    assert gate_for("0") is gate_for("0") and gate_for("0") is not gate_for("1")


@pytest.mark.parametrize(
    ("env", "share", "gpus"),
    [
        ({}, None, [("3", 0), ("5", 1)]),
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (1, 2), [("5", 1)]),
        ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, (0, 2), [("3", 0)]),
        ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, None, [("3", 0), ("5", 1)]),
        ({"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "2"}, None, [("3", 0), ("5", 1)]),
    ],
)
def test_a_rank_of_several_on_a_node_spreads_its_pool_over_its_own_gpu(monkeypatch, env,
                                                                       share, gpus):  # fmt: skip
    import torch

    from tritonrl.verify.pool.gate import launched_share, pool_gpus

    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # no GPU on this machine
    assert launched_share() == share
    assert pool_gpus() == gpus


@pytest.mark.gpu
def test_verify_calls_from_several_threads_time_one_at_a_time_on_their_gpus_gate():
    # A lone `verify` on CUDA (no pool) holds its GPU's gate like a pool's lane does: 3
    # threads verifying at once get 3 timing phases through one gate, one at a time, and
    # the same verdicts as alone. Without it they timed over each other (on the H100 a
    # copy of the reference then read 0.22x).
    from concurrent.futures import ThreadPoolExecutor

    from tritonrl.config import VerifyConfig
    from tritonrl.tasks import load_builtin
    from tritonrl.verify import verify
    from tritonrl.verify.pool.gate import current_gate

    task = load_builtin("level1/1_ReLU").tasks[0]
    config = VerifyConfig(device="cuda", ref_time_cache="off")
    gate = current_gate()
    gate.stats(reset=True)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: verify(task, task.solution, config), range(3)))
    assert all(r.correct and r.speedup is not None for r in results), results
    stats = gate.stats()
    assert stats["timings"] >= 3 and stats["shared"], stats
    assert all(not r.timing.get("shared_gpu") for r in results)


def test_preparing_a_set_holds_the_gate_only_around_the_reference_passes():
    # The inputs and parameters come from torch's RNG under the trusted lock; on the CPU
    # only the reference's forward pass uses the device (on CUDA the inputs' draw too,
    # the gate taken before the lock), and only it may wait for a timing phase.
    from tritonrl.tasks import load_builtin
    from tritonrl.verify.inputs import TRUSTED_LOCK, InputSet, prepare_set

    task = load_builtin("level1/1_ReLU").tasks[0]
    gate, entered = GpuGate(), []

    def watched():
        entered.append(TRUSTED_LOCK.locked())
        return gate.shared()

    prepare_set(task, InputSet("seed_a", "small", 123), "cpu", watched)
    prepare_set(task, InputSet("shifted", "small", 456, shift=True), "cpu", watched)
    assert entered == [False, False]


class _TimingWorker:
    """Stands in for a pooled session's worker, whose timing commands need CUDA: it
    answers each command as the real one does and records which side of the gate was
    held when the command arrived."""

    def __init__(self, workdir, gate: GpuGate, prepared, check, ref_ms: float) -> None:
        self.workdir, self.gpu_gate = workdir, gate
        self.prepared, self.check, self.ref_ms = prepared, check, ref_ms
        self.ops: list[tuple[str, int, bool]] = []

    def call(self, cmd: dict) -> dict:
        from tritonrl.verify import tensorfile

        gate = self.gpu_gate
        self.ops.append((cmd["op"], gate._shared, gate._held))
        if cmd["op"] == "time":
            times = {"new": [0.001] * 50, "ref": [self.ref_ms] * 50}
            return {"ok": True, "graphed": [], "notes": [],
                    "series": {k: {"times_ms": v} for k, v in times.items()},
                    "launch": {k: {"times_ms": v} for k, v in times.items()}}  # fmt: skip
        if cmd["op"] == "time_check":
            (self.workdir / "out").mkdir(exist_ok=True)
            # after the first check call the timed buffers hold the check set
            refilled = any(op == "time_check" for op, *_ in self.ops[:-1])
            timed = self.check if refilled else self.prepared
            tensorfile.save(timed.expected, self.workdir / "out" / "timed.pt")
            tensorfile.save(self.check.expected, self.workdir / "out" / "timing_check.pt")
        return {"ok": True}

    def findings(self) -> dict:
        return {}

    def extend_deadline(self, seconds: float) -> None:  # no deadline here
        self.waited = getattr(self, "waited", 0.0) + seconds


def test_a_timing_phase_holds_the_gpu_alone_only_while_it_times(tmp_path, monkeypatch):
    # Readying the timing and checking its outputs run beside other lanes' checks; only
    # the worker's measurement and the reference's time alone hold the GPU alone. A
    # reference slowed beside the candidate is measured again, also alone.
    import torch

    from tritonrl.config import VerifyConfig
    from tritonrl.tasks import load_builtin
    from tritonrl.verify import refcache
    from tritonrl.verify.inputs import InputSet, prepare_set, timing_check_set
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import time_phase

    task = load_builtin("level1/1_ReLU").tasks[0]
    main = prepare_set(task, InputSet("seed_a", "small", 123), "cpu")
    check = prepare_set(task, timing_check_set(main.spec), "cpu", model_state=main.state_dict)
    gate = GpuGate()
    alone_held = []

    def alone(*args):
        alone_held.append((gate._shared, gate._held))
        return {"median": 0.002, "mean": 0.002, "se": 1e-6, "rse": 1e-3, "n": 50}, True

    monkeypatch.setattr(refcache, "reference_time", alone)
    props = type("Props", (), {"memory_clock_rate": 2_619_000, "memory_bus_width": 5120})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    config = VerifyConfig(device="cuda", ref_time_cache="off")
    for ref_ms, tries in [(0.002, 1), (0.003, 2)]:  # as alone; 1.5x slower beside it
        worker = _TimingWorker(tmp_path, gate, main, check, ref_ms)
        result = VerifyResult(task=task.id, device="cuda")
        time_phase(worker, task, [main], check, config, result)
        ops = [("time_prep", 1, False)] + [("time", 0, True), ("time_check", 1, False)] * tries
        assert worker.ops == ops, worker.ops
        assert result.timing["tries"] == tries and not result.flags, result.flags
        # both measures reach the result, and which one the reward used
        assert set(result.speedups) == {"device", "launch"}
        assert result.timing["measure"] in result.speedups
        assert {"perf_prep", "gpu_wait", "performance", "perf_check"} <= set(result.stage_times)
    assert alone_held == [(0, True)] * 2


def test_stats_count_the_holds_the_waits_and_one_window_for_timings_back_to_back():
    gate = GpuGate()
    inside, release = threading.Event(), threading.Event()

    def check() -> None:
        with gate.shared("tiny"):
            inside.set()
            release.wait(5)

    def timing() -> None:
        with gate.exclusive:
            time.sleep(0.02)

    reader = _in_thread(check)
    inside.wait(5)
    writers = [_in_thread(timing) for _ in range(2)]
    deadline = time.monotonic() + 5
    while gate._writers < 2 and time.monotonic() < deadline:
        time.sleep(0.005)

    def late_check() -> None:
        with gate.shared("load"):  # waits for both timings
            pass

    late = _in_thread(late_check)
    time.sleep(0.1)
    release.set()
    for t in [reader, *writers, late]:
        t.join(5)
    stats = gate.stats()
    assert stats["shared"]["tiny"]["holds"] == 1 and stats["shared"]["tiny"]["longest"] >= 0.1
    assert stats["shared"]["load"]["holds"] == 1
    assert stats["windows"] == 1 and stats["timings"] == 2
    assert 0.04 <= stats["timing_held_s"] <= stats["window_s"]
    assert stats["window_s"] >= 0.14  # asked while the reader held on, then two timings
    assert stats["shared_blocked_s"] >= 0.14  # the late reader waited for all of it


def test_a_drain_is_filled_only_with_holds_expected_to_end_before_it():
    """While timing waits for a long hold to leave, a hold whose label has been short gets
    in; a label as long, one never seen, or any hold once the long one has run past its
    expected end waits for the timing; and the timing starts with the GPU empty."""
    gate, events = GpuGate(), []
    for _ in range(3):
        with gate.shared("short"):
            time.sleep(0.01)
    with gate.shared("long"):
        time.sleep(0.6)  # "long" holds are expected to last 0.6 s from now on
    long_in, release_long = threading.Event(), threading.Event()

    def long_hold() -> None:
        with gate.shared("long"):
            long_in.set()
            release_long.wait(5)
            events.append("long out")

    def timing() -> None:
        with gate.exclusive as drained:
            events.append(("timing", gate._shared, drained))
            time.sleep(0.05)

    def hold(label: str) -> None:
        with gate.shared(label):
            events.append(f"{label} in")

    threads = [_in_thread(long_hold)]
    long_in.wait(5)
    threads.append(_in_thread(timing))
    deadline = time.monotonic() + 5
    while gate._writers < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    hold("short")  # fits: done long before the long hold is expected to leave
    threads += [_in_thread(lambda: hold("long")), _in_thread(lambda: hold("unseen"))]
    time.sleep(0.7)  # the long hold is now past its expected end
    threads.append(_in_thread(lambda: hold("short")))
    time.sleep(0.1)
    assert events == ["short in"]
    release_long.set()
    for t in threads:
        t.join(5)
    assert events[:3] == ["short in", "long out", ("timing", 0, True)]
    assert sorted(events[3:]) == ["long in", "short in", "unseen in"]


_OTHER_PROCESS = """
import sys, time
from pathlib import Path
from tritonrl.verify.pool.gate import GpuGate, ProcessLock
gate = GpuGate(drain_s=float(sys.argv[3]), cross=ProcessLock(Path(sys.argv[1]), "gpu-test"))
side, hold = sys.argv[2], 1.0
if side == "exclusive":
    drained = gate.exclusive.acquire()
    start = time.monotonic()
    Path(sys.argv[1], "in").touch()
    time.sleep(hold)
    end = time.monotonic()
    gate.exclusive.release()
else:
    with gate.shared():
        start, drained = time.monotonic(), True
        Path(sys.argv[1], "in").touch()
        time.sleep(hold)
        end = time.monotonic()
print(drained, start, end)
"""


def _spawn(folder, side: str, drain_s: float = 10.0):
    """A second process that takes `side` of the same GPU lock and holds it for 1 s
    (its `communicate()` gives: drained, start, end)."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS, str(folder), side,
                             str(drain_s)], stdout=subprocess.PIPE, text=True)  # fmt: skip


def _other_process(folder, side: str, drain_s: float = 10.0):
    """`_spawn`, returned once the process is inside."""
    (folder / "in").unlink(missing_ok=True)
    proc = _spawn(folder, side, drain_s)
    deadline = time.monotonic() + 60
    while not (folder / "in").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "it never got in"
        time.sleep(0.01)
    return proc


def _times(proc) -> tuple[bool, float, float]:
    out, _ = proc.communicate(timeout=60)
    drained, start, end = out.split()
    return drained == "True", float(start), float(end)


def test_a_timing_phase_in_another_process_holds_this_ones_runs_and_timing_back(tmp_path):
    # Two processes on one GPU (two `tritonrl verify` commands, a trainer and an eval):
    # while one times, the other's correctness runs and its own timing phase wait.
    from tritonrl.verify.pool.gate import ProcessLock

    gate = GpuGate(cross=ProcessLock(tmp_path, "gpu-test"))
    other = _other_process(tmp_path, "exclusive")
    with gate.shared():
        entered = time.monotonic()
    assert entered >= _times(other)[2]
    other = _other_process(tmp_path, "exclusive")
    with gate.exclusive as drained:
        entered = time.monotonic()
    assert drained and entered >= _times(other)[2]


def test_a_timing_phase_waits_for_another_process_runs_only_so_long(tmp_path):
    # Another process's correctness run delays this one's timing phase until it ends;
    # past the gate's drain_s the timing goes on and says it shared the GPU.
    from tritonrl.verify.pool.gate import ProcessLock

    other = _other_process(tmp_path, "shared")
    gate = GpuGate(drain_s=10.0, cross=ProcessLock(tmp_path, "gpu-test"))
    with gate.exclusive as drained:
        entered = time.monotonic()
    assert drained and entered >= _times(other)[2]
    other = _other_process(tmp_path, "shared")
    hasty = GpuGate(drain_s=0.2, cross=ProcessLock(tmp_path, "gpu-test"))
    with hasty.exclusive as drained:
        entered = time.monotonic()
    _, start, end = _times(other)
    assert not drained and start <= entered < end  # reported as the gate's late drain
    # and this process's own runs hold the lock shared: another's timing waits for them
    with gate.shared():
        other = _spawn(tmp_path, "exclusive")
        time.sleep(1.0)
        released = time.monotonic()
    drained, start, _ = _times(other)
    assert drained and start >= released
