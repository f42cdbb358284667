"""Every task family's solutions through the verifier, many tasks each: how many pass, the
failures by family, and (on CUDA) the speedup over eager PyTorch the reward uses.

    python bench/families_check.py --per-family 300 --workers 8 --out OUT   # the GPU
    python bench/families_check.py --per-family 300 --no-timing --workers 16 --out OUT
    python bench/families_check.py --per-family 3 --small --device cpu --out OUT

Tasks: `--per-family` of each family from `--seed` on, the train and held-out splits
together (`tritonrl.tasks.families.draw(split="all")`), KernelBench-like sizes (`--small`:
the interpreter's sizes). Each solution is verified by one `VerifierPool` with the
config's verify section under the family's policy (the fused family's torch ops allowed
as its prompts allow them). Per family: tasks, correct, the first failures (id, stage,
error), and over the correct timed ones the median of `reward_speedup` (the noise rule:
1.0 while the 95% interval contains 1), the share at or above 1.0 and fast_1 (above 1.0
outside the noise). Each task's row (`rows` in the JSON) keeps its signature, its input
sizes, and both measures (device: the launch hidden; launch: the launch inside) with
their medians, so a slow family shows whether its kernels or their launch lose. Writes
OUT/families_check.json and OUT/families_check.md after each family. `--no-timing`
checks correctness alone (`verify.timing` off: thousands of tasks in minutes, no speedup
columns). "distinct" counts the tasks whose reference differs from every other's, and
"programs" their signatures. Measures; asserts nothing.

What it does NOT do: tune the solutions, or check programs against KernelBench
(`tritonrl tasks decontaminate` does).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import time
from pathlib import Path

from tritonrl.config import PARTIAL_TORCH_OPS
from tritonrl.config_loader import load_config
from tritonrl.tasks import families
from tritonrl.verify.pool.pool import VerifierPool

SIZE = re.compile(r"^(\w+) = (\d+)$", re.M)  # a reference's module-level sizes


def family_config(base, name: str):
    """The verify config a family's solutions are checked under."""
    if families.policy(name) == "strict":
        return base
    return dataclasses.replace(base, policy="partial", allowed_torch_ops=PARTIAL_TORCH_OPS)


def check(args, out: Path) -> dict:
    """Verify each family's solutions; the report so far is written after each family."""
    config = load_config(args.config, [], cuda_available=args.device == "cuda", stage="verify")
    base = dataclasses.replace(config.verify, device=args.device, timing=not args.no_timing)
    names = args.families or list(families.FAMILIES)
    report: dict = {"argv": vars(args) | {"families": names}, "families": {}}
    started = time.monotonic()
    with VerifierPool(base, workers=args.workers) as pool:
        for name in names:
            tasks = families.draw(args.per_family, args.seed, "all", [name], args.small)
            t = time.monotonic()
            results = pool.verify_many([(x, x.solution) for x in tasks], family_config(base, name))
            report["families"][name] = summarize(tasks, results, time.monotonic() - t)
            f = report["families"][name]
            print(f"{name}: {f['correct']}/{f['tasks']} correct, speedup median "
                  f"{f['speedup_median']}, {f['seconds']} s", flush=True)  # fmt: skip
            report["seconds"] = round(time.monotonic() - started, 1)
            write(report, out)
    return report


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "families_check.json").write_text(json.dumps(report, indent=1))
    (out / "families_check.md").write_text(markdown(report))


def summarize(tasks, results, seconds: float) -> dict:
    failures = [
        {"task": t.id, "stage": r.stage, "error": (r.error or "")[:300], "flags": r.flags}
        for t, r in zip(tasks, results, strict=True)
        if not r.correct
    ]
    speedups = [r.reward_speedup for r in results if r.correct and r.reward_speedup is not None]
    rows = [row(t, r) for t, r in zip(tasks, results, strict=True) if r.correct]

    def share(keep) -> float | None:
        return round(sum(map(keep, speedups)) / len(speedups), 3) if speedups else None

    return {
        "tasks": len(tasks),
        "distinct": len({t.source for t in tasks}),
        "programs": len({families.signature(t.id) for t in tasks}),
        "correct": sum(r.correct for r in results),
        "failures": failures[:10],
        "failed": len(failures),
        "timed": len(speedups),
        "speedup_median": round(statistics.median(speedups), 3) if speedups else None,
        "at_least_1": share(lambda x: x >= 1.0),
        "fast_1": share(lambda x: x > 1.0),
        "seconds": round(seconds, 1),
        "rows": rows,
    }


def row(task, result) -> dict:
    """One correct task: its signature, sizes and each measure's speedup and medians."""
    measures = {
        name: {k: m.get(k) for k in ("speedup", "median_ms", "ref_median_ms")}
        for name, m in result.speedups.items()
    }
    return {"task": task.id, "signature": families.signature(task.id),
            "sizes": {k: int(v) for k, v in SIZE.findall(task.source)},
            "reward_speedup": result.reward_speedup, "measures": measures}  # fmt: skip


def markdown(report: dict) -> str:
    lines = [
        "| family | tasks | distinct | programs | correct | timed | speedup median | >= 1.0 "
        "| fast_1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = ("tasks", "distinct", "programs", "correct", "timed", "speedup_median",
            "at_least_1", "fast_1")  # fmt: skip
    for name, f in report["families"].items():
        cells = ["-" if f[k] is None else str(f[k]) for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    failures = [x for f in report["families"].values() for x in f["failures"]]
    lines += [""] + [f"- {x['task']}: {x['stage']}: {x['error'][:160]}" for x in failures]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-family", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", nargs="*", default=None)
    ap.add_argument("--small", action="store_true", help="the interpreter's sizes")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--no-timing", action="store_true", help="correctness only (no speedups)")
    ap.add_argument("--config", default="qwen-coder-1.5b-1gpu", help="its verify section")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    print(markdown(check(args, Path(args.out))))


if __name__ == "__main__":
    main()
