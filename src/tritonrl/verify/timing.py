"""Calibrated GPU timing (extension 4): the measurement loop and its statistics.

`Timer` is built from timing functions captured BEFORE candidate code loads (the
worker passes its captured `torch.cuda.Event`, `torch.cuda.synchronize` and
`time.perf_counter`, so a candidate that replaces them later does not reach the loop;
their identity is re-checked separately). `measure({"new": f, "ref": g}, options)` times
the callables interleaved in alternating blocks (ABBA, so drift and warm-up order hit
both alike): warm-up calls, then trials each preceded by an L2 flush and bracketed by
CUDA events, extended past `trials` until every series' relative standard error is under
`target_rse`, or its standard error under `SYSTEMATIC_MS` (the floor `speedup_stats`
puts under it anyway, so more trials could not narrow the interval; `converged`), capped
by `max_trials` and `max_seconds`; not extended when a series is timed to the
device-wide synchronisation (below). The overhead of a synchronisation is calibrated at the
first `measure`, not when the timer is built: the pool's workers build theirs while
other lanes use the GPU, and time only while they have it alone.

Work on any stream counts: each trial also records an event after a device-wide
synchronisation; where that event lags the stream's end event by more than the
calibrated synchronisation overhead, work ran outside the timed stream (HACKS.md #9)
and the synchronised times, less the overhead, are the series. (The trusted side checks
the reported total against its own wall clock: events cannot report more time than
passed, #12.) The optional CUDA-graph mode captures
each callable once and replays the graph per trial (for launch-bound kernels).

Statistics (`summarize`, `speedup_stats`, `effective_speedup`) are plain Python and
run anywhere. The speedup is the ratio of the medians: on the H100 a trimmed mean still
moved a 2.7 ms matmul's copy-of-reference speedup to 1.020 with a few slow trials that
the medians ignored (docs/benchmarks.md). What this module does NOT do: decide
correctness, choose inputs, compare outputs, or time on the CPU (the interpreter's speed
says nothing about a GPU).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 cache
TRIM = 0.1  # trimmed mean: 10% off each tail
# The spread between runs of an identical kernel that no run sees in itself: on the H100
# about 0.1 us for kernels of 4-20 us (a copy of the reference, docs/benchmarks.md).
SYSTEMATIC_MS = 1e-4
MAX_PREROLL_MS = 1.0  # the longest GPU spin that waits for the host to launch a call
SPIN_PROBE_CYCLES = 1_000_000  # the spin timed once to learn its clock rate


@dataclass
class TimingOptions:
    warmup: int = 10
    trials: int = 50  # the minimum; more until the RSE target is met
    max_trials: int = 500
    target_rse: float = 0.01
    max_seconds: float = 20.0
    block: int = 10  # trials per callable before switching to the other
    graphs: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------- statistics


def summarize(times: list[float], trim: float = TRIM) -> dict[str, float]:
    """Trimmed mean and median, and the standard error, RSE and 95% half-width of the
    median: the larger of its robust estimate (from the median absolute deviation) and
    the trimmed mean's, so a majority of identical event readings (a deviation of 0)
    does not claim zero noise. `speedup_stats` adds a floor for what no one run sees."""
    xs = sorted(times)
    n = len(xs)
    k = int(n * trim)
    core = xs[k : n - k] or xs
    mean = statistics.fmean(core)
    median = statistics.median(xs)
    mean_se = (statistics.stdev(core) if len(core) > 1 else 0.0) / math.sqrt(len(core))
    mad = statistics.median(abs(x - median) for x in xs)
    se = max(1.2533 * 1.4826 * mad / math.sqrt(n), mean_se)  # normal-theory SE of a median
    return {
        "mean": mean,
        "median": median,
        "se": se,
        "rse": se / median if median > 0 else math.inf,
        "half_width": 1.96 * se,
        "n": n,
    }


def speedup_stats(ref: dict[str, float], new: dict[str, float]) -> tuple[float, tuple]:
    """ref/new of the medians (a few slow trials, a clock dip, do not move it) and its
    95% interval (delta method on the log ratio). Each median's error is at least
    SYSTEMATIC_MS: what moves between runs but not within one (where the buffers landed,
    the event timer's resolution), so a 4 us kernel's interval stays honest."""
    ratio = ref["median"] / new["median"]
    rse = [max(s["se"], SYSTEMATIC_MS) / s["median"] for s in (ref, new)]
    spread = 1.96 * math.hypot(*rse)
    return ratio, (ratio * math.exp(-spread), ratio * math.exp(spread))


def converged(stats: list[dict[str, float]], target_rse: float) -> bool:
    """Whether more trials are pointless: each median's standard error is under
    `target_rse` of it, or under SYSTEMATIC_MS, the floor `speedup_stats` puts under every
    median's error (so a 4 us kernel is not timed 500 times to narrow an interval that
    the floor keeps at +-5% whatever the count)."""
    return all(s["se"] <= max(target_rse * s["median"], SYSTEMATIC_MS) for s in stats)


def effective_speedup(speedup: float, ci: tuple[float, float], noise_floor: float) -> float:
    """The speedup a reward may use (the noise rule): 1.0 when the interval contains 1
    or the point is within `noise_floor` of 1; otherwise the interval's bound nearest 1,
    so noise never counts as a speedup (nor as a slowdown)."""
    lo, hi = ci
    if lo <= 1.0 <= hi or abs(speedup - 1.0) <= noise_floor:
        return 1.0
    return lo if lo > 1.0 else hi


# --------------------------------------------------------------------------- timer


class Timer:
    """The measurement loop over captured timing functions (CUDA only).

    Each trial is: an event `pre`, the L2 flush, a GPU spin (the pre-roll), the start
    event, the call, the end event, a device-wide synchronisation and the `synced` event.
    The GPU reaches the start event only after the flush and the spin; when the host
    needed longer than that to launch the call, the GPU idled inside the timed span and
    the trial would time the host. Such a trial ("exposed": the host's launch time is
    more than the GPU's time from `pre` to `start`) is thrown away and the spin raised
    to 1.5x that launch, at least doubling, up to MAX_PREROLL_MS, at which trials count
    as they are and a note says how many. What is timed is thus the call's GPU time; the host's
    launch time is not, as in CUDA-graph mode. On the H100, in a pool of 16 lanes, Triton
    launches took the host longer than a 256 MB flush often enough that 4 us kernels
    read 10-80 us without it (docs/benchmarks.md)."""

    def __init__(
        self, event_cls=None, synchronize=None, clock: Callable[[], float] | None = None,
        spin: Callable[[int], Any] | None = None, flush: Any = None,
    ):  # fmt: skip
        import torch

        self.Event = event_cls or torch.cuda.Event
        self.sync = synchronize or torch.cuda.synchronize
        self.clock = clock or time.perf_counter
        self.spin = spin or torch.cuda._sleep
        self.flush_buffer = (
            flush
            if flush is not None
            else torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        )
        self.overhead_ms: float | None = None  # calibrated by the first `measure`
        self.cycles_per_ms = 0.0
        self.preroll_cycles = 0

    def _trial(self, fn: Callable[[], Any]) -> tuple[float, float, Any, float, float]:
        """(stream event ms, device-synchronised ms, fn's result, the host's ms from `pre`
        to the end event's launch, the GPU's ms from `pre` to the start event)."""
        pre, start, end, synced = (self.Event(enable_timing=True) for _ in range(4))
        host_start = self.clock()
        pre.record()
        self.flush_buffer.zero_()
        if self.preroll_cycles:
            self.spin(self.preroll_cycles)
        start.record()
        out = fn()
        end.record()
        host_ms = (self.clock() - host_start) * 1e3
        self.sync()  # device-wide: work left on any stream is waited for
        synced.record()
        self.sync()
        return (start.elapsed_time(end), start.elapsed_time(synced), out, host_ms,
                pre.elapsed_time(start))  # fmt: skip

    def _calibrate(self, n: int = 30) -> float:
        """Median lag of the synchronised event behind the end event with no work; and
        the spin's clock cycles per ms."""
        lags = []
        for _ in range(n):
            ev, synced, *_ = self._trial(lambda: None)
            lags.append(synced - ev)
        a, b = self.Event(enable_timing=True), self.Event(enable_timing=True)
        a.record()
        self.spin(SPIN_PROBE_CYCLES)
        b.record()
        self.sync()
        self.cycles_per_ms = SPIN_PROBE_CYCLES / max(a.elapsed_time(b), 1e-3)
        return statistics.median(lags)

    def _raise_preroll(self, host_ms: float) -> bool:
        """Spin long enough for a launch of `host_ms`; False when already at the cap."""
        cap = int(MAX_PREROLL_MS * self.cycles_per_ms)
        if self.preroll_cycles >= cap:
            return False
        # at least doubled: the spin's clock can run faster than when it was calibrated
        want = max(2 * self.preroll_cycles, int(1.5 * host_ms * self.cycles_per_ms))
        self.preroll_cycles = min(cap, want)
        return True

    def measure(self, fns: dict[str, Callable[[], Any]], options: TimingOptions) -> dict:
        """Time each callable; returns per-name series and stats, the last result of
        each callable, notes (graphs off, work off-stream, launches the pre-roll did not
        cover), the pre-roll, and, in graph mode, the replay callable of each one
        captured (`graphed`)."""
        notes: list[str] = []
        if self.overhead_ms is None:
            self.overhead_ms = self._calibrate()
        self.preroll_cycles = 0  # learnt again by each measurement
        run = dict(fns)
        if options.graphs:
            for name, fn in fns.items():
                graph_fn, why = _graphed(fn)
                if graph_fn is None:
                    notes.append(f"{name}: CUDA graph capture failed ({why}); timed eagerly")
                else:
                    run[name] = graph_fn
        for _ in range(options.warmup):
            for fn in run.values():
                fn()
        self.sync()
        events: dict[str, list[float]] = {name: [] for name in run}
        synced: dict[str, list[float]] = {name: [] for name in run}
        last: dict[str, Any] = {}
        order = list(run)
        host_start = self.clock()
        attempts = rerun = exposed = 0
        while True:
            for name in order:
                for _ in range(options.block):
                    ev, sv, last[name], host_ms, preroll_ms = self._trial(run[name])
                    if host_ms > preroll_ms:  # the GPU waited for the launch
                        if self._raise_preroll(host_ms):
                            rerun += 1
                            continue
                        exposed += 1
                    events[name].append(ev)
                    synced[name].append(sv)
            order.reverse()  # ABBA
            attempts += options.block
            done = min(len(v) for v in events.values())
            elapsed = self.clock() - host_start
            if attempts >= 2 * options.max_trials or elapsed >= options.max_seconds:
                break
            if done >= options.max_trials:
                break
            if done >= options.trials:
                so_far = [self._series(events[n], synced[n]) for n in run]
                # a series timed to the synchronisation carries the host's wake-up in every
                # trial: more trials do not narrow it (the interval says how wide it is)
                if any(off for _, off in so_far) or converged(
                    [summarize(times) for times, _ in so_far], options.target_rse
                ):
                    break
        series = {}
        for name in run:
            times, off_stream = self._series(events[name], synced[name])
            if off_stream:
                notes.append(
                    f"{name}: work finished after the timed stream's end event; timed to the "
                    "device-wide synchronisation instead"
                )
            series[name] = {"times_ms": times, "stats": summarize(times), "off_stream": off_stream}
        preroll_us = 1e3 * self.preroll_cycles / self.cycles_per_ms if self.cycles_per_ms else 0.0
        if exposed:
            notes.append(
                f"{exposed} trials launched slower than the longest pre-roll "
                f"({preroll_us:.0f} us): the host's launch time is in them"
            )
        graphed = {name: run[name] for name in run if run[name] is not fns[name]}
        return {"series": series, "last": last, "notes": notes, "graphed": graphed,
                "preroll_us": preroll_us, "rerun": rerun}  # fmt: skip

    def _series(self, events: list[float], synced: list[float]) -> tuple[list[float], bool]:
        """The event times, or synchronised times less the overhead where work escaped."""
        lag = statistics.median(s - e for s, e in zip(synced, events, strict=True))
        typical = statistics.median(events)
        if lag > self.overhead_ms + max(0.005, 0.1 * typical):
            return [max(s - self.overhead_ms, e) for s, e in zip(synced, events, strict=True)], True
        return list(events), False


def _graphed(fn: Callable[[], Any]) -> tuple[Callable[[], Any] | None, str]:
    """`fn` captured into a CUDA graph, replayed per call (None and why on failure)."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
    except Exception as e:  # capture is not possible for every kernel
        torch.cuda.synchronize()
        return None, f"{type(e).__name__}: {str(e)[:120]}"

    def replay():
        graph.replay()
        return out

    return replay, ""


def peak_bandwidth_bytes_per_s(props: Any) -> float:
    """The device's peak memory bandwidth, from its properties (a generous default)."""
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    if clock_khz and bus_bits:
        return clock_khz * 1e3 * 2 * bus_bits / 8  # double data rate
    return 10e12  # above any current GPU: the floor it gives is never too high
