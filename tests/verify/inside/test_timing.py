"""Calibrated timing: its statistics and noise rule everywhere, the timing-side cheats
(docs/hacks.md #8 cross-call deferral, #9 side streams, #12 timer tampering, #22
impossible speed) on a real GPU (marker `gpu`), each with the static checks off so the
run-time layer is what refuses them.
"""

import dataclasses
import json
import math

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward import compute_reward
from tritonrl.tasks import Task, load_builtin
from tritonrl.verify import verify

gpu = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


class _Device:
    """A GPU's and a host's clocks, in ms: what the Timer's captured functions see. Work
    starts on the GPU once launched and once the GPU is free; the host waits only at a
    synchronisation, spinning (its CPU clock runs on). A stall is host time off the CPU:
    the thread descheduled. (The Timer's loop is plain Python; the GPU tests time for
    real.)"""

    def __init__(self, flush_ms: float, cycles_per_ms: float = 1e6) -> None:
        self.host = self.gpu = self.cpu = 0.0
        self.flush_ms, self.cycles_per_ms = flush_ms, cycles_per_ms
        self.wake_stall = 0.0  # the next synchronisation's late wake-up
        self.every_wake_stall = 0.0  # every synchronisation's
        self.busy_wake = 0.0  # every synchronisation's return, on the CPU but slow
        device = self

        class Event:
            def __init__(self, enable_timing: bool = True) -> None:
                self.at = None

            def record(self) -> None:
                self.at = device._run(0.0)

            def elapsed_time(self, other) -> float:
                return other.at - self.at

        class Flush:
            def zero_(self) -> None:
                device._run(device.flush_ms)

        self.Event, self.flush = Event, Flush()

        self.side = 0.0  # when work on another stream ends

    def _run(self, ms: float) -> float:
        self.gpu = max(self.gpu, self.host) + ms
        return self.gpu

    def clock(self) -> float:
        return self.host / 1e3

    def cpu_clock(self) -> float:
        return self.cpu / 1e3

    def sync(self) -> None:
        done = max(self.host, self.gpu, self.side)
        self.cpu += done - self.host + self.busy_wake  # the wait spins
        self.host = done + self.busy_wake + self.wake_stall + self.every_wake_stall
        self.wake_stall = 0.0

    def spin(self, cycles: int) -> None:
        self._run(cycles / self.cycles_per_ms)

    def call(self, launch_ms: float, kernel_ms: float, jitter: float = 0.0, side_ms=0.0,
             stalls=lambda i: (0.0, 0.0)):  # fmt: skip
        """`stalls(i)`: the host's time off the CPU in the i-th call's launch and in the
        synchronisation after it."""
        calls = iter(range(10**9))

        def fn():
            i = next(calls)
            in_launch, self.wake_stall = stalls(i)
            self.host += launch_ms + in_launch  # the host's time to launch the kernel
            self.cpu += launch_ms
            start = max(self.gpu, self.host)
            self._run(kernel_ms * (1 + jitter * ((i * 7) % 5 - 2) / 2))
            self.side = start + side_ms  # work on a stream the end event does not wait for

        return fn


def _timer(device: _Device):
    from tritonrl.verify.inside.timing import Timer

    return Timer(
        device.Event, device.sync, device.clock, device.spin, device.flush, device.cpu_clock
    )


def test_a_launch_slower_than_the_flush_is_not_timed():
    # A 4 us kernel whose launch takes the host 200 us, after a flush of 90 us: without a
    # pre-roll the GPU would wait inside the timed span and read 114 us. The exposed
    # trials are thrown away, the spin raised, and the kernel's 4 us is what is timed.
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    m = _timer(device).measure(
        {"new": device.call(0.2, 0.004), "ref": device.call(0.01, 0.004)}, TimingOptions()
    )
    for name in ("new", "ref"):
        assert m["series"][name]["stats"]["median"] == pytest.approx(0.004), name
        assert len(m["series"][name]["times_ms"]) >= 50
    assert m["rerun"] >= 1 and m["preroll_us"] == pytest.approx(300, rel=0.01)
    assert not m["notes"], m["notes"]


def test_the_launch_inclusive_series_times_what_an_eager_call_costs():
    # A 4 us kernel whose Python launch path takes the host 200 us, against a reference
    # of 50 us on the GPU launched in 10 us. On device time (the launch hidden by the
    # pre-roll) the kernel is 12.5x faster; with its launch inside, a user calling it
    # eagerly waits 204 us for it against the reference's 60 us.
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    m = _timer(device).measure(
        {"new": device.call(0.2, 0.004), "ref": device.call(0.01, 0.05)}, TimingOptions()
    )
    assert m["series"]["new"]["stats"]["median"] == pytest.approx(0.004)
    assert m["series"]["ref"]["stats"]["median"] == pytest.approx(0.05)
    launch = m["launch"]["series"]
    assert launch["new"]["stats"]["median"] == pytest.approx(0.204)
    assert launch["ref"]["stats"]["median"] == pytest.approx(0.06)
    assert min(len(v["times_ms"]) for v in launch.values()) >= 50
    # switched off, only the device-time series is measured
    off = _timer(device).measure({"new": device.call(0.2, 0.004)}, TimingOptions(launch=False))
    assert "launch" not in off


def test_with_its_launch_inside_work_left_on_a_side_stream_still_counts():
    # A 4 us kernel launched on a side stream the end event does not wait for, its work
    # ending 0.5 ms later: read by the stream's events, the call would cost its host's
    # 10 us launch alone, and a side stream would buy a kernel out of its launch cost.
    # Timed to the device-wide synchronisation, it costs the work it left.
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    side = device.call(0.01, 0.004, side_ms=0.5)
    m = _timer(device).measure(
        {"new": side, "ref": device.call(0.01, 0.05)}, TimingOptions(), watch=("new",)
    )
    launch = m["launch"]["series"]
    assert launch["new"]["off_stream"] and launch["new"]["stats"]["median"] > 0.45
    assert not launch["ref"]["off_stream"]
    assert launch["ref"]["stats"]["median"] == pytest.approx(0.06)
    assert any("with its launch inside, work finished after" in n for n in m["notes"])


def test_at_most_one_result_of_a_callable_is_alive_and_only_the_kept_ones_are_returned():
    # A full-size problem's outputs are GBs each on the device: the previous result of a
    # callable is dropped before it is called again, and the reference's results are not
    # kept at all (only the candidate's last is checked after timing).
    from tritonrl.verify.inside.timing import TimingOptions

    class Out:
        alive = {"new": 0, "ref": 0}
        most = {"new": 0, "ref": 0}

        def __init__(self, name: str) -> None:
            self.name = name
            Out.alive[name] += 1
            Out.most[name] = max(Out.most[name], Out.alive[name])

        def __del__(self) -> None:
            Out.alive[self.name] -= 1

    device = _Device(flush_ms=0.09)

    def returning(name: str, fn):
        def call():
            fn()
            return Out(name)

        return call

    fns = {n: returning(n, device.call(0.01, 0.02)) for n in ("new", "ref")}
    m = _timer(device).measure(fns, TimingOptions(), watch=("new",), keep=("new",))
    assert Out.most == {"new": 1, "ref": 1}, Out.most
    assert set(m["last"]) == {"new"} and Out.alive == {"new": 1, "ref": 0}


def test_a_spin_faster_than_calibrated_still_reaches_the_cap():
    # The GPU's clock rose after the spin was calibrated: each spin lasts a quarter as
    # long as planned, so a pre-roll of 1.5x the launch never covers it. The spin keeps
    # growing until it does, and the series still gets its trials.
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    timer = _timer(device)
    timer.overhead_ms = timer._calibrate()
    device.cycles_per_ms *= 4
    m = timer.measure({"new": device.call(0.2, 0.004)}, TimingOptions())
    assert len(m["series"]["new"]["times_ms"]) >= 50
    assert m["preroll_us"] > 300  # past 1.5x the 200 us launch
    assert m["series"]["new"]["stats"]["median"] == pytest.approx(0.004)


def test_a_series_timed_to_the_synchronisation_is_not_extended():
    # Noisy 20 us kernels (+-20%): short of the RSE target after 50 trials, so they are
    # extended; work on a side stream is timed to the device-wide synchronisation, whose
    # spread more trials do not narrow, so that measurement stops at the minimum.
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    noisy = device.call(0.01, 0.02, jitter=0.2)
    m = _timer(device).measure({"new": noisy, "ref": noisy}, TimingOptions())
    assert len(m["series"]["new"]["times_ms"]) > 100
    side = device.call(0.01, 0.02, jitter=0.2, side_ms=0.5)
    m = _timer(device).measure({"new": side, "ref": noisy}, TimingOptions())
    assert m["series"]["new"]["off_stream"] and len(m["series"]["new"]["times_ms"]) == 50
    assert m["series"]["new"]["stats"]["median"] > 0.45  # the side stream's work counts


def test_a_launch_past_the_longest_pre_roll_is_timed_as_it_is_and_said():
    from tritonrl.verify.inside.timing import MAX_PREROLL_MS, TimingOptions

    device = _Device(flush_ms=0.09)
    m = _timer(device).measure({"new": device.call(3.0, 0.004)}, TimingOptions())
    assert m["preroll_us"] == pytest.approx(MAX_PREROLL_MS * 1e3)
    assert m["series"]["new"]["stats"]["median"] > 1.0  # the launch shows: never hidden
    assert any("launched slower than the longest pre-roll" in n for n in m["notes"])


def test_trials_the_host_was_descheduled_in_are_thrown_away():
    # A 20 us kernel whose host thread is descheduled in three calls of five: 300 us late
    # from the synchronisation (read as work off the stream, the call would time 320 us),
    # or 2 ms in its launch (the GPU would wait inside the timed span, and the pre-roll
    # grow to its cap). Those trials time the machine's load: thrown away, spin unraised.
    from tritonrl.verify.inside.timing import TimingOptions

    def stalls(i):
        return [(0.0, 0.3), (2.0, 0.0), (0.0, 0.3), (0.0, 0.0), (0.0, 0.0)][i % 5]

    device = _Device(flush_ms=0.09)
    kernel = device.call(0.01, 0.02, stalls=stalls)
    m = _timer(device).measure({"new": kernel, "ref": device.call(0.01, 0.02)}, TimingOptions())
    new = m["series"]["new"]
    assert not new["off_stream"] and new["stats"]["median"] == pytest.approx(0.02)
    assert len(new["times_ms"]) >= 50 and m["interrupted"] >= 60
    assert m["preroll_us"] == 0 and not m["notes"], m["notes"]


def test_the_reference_is_timed_by_its_stream_events_only():
    # `watch`: the reference's late wake-ups neither throw its trials away nor read as
    # work off its stream (which would make it slower and the candidate's speedup larger)
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    late = device.call(0.01, 0.02, stalls=lambda i: (0.0, 0.3))
    fns = {"new": device.call(0.01, 0.02), "ref": late}
    m = _timer(device).measure(fns, TimingOptions(), watch=("new",))
    ref = m["series"]["ref"]
    assert not ref["off_stream"] and ref["stats"]["median"] == pytest.approx(0.02)
    assert m["interrupted"] == 0 and not m["notes"]


def test_losing_the_cpu_in_every_trial_hides_no_work_off_the_stream():
    # A candidate that keeps its host thread off the CPU in every synchronisation (a
    # thread of its own holding the GIL, say) while its work runs on a side stream: at
    # most max_trials are thrown away, then the trials count, timed to the
    # synchronisation, and a note says so.
    from tritonrl.verify.inside.timing import TimingOptions

    device = _Device(flush_ms=0.09)
    cheat = device.call(0.01, 0.004, side_ms=0.5, stalls=lambda i: (0.0, 0.05))
    options = TimingOptions(max_trials=100)
    m = _timer(device).measure({"new": cheat, "ref": device.call(0.01, 0.02)}, options)
    new = m["series"]["new"]
    assert m["interrupted"] == 100 and new["off_stream"] and new["stats"]["median"] > 0.45
    assert any("counted although the host lost the CPU" in n for n in m["notes"]), m["notes"]


def test_a_host_off_the_cpu_while_the_timer_calibrates_hides_no_work_off_the_stream():
    # A late wake-up in every calibration trial would read as a large synchronisation
    # overhead, under which side-stream work could hide: it is held to a bound instead.
    from tritonrl.verify.inside.timing import MAX_SYNC_OVERHEAD_MS, TimingOptions

    device = _Device(flush_ms=0.09)
    timer = _timer(device)
    device.every_wake_stall = 0.4
    timer.overhead_ms = timer._calibrate()
    device.every_wake_stall = 0.0
    assert timer.overhead_ms <= MAX_SYNC_OVERHEAD_MS
    side = device.call(0.01, 0.004, side_ms=0.3)
    m = timer.measure({"new": side, "ref": device.call(0.01, 0.02)}, TimingOptions())
    assert m["series"]["new"]["off_stream"] and m["series"]["new"]["stats"]["median"] > 0.2


def test_a_slow_return_from_the_synchronisation_is_held_against_the_reference():
    # Calibrated on a quiet host; then every synchronisation returns 15 us later, the
    # host on the CPU throughout (a busy machine). The reference's trials, timed in the
    # same blocks, lag as much: the candidate's lag is no sign of work off its stream.
    # Work that is (0.3 ms) still is, even beside a reference lagging past the bound.
    from tritonrl.verify.inside.timing import MAX_SYNC_OVERHEAD_MS, TimingOptions

    device = _Device(flush_ms=0.09)
    timer = _timer(device)
    timer.overhead_ms = timer._calibrate()
    ref = device.call(0.01, 0.004)
    for busy_wake, side_ms, off in ((0.015, 0.0, False), (0.4, 0.3, True)):
        device.busy_wake = busy_wake
        fns = {"new": device.call(0.01, 0.004, side_ms=side_ms), "ref": ref}
        m = timer.measure(fns, TimingOptions(), watch=("new",))
        assert m["series"]["new"]["off_stream"] is off, busy_wake
        assert m["sync_us"] == pytest.approx(1e3 * min(busy_wake, MAX_SYNC_OVERHEAD_MS), rel=0.2)
    assert m["series"]["new"]["stats"]["median"] > 0.2


@pytest.mark.parametrize("body", ["SIDE_STREAM", "DEFERRAL", "CACHED", "CAPTURED"])
def test_the_gpu_cheats_are_well_formed_kernels(body):
    # They run only on a GPU; here at least their source must define a ModelNew with a
    # forward that compiles (a misplaced helper once swallowed `forward`).
    import ast

    tree = ast.parse(globals()[body])
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    assert {f.name for f in cls.body if isinstance(f, ast.FunctionDef)} == {"__init__", "forward"}


def test_timing_settings_are_checked_up_front():
    with pytest.raises(ValueError, match="max_trials"):
        VerifyConfig(trials=100, max_trials=50)
    with pytest.raises(ValueError, match="noise_floor"):
        VerifyConfig(noise_floor=1.5)


def test_cpu_results_say_they_were_not_timed():
    relu = load_builtin("level1/1_ReLU").tasks[0]
    r = verify(relu, relu.solution, VerifyConfig(device="cpu"))
    assert (
        r.correct
        and r.speedup is None
        and r.timing == {}
        and compute_reward(r) == pytest.approx(0.7)
    )


# ------------------------------------------------------------------------------ GPU

# 64M floats in and out: about 150 us on an H100, long enough to time to 1%.
BIG_RELU = Task(
    "big_relu",
    1,
    "big_relu",
    """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
""",
    "test_timing.py",
)
HONEST = load_builtin("level1/1_ReLU").tasks[0].solution
PHASE = """
_CALLS = [0]


def _timing_phase():
    _CALLS[0] += 1
    return _CALLS[0] > 12  # the correctness calls are over
"""


def _forward(body: str) -> str:
    """The honest solution with `forward` replaced by `body` (and the phase probe)."""
    head, _, _ = HONEST.partition("    def forward(self, x: torch.Tensor) -> torch.Tensor:")
    head = head.replace("class ModelNew", PHASE.lstrip() + "\n\nclass ModelNew")
    return head + "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n" + body


SIDE_STREAM = _forward("""\
        y = torch.empty_like(x)
        n = x.numel()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())  # sees its inputs ...
        with torch.cuda.stream(s):  # ... but is never joined: the timed stream misses it
            relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
""")
DEFERRAL = _forward("""\
        y = torch.empty_like(x)
        n = x.numel()
        if not _timing_phase():
            relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
            return y
        pending = getattr(self, "pending", None)
        if pending is not None:  # last call's work, done now: each call still pays one
            relu_kernel[(triton.cdiv(n, 1024),)](pending[0], pending[1], n, BLOCK=1024)
        self.pending = (x, y)
        return y
""")
CACHED = _forward("""\
        if _timing_phase() and getattr(self, "last", None) is not None:
            relu_kernel[(1,)](x, self.last, 1, BLOCK=1024)  # one element: a launch is seen
            return self.last
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        self.last = y
        return y
""")
TIMER_TAMPER = HONEST.replace(
    "class ModelNew",
    "_elapsed = torch.cuda.Event.elapsed_time\n"
    "torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 10\n\n\n"
    "class ModelNew",
)
NO_STATIC = VerifyConfig(static_checks=False, ref_time_cache="off")


@pytest.fixture(scope="module")
def honest():
    return verify(BIG_RELU, HONEST, NO_STATIC)


@gpu
def test_an_honest_kernel_is_timed_with_an_interval_and_the_checks_recorded(honest):
    r = honest
    assert r.correct and r.stage == "done" and not r.cheated, (r.error, r.flags, r.notes)
    lo, hi = r.speedup_ci
    assert lo <= r.speedup <= hi and hi / lo < 1.1
    assert r.timing["trials"] >= 50 and r.timing["rse"] <= 0.01
    assert r.runtime_ms > r.timing["floor_ms"] and not r.timing["off_stream"]
    assert 0.5 < r.speedup < 2.0  # the same memory-bound work as torch.relu
    # On the GPU alone the same work as torch.relu; with its launch inside, Triton's
    # Python launch path (tens of us, guards included) shows against a 150 us kernel.
    assert 0.85 < r.speedups["device"]["speedup"] < 1.15, r.speedups
    assert r.speedups["launch"]["speedup"] <= r.speedups["device"]["speedup"] * 1.05
    # After the measurement the worker holds the inputs, the last timed output and the
    # timer's flush buffer (256 MB each), not the reference's copy of the inputs or its
    # outputs: the reference is timed alone beside it next.
    assert r.timing["worker_gpu_mb"]["allocated_mb"] < 900, r.timing["worker_gpu_mb"]
    json.loads(r.to_json())


@gpu
@pytest.mark.parametrize("connections", [1, 0])
def test_side_stream_work_is_counted(honest, connections):
    # With one hardware queue per worker (the default) the side stream's work may land
    # inside the timed window; with the driver's 8 queues it escapes the stream's events
    # and the device-wide synchronisation must catch it. Never is the speedup inflated.
    config = dataclasses.replace(NO_STATIC, cuda_max_connections=connections)
    r = verify(BIG_RELU, SIDE_STREAM, config)
    if connections != 1:
        assert r.timing["off_stream"] or r.cheated, r.timing
    if not r.cheated:  # in each measure, and in the one the reward uses
        assert r.speedup <= honest.speedup * 1.1, (r.speedups, honest.speedups)  # not inflated
        for m in ("device", "launch"):
            assert r.speedups[m]["speedup"] <= honest.speedups[m]["speedup"] * 1.1, m


@gpu
def test_cross_call_deferral_is_refused():
    r = verify(BIG_RELU, DEFERRAL, NO_STATIC)
    assert "timing_phase" in r.flags and compute_reward(r) == 0.0, (r.flags, r.notes)


@gpu
def test_a_cached_output_is_an_impossible_speed():
    r = verify(BIG_RELU, CACHED, NO_STATIC)
    assert {"impossible_speed", "timing_phase"} <= set(r.flags), (r.flags, r.notes)
    assert compute_reward(r) == 0.0


@gpu
def test_timer_tampering_is_refused():
    r = verify(BIG_RELU, TIMER_TAMPER, NO_STATIC)
    assert "timer_tampering" in r.flags and compute_reward(r) == 0.0, (r.flags, r.notes)


SLOW_REFERENCE = HONEST.replace(
    "class ModelNew",
    "_relu = torch.relu\n"
    "torch.relu = lambda x: _relu(_relu(_relu(x) * 1.0) * 1.0)  # the reference pays 5 ops\n\n\n"
    "class ModelNew",
)


@gpu
def test_a_candidate_that_slows_the_reference_gains_nothing(honest):
    r = verify(BIG_RELU, SLOW_REFERENCE, NO_STATIC)
    if not r.cheated:  # timed twice, slowed twice: the reference's time alone counts
        assert r.timing["tries"] == 2 and "the reference's time alone is used" in r.notes
        assert "the reference's time alone with its launch inside is used" in r.notes
        assert r.speedup <= honest.speedup * 1.1, (r.speedups, honest.speedups)
        for m in ("device", "launch"):
            assert r.speedups[m]["speedup"] <= honest.speedups[m]["speedup"] * 1.1, m
    else:
        assert compute_reward(r) == 0.0


@gpu
def test_reference_time_alone_is_cached(tmp_path):
    cfg = VerifyConfig(ref_time_cache=str(tmp_path / "ref.json"))
    first = verify(BIG_RELU, HONEST, cfg)
    second = verify(BIG_RELU, HONEST, cfg)
    assert not first.timing["ref_alone_cached"] and second.timing["ref_alone_cached"]
    assert len(json.loads((tmp_path / "ref.json").read_text())) == 1


@gpu
def test_cuda_graph_mode_times_the_same_kernel_to_the_same_speedup(honest):
    # 150 us is far from launch-bound: replaying a captured graph must not change the
    # verdict or move the device-time speedup by more than the noise of two runs. (With
    # the launch inside, graph mode replays the graph: Triton's Python launch path, in
    # the eager kernel's launch-inclusive time, is gone, so that measure may rise.)
    r = verify(BIG_RELU, HONEST, dataclasses.replace(NO_STATIC, cuda_graphs=True))
    assert r.correct and not r.cheated and r.timing["graphs"], (r.error, r.flags, r.notes)
    assert not any("capture failed" in n for n in r.notes), r.notes
    device, eager = r.speedups["device"]["speedup"], honest.speedups["device"]["speedup"]
    assert abs(math.log(device / eager)) < 0.1, (r.speedups, honest.speedups)


# CACHED's cheat, done only while the graph is captured
CAPTURED = CACHED.replace(
    "if _timing_phase() and", "if torch.cuda.is_current_stream_capturing() and"
)
assert CAPTURED != CACHED


@gpu
def test_cuda_graph_mode_refuses_a_kernel_that_captures_something_else():
    # Honest whenever called eagerly (every correctness call and the check call after
    # timing); the graph it leaves to be timed writes one element of a stale output.
    r = verify(BIG_RELU, CAPTURED, dataclasses.replace(NO_STATIC, cuda_graphs=True))
    assert {"impossible_speed", "timing_phase"} <= set(r.flags), (r.flags, r.notes)
    assert any(n.startswith("timing_phase: output of the graph check") for n in r.notes)
    assert compute_reward(r) == 0.0


@gpu
def test_on_the_gpu_a_host_off_the_cpu_is_not_what_is_timed():
    # The real clocks: every third synchronisation returns 0.3 ms late (the host off the
    # CPU), in the candidate's trials and the reference's alike. The candidate's such
    # trials are thrown away and the two copies of one 30 us kernel read the same, on
    # their stream. (A late launch is the simulated device's test: a sleep inside the
    # candidate's call only would also slow the host's next trials.) Watched as the
    # worker watches: the candidate, against the reference's lag. On the H100 the
    # synchronisations after such a sleep returned late too, by up to 25 us at the
    # median, while the host kept the CPU: against the calibrated overhead alone, the
    # candidate read as work off the stream in 6 of 13 runs; against the reference's
    # lag, in none of 10.
    import time

    import torch

    from tritonrl.verify.inside.timing import Timer, TimingOptions

    x = torch.randn(16 * 1024 * 1024, device="cuda")
    y = torch.empty_like(x)
    syncs = [0]

    def late_sync():
        torch.cuda.synchronize()
        syncs[0] += 1
        if syncs[0] % 3 == 0:
            time.sleep(0.0003)

    def add():
        return torch.add(x, 1.0, out=y)

    m = Timer(synchronize=late_sync).measure(
        {"new": add, "ref": add}, TimingOptions(), watch=("new",)
    )
    new, ref = (m["series"][k] for k in ("new", "ref"))
    assert m["interrupted"] >= 10 and not new["off_stream"], (m["interrupted"], m["notes"])
    assert abs(new["stats"]["median"] / ref["stats"]["median"] - 1) < 0.05, m["notes"]
    assert not m["notes"], m["notes"]


def _chain5(kernel: str):
    from pathlib import Path

    from tritonrl.tasks import load_source

    fixtures = Path(__file__).parents[1] / "fixtures"
    task = load_source(str(fixtures / "1_Chain5_Elementwise.py")).tasks[0]
    return task, (fixtures / kernel).read_text()


@gpu
def test_a_launch_bound_kernel_is_not_rewarded_for_a_speed_an_eager_call_does_not_have():
    # The builtin GEMM + bias + ReLU solution, fused into one Triton launch: on the GPU
    # alone about 2.1x PyTorch's two kernels on the H100, but its Python launch path costs
    # more than the reference's whole call, so called eagerly it is slower (0.7-0.8x).
    # The reward uses the lower of the two speedups (verify.speedup_measure "min"); on
    # device time alone it was paid as a 2x speedup.
    task = load_builtin("level2/1_Gemm_Bias_ReLU").tasks[0]
    r = verify(task, task.solution, VerifyConfig(ref_time_cache="off"))
    assert r.correct and not r.cheated, (r.error, r.flags)
    assert set(r.speedups) == {"device", "launch"}, r.notes
    device, launch = r.speedups["device"], r.speedups["launch"]
    assert device["reward_speedup"] > 1.0, device  # the device-time reading would pay it
    assert launch["speedup"] < 1.0 and launch["speedup"] < device["speedup"], launch
    assert r.timing["measure"] == "launch" and r.reward_speedup <= 1.0
    device_only = dataclasses.replace(r, reward_speedup=device["reward_speedup"])
    assert compute_reward(r, "staged") <= 0.85 < compute_reward(device_only, "staged")


@gpu
def test_many_tiny_launches_are_not_rewarded_as_a_speedup():
    # The same fused kernel launched as 16 pieces from Python: the pre-roll hides only
    # the host's time before the first piece, so the GPU's waits between the pieces are
    # in the device time too (0.08x on the H100), and in the launch-inclusive time.
    task, code = _chain5("launch_heavy_chain5.py")
    r = verify(task, code, VerifyConfig(ref_time_cache="off"))
    assert r.correct and not r.cheated, (r.error, r.flags)
    assert set(r.speedups) == {"device", "launch"}, r.notes
    assert r.speedups["device"]["speedup"] < 1.0 and r.speedups["launch"]["speedup"] < 1.0
    assert r.reward_speedup < 1.0 and compute_reward(r, "staged") < 0.85
