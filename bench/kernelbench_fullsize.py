"""Does the verifier take every KernelBench problem at full size? Each level-1 and level-2
problem of a KernelBench checkout goes through `tritonrl.verify.verify` on CUDA with the
reference itself as the candidate (`class ModelNew(Model)`), so any refusal is the verifier's.

    python bench/kernelbench_fullsize.py PATH/TO/KernelBench [--levels 1,2] [--limit N]
        [--largest-first] [--budget-s 540] [--skip DONE.jsonl ...] [--out RESULTS.jsonl]
        [--min-gb G] [--max-gb G] [--parallel N --inflight-gb G]
        [--workers N --pool-gb G [--gpu-memory-fraction F] [--gpu-memory-factor X]]

Torch is allowed for this check only: static checks are off and the run-time flags a
torch-only candidate earns (`torch_fallback`, `no_launch`) are expected, so the funnel
runs every input set and the timing phase whatever they say. Per problem it writes a
JSON line: verdict (`ok`: every input set matched and it was timed; `untimed`: every set
matched, the timing phase failed; `limit`: a limit of the sandbox or the machine ended
it; `wrong`; `error`), the seconds, the data footprint, the limit and error if any,
and both speedups. The summary (verdicts, total seconds, slowest problems) is printed
last as Markdown. `--budget-s` stops starting problems after that many seconds (on the
pool: stops waiting for more verdicts then, and cancels the rest) and
`--skip` leaves out problems a previous run's JSONL already holds, so a run can be
split across calls. `--parallel N` verifies up to N problems at once as long as their
data (`footprint_gb`) stays under `--inflight-gb` (one problem always runs, however
large): seconds are then those of a shared GPU and host, and the speedups are measured
beside other work, so read the verdicts, not the times. `--workers N` verifies the
problems under `--pool-gb` on a pool of N lanes on one GPU, which reserve each job's GPU
memory from a budget (`verify.gpu_memory_fraction`, `verify.gpu_memory_factor`: the
options of the same names); the budget's waits are printed after them. Each row also
has the worker's GPU memory after the timed calls (`worker_gpu_mb`: allocated and peak,
MB). Measures; asserts nothing.
CUDA only. KernelBench's problems are not part of this repository: point it at your own
checkout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path

from tritonrl.config import VerifyConfig
from tritonrl.tasks.loaders import load_directory
from tritonrl.tasks.shapes import instantiate
from tritonrl.verify import verify

CANDIDATE_TAIL = "\n\nclass ModelNew(Model):\n    pass\n"  # the reference, as the candidate
EXPECTED_FLAGS = {"torch_fallback", "no_launch"}  # what a torch-only candidate earns


def _footprint_gb(task) -> float:
    try:
        return 4 * (instantiate(task, "full").footprint() or 0) / 1e9
    except Exception:  # noqa: BLE001 - a task the planner cannot size still runs
        return 0.0


def _verdict(result) -> str:
    if getattr(result, "limit", None) or result.timed_out:
        return "limit"
    if result.input_sets and all(s.ok for s in result.input_sets):
        return "ok" if result.speedups or result.device != "cuda" else "untimed"
    return "wrong" if result.input_sets else "error"


def _row(task, result, seconds: float, gb: float) -> dict:
    return {
        "task": task.id, "level": task.level, "verdict": _verdict(result),
        "seconds": round(seconds, 2), "footprint_gb": round(gb, 2),
        "limit": getattr(result, "limit", None), "error": result.error,
        "flags": sorted(set(result.flags) - EXPECTED_FLAGS),
        "sets": {s.name: s.ok for s in result.input_sets},
        "mismatch": next((f"{s.name}: {s.detail}" for s in result.input_sets if not s.ok), None),
        "speedups": {k: round(v["speedup"], 3) for k, v in result.speedups.items()},
        "stage_times": {k: round(v, 2) for k, v in result.stage_times.items()},
        "worker_gpu_mb": result.timing.get("worker_gpu_mb"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="a KernelBench checkout (its KernelBench/ folder or above)")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--limit", type=int, default=0, help="at most this many problems")
    ap.add_argument("--largest-first", action="store_true")
    ap.add_argument("--budget-s", type=float, default=0, help="start no problem after this")
    ap.add_argument("--skip", nargs="*", default=[], help="JSONL files of problems done")
    ap.add_argument("--match", nargs="*", default=[], help="only ids containing one of these")
    ap.add_argument("--out", default="kernelbench_fullsize.jsonl")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to try the script")
    ap.add_argument(
        "--workers", type=int, default=0,
        help="problems under --pool-gb go through a pool of this many warm lanes at once",
    )  # fmt: skip
    ap.add_argument("--pool-gb", type=float, default=1.0)
    ap.add_argument("--min-gb", type=float, default=0.0, help="only problems this large")
    ap.add_argument("--max-gb", type=float, default=0.0, help="only problems smaller")
    ap.add_argument("--parallel", type=int, default=1, help="problems verified at once")
    ap.add_argument("--inflight-gb", type=float, default=16.0)
    ap.add_argument("--gpu-memory-fraction", type=float, default=VerifyConfig.gpu_memory_fraction)
    ap.add_argument("--gpu-memory-factor", type=float, default=VerifyConfig.gpu_memory_factor)
    args = ap.parse_args(argv)

    root = Path(args.root)
    root = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    levels = {int(x) for x in args.levels.split(",")}
    done = {
        json.loads(line)["task"]
        for f in args.skip
        for line in Path(f).read_text(encoding="utf-8").splitlines()
        if line.strip()
    }
    tasks = [
        t for t in load_directory(root).tasks
        if t.level in levels and t.id not in done
        and (not args.match or any(m in t.id for m in args.match))
    ]  # fmt: skip
    sized = [
        (t, gb) for t in tasks
        if (gb := _footprint_gb(t)) >= args.min_gb and not (args.max_gb and gb >= args.max_gb)
    ]  # fmt: skip
    if args.largest_first:
        sized.sort(key=lambda x: -x[1])
    if args.limit:
        sized = sized[: args.limit]
    config = VerifyConfig(
        device=args.device, static_checks=False, funnel=False, skip_timing_on_failure=False,
        ref_time_cache="off", gpu_memory_fraction=args.gpu_memory_fraction,
        gpu_memory_factor=args.gpu_memory_factor, full_max_elements=0,  # as written
    )  # fmt: skip
    rows, started, planned = [], time.perf_counter(), len(sized)
    with open(args.out, "a", encoding="utf-8") as out:
        if args.workers:  # the small problems side by side on warm lanes
            small = [(t, gb) for t, gb in sized if gb < args.pool_gb]
            sized = [(t, gb) for t, gb in sized if gb >= args.pool_gb]
            rows += _pooled(small, config, args.workers, out, args.budget_s, started)
        rows += _alone_or_few(sized, config, args, out, started)
    _summary(rows, planned)
    return 0


def _alone_or_few(problems: list, config: VerifyConfig, args, out, started: float) -> list:
    """Problems through `verify`, up to `args.parallel` at once while their data stays
    under `args.inflight_gb` (the first that fits, largest first when sorted so); none is
    started after `args.budget_s`."""
    rows: list[dict] = []
    left, running = list(problems), []
    cond = threading.Condition()

    def one(task, gb: float) -> None:
        t0 = time.perf_counter()
        try:
            result = verify(task, task.source + CANDIDATE_TAIL, config)
            row = _row(task, result, time.perf_counter() - t0, gb)
        except Exception as exc:  # noqa: BLE001 - verify never raises; a bug is a row
            row = {"task": task.id, "verdict": "error", "seconds": 0.0, "footprint_gb": gb,
                   "limit": None, "error": f"bench: {exc!r}"}  # fmt: skip
        with cond:
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"{row['verdict']:5} {row['seconds']:7.1f} s {gb:6.2f} GB {task.id}"
                  f" {row['error'] or ''}"[:200], flush=True)  # fmt: skip
            running.remove(gb)
            cond.notify_all()

    def fits(gb: float) -> bool:
        return not running or (
            len(running) < args.parallel and sum(running) + gb <= args.inflight_gb
        )

    threads = []
    while left and not (args.budget_s and time.perf_counter() - started > args.budget_s):
        with cond:
            cond.wait_for(lambda: any(fits(gb) for _, gb in left))
            task, gb = next(p for p in left if fits(p[1]))
            left.remove((task, gb))
            running.append(gb)
        threads.append(threading.Thread(target=one, args=(task, gb)))
        threads[-1].start()
    for t in threads:
        t.join()
    return rows


def _pooled(
    problems: list, config: VerifyConfig, workers: int, out, budget_s: float = 0,
    started: float = 0.0,
) -> list[dict]:  # fmt: skip
    """Problems verified on a pool's warm lanes, several at once; each row's seconds are
    its job's own stages (its wait for a lane is not counted). Past `budget_s` seconds
    since `started` the rest are cancelled."""
    from tritonrl.verify.pool.pool import VerifierPool

    pool_config = dataclasses.replace(config, memory_mb=max(config.memory_mb, 16384))
    rows = []
    with VerifierPool(pool_config, workers=workers) as pool:
        pairs = [(t, t.source + CANDIDATE_TAIL) for t, _ in problems]
        for i, result in pool.imap_unordered(pairs, pool_config):
            task, gb = problems[i]
            spent = sum(v for k, v in result.stage_times.items() if k != "gate_wait")  # nested
            row = _row(task, result, spent, gb)
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"{row['verdict']:5} {row['seconds']:7.1f} s {gb:6.2f} GB {task.id} (pool)"
                  f" {row['limit'] or ''} {' '.join(row['flags'])}", flush=True)  # fmt: skip
            if budget_s and time.perf_counter() - started > budget_s:
                print(f"budget: {len(rows)} of {len(problems)} verified; the rest cancelled")
                break
        for i, budget in enumerate(pool.budgets):
            if budget is not None:
                print(f"pool GPU {i} memory budget: {json.dumps(budget.stats())}", flush=True)
    return rows


def _summary(rows: list[dict], planned: int) -> None:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    total = sum(r["seconds"] for r in rows)
    print(f"\n{len(rows)} of {planned} problems in {total:.0f} s: {counts}")
    print("\n| slowest problems | GB | seconds | verdict |\n|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -r["seconds"])[:10]:
        print(f"| {r['task']} | {r['footprint_gb']} | {r['seconds']} | {r['verdict']} |")
    for r in rows:
        if r["verdict"] != "ok" or r.get("flags"):
            print(f"NOT OK {r['task']}: {r['verdict']} {r['limit']} {r.get('flags')} {r['error']}")


if __name__ == "__main__":
    sys.exit(main())
