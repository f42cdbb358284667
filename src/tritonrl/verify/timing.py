"""GPU timing for correct kernels (CUDA only; the CPU interpreter is never timed).

`time_callable` times one callable: warm-up calls, then trials each preceded by an L2
flush and bracketed by CUDA events, with a device-wide synchronisation after each trial
so work left on any stream counts. `summarize` gives the trimmed mean (10% each tail),
the median and a 95% interval of the mean.

This is the basic timer; the calibrated one (interleaving reference and candidate,
extending trials until the relative standard error is small, host wall-clock cross-check)
is the timing issue's work. Timing a candidate whose correctness is not established is
never done here.
"""

from __future__ import annotations

import math
import statistics

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 cache


def time_callable(fn, warmup: int = 10, trials: int = 50) -> list[float]:
    """Milliseconds per trial of `fn()` on the current CUDA device."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()  # device-wide: work on side streams is waited for
        times.append(start.elapsed_time(end))
    return times


def summarize(times: list[float], trim: float = 0.1) -> dict[str, float]:
    """Trimmed mean, median and the 95% half-width of the trimmed mean."""
    xs = sorted(times)
    k = int(len(xs) * trim)
    core = xs[k : len(xs) - k] or xs
    mean = statistics.fmean(core)
    sd = statistics.stdev(core) if len(core) > 1 else 0.0
    return {
        "mean": mean,
        "median": statistics.median(xs),
        "half_width": 1.96 * sd / math.sqrt(len(core)),
        "n": len(xs),
    }


def speedup_interval(ref: dict[str, float], new: dict[str, float]) -> tuple[float, float]:
    """95% interval of ref/new from the two means' intervals (conservative bounds)."""
    lo = (ref["mean"] - ref["half_width"]) / (new["mean"] + new["half_width"])
    hi = (ref["mean"] + ref["half_width"]) / max(new["mean"] - new["half_width"], 1e-9)
    return lo, hi


def time_reference(task, prepared, warmup: int = 10, trials: int = 50) -> list[float]:
    """Time the reference `Model` on one prepared input set, in the trusted process."""
    import torch

    from tritonrl.tasks.check import to_device
    from tritonrl.tasks.shapes import TaskInstance, build_module

    inst = TaskInstance(build_module(task.source, prepared.overrides, task.origin), "timing")
    torch.manual_seed(prepared.spec.param_seed)
    model = inst.module.Model(*prepared.init_inputs).to("cuda")
    inputs = to_device(prepared.inputs, "cuda")
    with torch.no_grad():
        return time_callable(lambda: model(*inputs), warmup, trials)
