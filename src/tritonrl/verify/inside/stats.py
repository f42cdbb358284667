"""The statistics of a timing: what the trusted side derives from the raw times the
worker reports (`summarize`, `speedup_stats`, `effective_speedup`), and the convergence
rule the worker's timer extends its trials by (`converged`). Plain Python: runs on both
sides, needs no GPU.

The speedup is the ratio of the medians: a trimmed mean still moves a copy of the
reference off 1 with a few slow trials that the medians ignore. What this module does
NOT do: time anything
(`tritonrl.verify.inside.timing`) or decide what a speedup earns (`tritonrl.reward`).
"""

from __future__ import annotations

import math
import statistics

TRIM = 0.1  # trimmed mean: 10% off each tail
# The spread between runs of an identical kernel that no run sees in itself (where its
# buffers landed): an absolute part that dominates for kernels of a few microseconds and
# a relative part for longer ones. Each median's error is at least the larger of the two,
# so the interval of a copy of the reference holds 1.
SYSTEMATIC_MS = 2e-4
SYSTEMATIC_REL = 1e-3


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
    SYSTEMATIC_MS and SYSTEMATIC_REL of it: what moves between runs but not within one
    (where the buffers landed, the event timer's resolution), so an interval does not
    claim a speedup that another run of the same kernel would not see."""
    ratio = ref["median"] / new["median"]
    rse = [max(s["se"], SYSTEMATIC_MS, SYSTEMATIC_REL * s["median"]) / s["median"]
           for s in (ref, new)]  # fmt: skip
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
