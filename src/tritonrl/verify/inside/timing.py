"""Calibrated GPU timing: the measurement loop and its statistics.

`Timer` is built from timing functions captured BEFORE candidate code loads (the worker
passes its captured `torch.cuda.Event`, `torch.cuda.synchronize`, `time.perf_counter`,
`time.thread_time` and `torch.cuda._sleep`, so a candidate that replaces them later does
not reach the loop; their identity is re-checked separately). `measure(fns, options)`
times the callables of `fns` (the worker's: `new`, the candidate, and `ref`) interleaved
in alternating blocks (ABBA, so drift and warm-up order hit both alike): warm-up calls,
then trials each preceded by an L2 flush and bracketed by CUDA events, extended past
`trials` until every series' relative standard error is under `target_rse`, or its
standard error under `SYSTEMATIC_MS` (the floor `speedup_stats` puts under it anyway, so
more trials could not narrow the interval; `converged`), capped by `max_trials` and
`max_seconds`; not extended when a series is timed to the device-wide synchronisation
(below). The overhead of a synchronisation is calibrated at the first `measure`, not
when the timer is built: the pool's workers build theirs while other lanes use the GPU,
and time only while they have it alone.

Work on any stream counts: each trial also records an event after a device-wide
synchronisation; where that event lags the stream's end event by more than the
calibrated synchronisation overhead, work ran outside the timed stream (docs/hacks.md #9)
and the synchronised times, less the overhead, are the series. Only the series named
in `watch` are looked at this way: the worker watches the candidate's, never the
reference's, whose time read late would inflate the speedup. (The trusted side checks
the reported total against its own wall clock: events cannot report more time than
passed, #12.) The optional CUDA-graph mode captures each callable once and replays the
graph per trial (for launch-bound kernels).

The statistics (`summarize`, `converged`, and the trusted side's `speedup_stats`,
`effective_speedup`) live in `tritonrl.verify.inside.stats`. What this module does NOT do:
decide correctness, choose inputs, compare outputs, or time on the CPU (the
interpreter's speed says nothing about a GPU). It runs inside the sandboxed worker.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tritonrl.verify.inside.stats import converged, summarize

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 cache
MAX_PREROLL_MS = 1.0  # the longest GPU spin that waits for the host to launch a call
SPIN_PROBE_CYCLES = 1_000_000  # the spin timed once to learn its clock rate
# The host thread off the CPU for longer than this in a trial (its wall clock ran past its
# CPU clock; a synchronisation spins on the CPU, so on an idle host the two agree within
# about 3 us on the H100): the trial timed the machine's load and is thrown away.
LOST_CPU_MS = 0.005
MAX_SYNC_OVERHEAD_MS = 0.05  # well above the synchronisation's overhead on the H100


@dataclass
class TimingOptions:
    warmup: int = 10
    trials: int = 50  # the minimum; more until the RSE target is met
    max_trials: int = 500
    target_rse: float = 0.01
    max_seconds: float = 20.0
    block: int = 10  # trials per callable before switching to the other
    graphs: bool = False
    launch: bool = True  # also time each call with the host's launch inside (`launch`)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    launch time is not, as in CUDA-graph mode. In a busy pool, Triton launches take the
    host longer than a 256 MB flush often enough that microsecond kernels would read
    several times their GPU time without it.

    A trial in which the host thread was off the CPU (its wall clock ran more than
    LOST_CPU_MS past its thread CPU clock: descheduled by a busy machine, or waiting for
    the GIL) while its launch was exposed, or while it synchronised in a series whose
    off-stream work is watched (a late wake-up reads as work off the stream), is
    thrown away without raising the spin: it timed the machine's load, not the call. At
    most `max_trials` are; past that they count and a note says how many. What a
    candidate could gain by losing the CPU on purpose is to have some of its own trials
    thrown away: each one kept is still a whole call, timed to its end."""

    def __init__(
        self, event_cls=None, synchronize=None, clock: Callable[[], float] | None = None,
        spin: Callable[[int], Any] | None = None, flush: Any = None,
        cpu_clock: Callable[[], float] | None = None,
    ):  # fmt: skip
        import torch

        self.Event = event_cls or torch.cuda.Event
        self.sync = synchronize or torch.cuda.synchronize
        self.clock = clock or time.perf_counter
        self.cpu_clock = cpu_clock or time.thread_time
        self.spin = spin or torch.cuda._sleep
        self.flush_buffer = (
            flush
            if flush is not None
            else torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        )
        self.overhead_ms: float | None = None  # calibrated by the first `measure`
        self._keep: set[str] = set()  # the callables whose last result `measure` returns
        self.cycles_per_ms = 0.0
        self.preroll_cycles = 0

    def _trial(self, fn: Callable[[], Any]) -> tuple[float, float, Any, float, float, float, float]:
        """(stream event ms, device-synchronised ms, fn's result, the host's ms from `pre`
        to the end event's launch, the GPU's ms from `pre` to the start event, and the ms
        the host thread was off the CPU while launching and while synchronising)."""
        pre, start, end, synced = (self.Event(enable_timing=True) for _ in range(4))
        host_start, cpu_start = self.clock(), self.cpu_clock()
        pre.record()
        self.flush_buffer.zero_()
        if self.preroll_cycles:
            self.spin(self.preroll_cycles)
        start.record()
        out = fn()
        end.record()
        host_end, cpu_end = self.clock(), self.cpu_clock()
        self.sync()  # device-wide: work left on any stream is waited for
        synced.record()
        host_synced, cpu_synced = self.clock(), self.cpu_clock()
        self.sync()
        host_ms = (host_end - host_start) * 1e3
        lost_launch = host_ms - (cpu_end - cpu_start) * 1e3
        lost_sync = ((host_synced - host_end) - (cpu_synced - cpu_end)) * 1e3
        return (start.elapsed_time(end), start.elapsed_time(synced), out, host_ms,
                pre.elapsed_time(start), lost_launch, lost_sync)  # fmt: skip

    def _calibrate(self, n: int = 30) -> float:
        """Median lag of the synchronised event behind the end event with no work, over
        the trials in which the host kept the CPU (if too few did, the least lag, at most
        MAX_SYNC_OVERHEAD_MS: a lag read high would hide work off the timed stream); and
        the spin's clock cycles per ms."""
        lags, clean = [], []
        for _ in range(n):
            ev, synced, *_, lost_sync = self._trial(lambda: None)
            lags.append(synced - ev)
            if lost_sync <= LOST_CPU_MS:
                clean.append(synced - ev)
        a, b = self.Event(enable_timing=True), self.Event(enable_timing=True)
        a.record()
        self.spin(SPIN_PROBE_CYCLES)
        b.record()
        self.sync()
        self.cycles_per_ms = SPIN_PROBE_CYCLES / max(a.elapsed_time(b), 1e-3)
        if 3 * len(clean) >= n:
            return min(statistics.median(clean), MAX_SYNC_OVERHEAD_MS)
        return min(*lags, MAX_SYNC_OVERHEAD_MS)

    def _raise_preroll(self, host_ms: float) -> bool:
        """Spin long enough for a launch of `host_ms`; False when already at the cap."""
        cap = int(MAX_PREROLL_MS * self.cycles_per_ms)
        if self.preroll_cycles >= cap:
            return False
        # at least doubled: the spin's clock can run faster than when it was calibrated
        want = max(2 * self.preroll_cycles, int(1.5 * host_ms * self.cycles_per_ms))
        self.preroll_cycles = min(cap, want)
        return True

    def measure(
        self, fns: dict[str, Callable[[], Any]], options: TimingOptions,
        watch: tuple[str, ...] | None = None, keep: tuple[str, ...] | None = None,
    ) -> dict:  # fmt: skip
        """Time each callable; returns per-name series and stats, the last result of each
        callable named in `keep` (None: all), notes (graphs off, work off-stream, trials
        counted although the pre-roll did not cover their launch or the host lost the CPU
        in them), the pre-roll, the trials thrown away (`rerun` for the pre-roll,
        `interrupted` for the CPU), the synchronisation's overhead held against each
        series' median lag (`sync_us`, `lag_us`) and, in graph mode, the replay callable
        of each one captured (`graphed`). `watch`: the names whose work off the timed
        stream counts (None: all); a series not watched is always its stream events
        (trusted code: the reference, whose time read late would inflate a speedup).

        At most one result of each callable is alive at a time (the last is dropped
        before the next call), and none of a callable not kept: a full-size problem's
        outputs are GBs each on the device."""
        notes: list[str] = []
        if self.overhead_ms is None:
            self.overhead_ms = self._calibrate()
        self.preroll_cycles = 0  # learnt again by each measurement
        watched = set(fns) if watch is None else set(watch)
        self._keep = set(fns) if keep is None else set(keep)
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
        collecting = _gc_isenabled()
        _gc_disable()  # a collection inside a trial would time the host
        try:
            m = self._loop(fns, run, options, watched, notes)
            if options.launch:  # its calls come last: theirs are the last results
                m["launch"] = self._launch_loop(run, options, notes, m["last"], watched)
            return m
        finally:
            if collecting:
                _gc_enable()

    def _launch_trial(self, fn: Callable[[], Any]) -> tuple[float, float, Any, float, float]:
        """(ms from the start event to the end event with the GPU idle when the call
        began, so the host's launch of the call is inside; ms from the start event to
        one recorded after a device-wide synchronisation, so work on any stream is
        inside; fn's result; ms the host thread was off the CPU while launching and while
        synchronising). What an eager `model(x)` costs: no pre-roll hides the launch."""
        start, end, synced = (self.Event(enable_timing=True) for _ in range(3))
        self.flush_buffer.zero_()
        self.sync()  # idle: the start event is reached as soon as it is recorded
        host_start, cpu_start = self.clock(), self.cpu_clock()
        start.record()
        out = fn()
        end.record()
        host_end, cpu_end = self.clock(), self.cpu_clock()
        self.sync()  # device-wide: work left on any stream is waited for
        synced.record()
        host_synced, cpu_synced = self.clock(), self.cpu_clock()
        self.sync()
        lost_launch = ((host_end - host_start) - (cpu_end - cpu_start)) * 1e3
        lost_sync = ((host_synced - host_end) - (cpu_synced - cpu_end)) * 1e3
        return start.elapsed_time(end), start.elapsed_time(synced), out, lost_launch, lost_sync

    def _launch_loop(
        self, run: dict, options: TimingOptions, notes: list, last: dict, watched: set
    ) -> dict:
        """Each callable timed with its launch inside (`_launch_trial`), interleaved in
        ABBA blocks like the device-time trials, at least `trials` each and more until
        each median's error meets `target_rse` (or the floor), within `max_trials` and
        `max_seconds`. Trials in which the host lost the CPU (while launching, or while
        synchronising in a watched series) timed the machine's load and are thrown away
        (at most `max_trials`; past that they count and a note says so). Work on any
        stream counts as in the device-time series: where a watched series' work ran
        past its stream's end event, its times are those to the device-wide
        synchronisation, less its overhead (a kernel launched on a side stream would
        otherwise read as its host's launch alone, and escape its own launch's cost)."""
        events: dict[str, list[float]] = {name: [] for name in run}
        synced: dict[str, list[float]] = {name: [] for name in run}
        clean: dict[str, list[bool]] = {name: [] for name in run}
        order, started = list(run), self.clock()
        interrupted = lost = 0
        while True:
            for name in order:
                for _ in range(options.block):
                    last.pop(name, None)  # the previous result is not alive during the call
                    ev, sv, out, lost_launch, lost_sync = self._launch_trial(run[name])
                    if name in self._keep:
                        last[name] = out
                    del out
                    if lost_launch > LOST_CPU_MS or (name in watched and lost_sync > LOST_CPU_MS):
                        if interrupted < options.max_trials:
                            interrupted += 1
                            continue
                        lost += 1
                    events[name].append(ev)
                    synced[name].append(sv)
                    clean[name].append(lost_sync <= LOST_CPU_MS)
            order.reverse()  # ABBA
            done = min(len(v) for v in events.values())
            if done >= options.max_trials or self.clock() - started >= options.max_seconds:
                break
            if done >= options.trials and converged(
                [summarize(v) for v in events.values()], options.target_rse
            ):
                break
        for name, v in events.items():
            if not v:
                raise RuntimeError(f"{name}: no launch-inclusive trial in {options.max_seconds} s")
        if lost:
            notes.append(
                f"{lost} launch-inclusive trials counted although the host lost the CPU in them"
            )
        sync_ms = self._sync_now(events, synced, clean, watched)
        series = {}
        for name in run:
            times, off = self._series(events[name], synced[name], sync_ms, name in watched)
            if off:
                notes.append(
                    f"{name}: with its launch inside, work finished after the timed stream's "
                    "end event; timed to the device-wide synchronisation instead"
                )
            series[name] = {"times_ms": times, "stats": summarize(times), "off_stream": off}
        return {"series": series, "interrupted": interrupted}

    def _loop(self, fns: dict, run: dict, options: TimingOptions, watched: set, notes: list):
        """The trials of `measure`, its statistics and its notes."""
        events: dict[str, list[float]] = {name: [] for name in run}
        synced: dict[str, list[float]] = {name: [] for name in run}
        clean: dict[str, list[bool]] = {name: [] for name in run}  # the host kept the CPU
        last: dict[str, Any] = {}
        order = list(run)
        host_start = self.clock()
        attempts = rerun = exposed = interrupted = lost = 0
        while True:
            for name in order:
                for _ in range(options.block):
                    last.pop(name, None)  # the previous result is not alive during the call
                    trial = self._trial(run[name])
                    ev, sv, out, host_ms, preroll_ms, lost_launch, lost_sync = trial
                    if name in self._keep:
                        last[name] = out
                    del trial, out
                    slow_launch = host_ms > preroll_ms  # the GPU waited for the launch
                    if (slow_launch and lost_launch > LOST_CPU_MS) or (
                        name in watched and lost_sync > LOST_CPU_MS
                    ):  # the host was descheduled: this trial timed the machine's load
                        if interrupted < options.max_trials:
                            interrupted += 1
                            continue
                        lost += 1
                    elif slow_launch:
                        if self._raise_preroll(host_ms):
                            rerun += 1
                            continue
                        exposed += 1
                    events[name].append(ev)
                    synced[name].append(sv)
                    clean[name].append(lost_sync <= LOST_CPU_MS)
            order.reverse()  # ABBA
            attempts += options.block
            done = min(len(v) for v in events.values())
            elapsed = self.clock() - host_start
            if attempts >= 2 * options.max_trials or elapsed >= options.max_seconds:
                break
            if done >= options.max_trials:
                break
            if done >= options.trials:
                sync_ms = self._sync_now(events, synced, clean, watched)
                so_far = [self._series(events[n], synced[n], sync_ms, n in watched) for n in run]
                # a series timed to the synchronisation carries the host's wake-up in every
                # trial: more trials do not narrow it (the interval says how wide it is)
                if any(off for _, off in so_far) or converged(
                    [summarize(times) for times, _ in so_far], options.target_rse
                ):
                    break
        series = {}
        sync_ms = self._sync_now(events, synced, clean, watched)
        for name in run:
            times, off_stream = self._series(events[name], synced[name], sync_ms, name in watched)
            if not times:  # every trial was thrown away (the time limit came first)
                raise RuntimeError(f"{name}: no trial could be timed in {options.max_seconds} s")
            if off_stream:
                notes.append(
                    f"{name}: work finished after the timed stream's end event; timed to the "
                    "device-wide synchronisation instead"
                )
            lags = [s - e for s, e in zip(synced[name], events[name], strict=True)]
            series[name] = {"times_ms": times, "stats": summarize(times), "off_stream": off_stream,
                            "lag_us": 1e3 * statistics.median(lags)}  # fmt: skip
        preroll_us = 1e3 * self.preroll_cycles / self.cycles_per_ms if self.cycles_per_ms else 0.0
        if exposed:
            notes.append(
                f"{exposed} trials launched slower than the longest pre-roll "
                f"({preroll_us:.0f} us): the host's launch time is in them"
            )
        if lost:
            notes.append(
                f"{lost} trials counted although the host lost the CPU in them "
                f"({interrupted} such trials were already thrown away)"
            )
        graphed = {name: run[name] for name in run if run[name] is not fns[name]}
        return {"series": series, "last": last, "notes": notes, "graphed": graphed,
                "preroll_us": preroll_us, "rerun": rerun, "interrupted": interrupted,
                "sync_us": 1e3 * sync_ms}  # fmt: skip

    def _sync_now(self, events: dict, synced: dict, clean: dict, watched: set) -> float:
        """The synchronisation's overhead while these series were timed: the calibrated
        one or, where more, the median lag of the series not watched (trusted code: the
        reference) over the trials in which the host kept the CPU, timed in the same
        blocks as the candidate's; at most MAX_SYNC_OVERHEAD_MS. A busy host slows
        the synchronisation's return for every series alike; on the H100 it read the
        candidate's 4-10 us kernels as work off the stream in 1 to 5 of 16 candidates."""
        lags = [
            s - e
            for name in events
            if name not in watched
            for s, e, kept in zip(synced[name], events[name], clean[name], strict=True)
            if kept
        ]
        now = statistics.median(lags) if len(lags) >= 10 else 0.0
        return min(max(self.overhead_ms, now), MAX_SYNC_OVERHEAD_MS)

    def _series(
        self, events: list[float], synced: list[float], sync_ms: float, watched: bool
    ) -> tuple[list[float], bool]:
        """The event times, or synchronised times less the overhead `sync_ms` where work
        escaped (looked for in watched series only)."""
        if not watched or not events:
            return list(events), False
        lag = statistics.median(s - e for s, e in zip(synced, events, strict=True))
        typical = statistics.median(events)
        if lag > sync_ms + max(0.005, 0.1 * typical):
            return [max(s - sync_ms, e) for s, e in zip(synced, events, strict=True)], True
        return list(events), False


_gc_isenabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable  # before any candidate


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
