"""Evaluation metrics over verified samples: KernelBench's and the code-generation field's.

    summary = summarize(rows, k_values=(1, 2, 4))   # rows: {"task", "level", "verdict"}

Per level and overall: `n` (samples), `tasks`, `valid` (code was extracted), `compiled`,
`correct` (every input set matched, no cheating flag), `fast_1` and `fast_2` (correct and
faster than the reference by more than 1x / 2x: KernelBench's fast_p, over samples),
`pass@k` (the unbiased estimator of Chen et al. 2021, per task, averaged over tasks),
`geomean_speedup` over correct timed kernels, and `flags` (how many samples were flagged,
by cheating category). The speedup used is the verdict's `reward_speedup` when it has
one: the verifier's noise rule (1.0 while the 95% interval contains 1), so a speedup
inside the noise is not "faster". When nothing was timed (a verdict from the CPU, or a
correct kernel without a speedup) fast_p and the geometric mean are `None` for the group,
with a note, never 0.

With turns (`tritonrl eval --turns T`), `turn_metrics` gives per turn t, over the
conversations (a task's sample each): `answered` (how many were asked turn t),
`correct` (correct@t: some answer up to turn t was correct), `fast_1` (fast_1@t: some
correct answer up to t was faster than the reference, `None` when untimed) and
`best_speedup` (the geometric mean over conversations correct by t of each one's best
speedup so far; `None` when untimed): each is "by turn t", so they never fall. And
`repeated` (from turn 2): the share of turn t's answers whose kernel repeats an earlier
answer of their conversation (`extract.kernel_key`; rows without a `completion` are not
counted), the sign of a model that does not act on the feedback.

What it does NOT do: it verifies nothing (the verdicts are given) and does not weigh
levels against each other (overall is over all samples, pass@k over all tasks).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from tritonrl.extract import kernel_key
from tritonrl.verify.result import CHEAT_FLAGS


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn from n, of which c are correct, is correct)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, not {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def _speedup(verdict: dict) -> float | None:
    s = verdict.get("reward_speedup")
    return verdict.get("speedup") if s is None else s


def _timed(verdicts: Sequence[dict], speedups: Sequence[float | None]) -> bool:
    """Whether fast_p means something: nothing verified on the CPU (no timing there) and
    some correct kernel timed when there are any (not so with `verify.timing` off). A
    correct kernel whose timing failed on CUDA counts as not faster."""
    on_cpu = any(v.get("device") == "cpu" for v in verdicts)
    return not on_cpu and (not speedups or any(s is not None for s in speedups))


def _group(rows: Sequence[dict], k_values: Iterable[int]) -> dict:
    verdicts = [r["verdict"] for r in rows]
    n = len(rows)
    correct = [v for v in verdicts if v.get("correct")]
    out: dict = {
        "n": n,
        "tasks": len({r["task"] for r in rows}),
        "valid": sum(v.get("stage") != "extract" for v in verdicts) / n,
        "compiled": sum(bool(v.get("compiled")) for v in verdicts) / n,
        "correct": len(correct) / n,
    }
    timed = _timed(verdicts, [_speedup(v) for v in correct])
    speedups = [s for s in map(_speedup, correct) if s is not None]
    for p in (1, 2):
        out[f"fast_{p}"] = sum(s > p for s in speedups) / n if timed else None
    out["geomean_speedup"] = (math.exp(sum(math.log(max(s, 1e-9)) for s in speedups)
                              / len(speedups)) if speedups and timed else None)  # fmt: skip
    per_task: dict[str, list[bool]] = {}
    for r in rows:
        per_task.setdefault(r["task"], []).append(bool(r["verdict"].get("correct")))
    for k in k_values:
        if all(len(c) >= k for c in per_task.values()):
            out[f"pass@{k}"] = sum(pass_at_k(len(c), sum(c), k) for c in per_task.values()) / len(
                per_task
            )
    flags = Counter(f for v in verdicts for f in v.get("flags", []) if f in CHEAT_FLAGS)
    out["flagged"] = sum(any(f in CHEAT_FLAGS for f in v.get("flags", [])) for v in verdicts)
    out["flags"] = dict(sorted(flags.items()))
    return out


def summarize(rows: Sequence[dict], k_values: Iterable[int] = (1,)) -> dict:
    """{"overall": {...}, "levels": {"1": {...}, ...}, "notes": [...]} for `rows`."""
    if not rows:
        raise ValueError("no samples to summarize")
    ks = sorted(set(k_values))
    levels = sorted({int(r["level"]) for r in rows})
    out = {"overall": _group(rows, ks),
           "levels": {str(lv): _group([r for r in rows if int(r["level"]) == lv], ks)
                      for lv in levels}}  # fmt: skip
    notes = ["speedups inside the timing noise (95% interval containing 1) count as 1.0"]
    if out["overall"]["fast_1"] is None:
        notes.append("fast_p and the geometric-mean speedup are not given (null, not 0): "
                     "kernels were not timed (timing needs CUDA and verify.timing)")  # fmt: skip
    out["notes"] = notes
    return out


def k_values(samples: int) -> list[int]:
    """The k of pass@k reported for `samples` per task: 1, 2, 4, ... and `samples`."""
    ks = [1]
    while ks[-1] * 2 <= samples:
        ks.append(ks[-1] * 2)
    return sorted(set(ks + [samples]))


def turn_metrics(conversations: Sequence[Sequence[dict]], turns: int) -> dict[str, dict]:
    """{"1": {answered, correct, fast_1, best_speedup}, ..., str(turns): ...} over
    `conversations` (each a list of rows with `turn` and `verdict`; a row without `turn`
    is turn 1): the module docstring's correct@t, fast_1@t, best speedup@t."""
    if not conversations:
        raise ValueError("no conversations to summarize")
    verdicts = [r["verdict"] for c in conversations for r in c]
    correct_speedups = [_speedup(v) for v in verdicts if v.get("correct")]
    timed = _timed(verdicts, correct_speedups)
    n, out = len(conversations), {}
    repeated = _repeats(conversations)
    for t in range(1, turns + 1):
        upto = [[r["verdict"] for r in c if r.get("turn", 1) <= t] for c in conversations]
        best: list[float | None] = []  # per conversation correct by t: its best speedup
        for vs in upto:
            good = [v for v in vs if v.get("correct")]
            if good:
                speeds = [s for s in map(_speedup, good) if s is not None]
                best.append(max(speeds) if speeds else None)
        speeds = [s for s in best if s is not None]
        geomean = math.exp(sum(math.log(max(s, 1e-9)) for s in speeds) / max(len(speeds), 1))
        out[str(t)] = {
            "answered": sum(any(r.get("turn", 1) == t for r in c) for c in conversations),
            "correct": len(best) / n,
            "fast_1": sum(s > 1 for s in speeds) / n if timed else None,
            "best_speedup": geomean if speeds and timed else None,
        }
        if t > 1:
            seen = repeated.get(t, [])
            out[str(t)]["repeated"] = sum(seen) / len(seen) if seen else None
    return out


def _repeats(conversations: Sequence[Sequence[dict]]) -> dict[int, list[bool]]:
    """Per turn from 2, whether each answer with a `completion` repeats an earlier answer
    of its conversation (the same `kernel_key`)."""
    out: dict[int, list[bool]] = {}
    for c in conversations:
        keys: set[str] = set()
        for r in sorted(c, key=lambda r: r.get("turn", 1)):
            if "completion" not in r:
                continue
            key = kernel_key(r["completion"])
            if r.get("turn", 1) > 1:
                out.setdefault(r["turn"], []).append(key is not None and key in keys)
            if key is not None:
                keys.add(key)
    return out
