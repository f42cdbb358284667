"""Verifier throughput: one `tritonrl verify` process per candidate against the pool.

    python bench/verify_throughput.py [--device cpu] [--workers N] [--json OUT]
                                      [--tasks 8] [--limit 64] [--cli-limit 32]

A fixed, deterministic mixed batch: for each of the first `--tasks` tasks of TASKS
(builtin, with solutions), eight candidates: the solution, the solution inside a
completion (reasoning and a fence), two wrong ones (the value the kernel stores has an
operator flipped, or is halved), two that do not compile (a syntax error, a name error
at import) and two cheats (the reference's torch code behind a trivial Triton launch,
and a kernel that is never launched). They are interleaved so that any prefix mixes
every task and every kind alike. Modes, each timed from the first process (or pool)
started to the last verdict, in candidates per second:

  cli       `tritonrl verify TASK FILE --json`, one process per candidate, `--workers`
            of them at a time (the first `--cli-limit` candidates)
  batch     `tritonrl verify --batch CASES --out RESULTS --workers N`, one process
  pool      `VerifierPool(workers=N).verify_many` in this process (pool start included)
  nofunnel  the same with `VerifyConfig(funnel=False)`: every stage and input set runs
  warm      the pool's steady state, as a training run sees it: the pool started and a
            warm-up batch (the same kinds over two other tasks) verified before the clock
            starts; with `--ref-times cached` (the default) the warm-up batch also holds a
            copy of each measured task's solution, marked by a comment so that it shares
            no compiled kernel with the batch: the reference times of the tasks are then
            cached, as after a training run's first step (`cold`: measured in the batch)

Each pool mode gets a reference-time cache of its own, so modes and runs compare alike.

`--no-shared-launchers` and `--no-warm-compiler` switch off what the pool does on CUDA
so that a job does not pay for Triton's start-up (tritonrl.verify.pool.launchers,
zygote._warm_compiler): run with and without them to see what each saves.

It prints a table with the ratios to `cli` (and `nofunnel` to `pool`) and, per mode,
how many candidates of each kind were judged correct, so a reader sees that the modes
agree. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TASKS = [
    "level1/1_ReLU", "level1/2_Sigmoid", "level1/8_Hardtanh", "level1/11_Sum_Reduction",
    "level1/16_Softmax", "level1/19_RMSNorm", "level1/22_Matmul_Square",
    "level2/1_Gemm_Bias_ReLU", "level1/9_SiLU", "level2/16_Mul_Add_ReLU_Sum",
]  # fmt: skip
KINDS = ["correct", "completion", "wrong_op", "wrong_scale", "syntax", "name",
         "cheat_fallback", "cheat_unlaunched"]  # fmt: skip
_FLIP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult}


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def _last_store(tree: ast.Module) -> ast.Call:
    stores = [
        node
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and _is_jit(fn)
        for node in ast.walk(fn)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.store"
    ]
    return stores[-1]


def mutate_store(solution: str, halve: bool) -> str:
    """The solution with the value of its last `tl.store` changed: halved, or its first
    operator flipped (negated when it has none)."""
    tree = ast.parse(solution)
    store = _last_store(tree)
    value = store.args[1]
    if halve:
        store.args[1] = ast.BinOp(value, ast.Mult(), ast.Constant(0.5))
    else:
        op = next((n for n in ast.walk(value) if isinstance(n, ast.BinOp)), None)
        if op is not None:
            op.op = _FLIP.get(type(op.op), ast.Sub)()
        else:
            store.args[1] = ast.UnaryOp(ast.USub(), value)
    return ast.unparse(ast.fix_missing_locations(tree))


_NOOP = """
@triton.jit
def _touch(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < 1), mask=offs < 1)
"""


def candidate(task, kind: str) -> str:
    sol = task.solution
    if kind == "correct":
        return sol
    if kind == "completion":
        return f"<think>Fuse it in one kernel.</think>\nHere it is:\n```python\n{sol}```\n"
    if kind in ("wrong_op", "wrong_scale"):
        return mutate_store(sol, halve=kind == "wrong_scale")
    if kind == "syntax":
        return sol.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module:", 1)
    if kind == "name":
        undefined = "\n_BLOCK = undefined_block_size\n\n\nclass ModelNew"
        return sol.replace("\nclass ModelNew", undefined, 1)
    head = "import triton\nimport triton.language as tl\n" + task.source + _NOOP
    if kind == "cheat_fallback":  # the reference computes; a trivial launch for show
        return head + (
            "\n\nclass ModelNew(Model):\n    def forward(self, *args):\n"
            "        out = super().forward(*args)\n        _touch[(1,)](out, BLOCK=16)\n"
            "        return out\n"
        )
    return head + "\n\nclass ModelNew(Model):\n    pass\n"  # cheat_unlaunched


def build_batch(n_tasks: int) -> list[tuple[object, str, str]]:
    """(task, kind, candidate) in a Latin-square order: every prefix is balanced."""
    from tritonrl.tasks import load_builtin

    tasks = [load_builtin(t).tasks[0] for t in TASKS[:n_tasks]]
    rows = []
    for r in range(len(KINDS)):
        for t, task in enumerate(tasks):
            kind = KINDS[(r + t) % len(KINDS)]
            rows.append((task, kind, candidate(task, kind)))
    return rows


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritonrl", *args], capture_output=True,
                          text=True, timeout=3600)  # fmt: skip


def run_cli(batch, device: str, workers: int, tmp: Path) -> list[dict]:
    files = []
    for i, (_, _, code) in enumerate(batch):
        files.append(tmp / f"cand_{i}.txt")
        files[-1].write_text(code)

    def one(i: int) -> dict:
        done = _cli(["verify", batch[i][0].id, str(files[i]), "--device", device, "--json"])
        return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-300:]}

    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(one, range(len(batch))))


def run_batch(batch, device: str, workers: int, tmp: Path) -> list[dict]:
    cases, out = tmp / "cases.jsonl", tmp / "results.jsonl"
    cases.write_text("".join(json.dumps({"task": t.id, "kernel": c}) + "\n" for t, _, c in batch))
    done = _cli(["verify", "--batch", str(cases), "--out", str(out), "--force",
                 "--device", device, "--workers", str(workers)])  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"batch mode failed: {done.stderr[-2000:]}")
    rows = sorted(map(json.loads, out.read_text().splitlines()), key=lambda r: r["index"])
    return rows


def run_pool(batch, device: str, workers: int, funnel: bool, ref_times: Path,
             warm: bool = False, exclusive_timing: bool = True, cached_refs: bool = True,
             **options):  # fmt: skip
    """The results' dicts, the seconds from the pool's start (or, `warm`, from after its
    warm-up batch) to the last verdict, and the shared launchers' counts (on CUDA).
    `ref_times`: a new reference-time cache file. `options`: VerifierPool's
    (shared_launchers, warm_compiler). The extras hold each GPU gate's `stats()` over
    the batch (what correctness runs held, how long they waited for timing windows)."""
    from tritonrl.config import VerifyConfig
    from tritonrl.verify.pool.pool import VerifierPool

    start = time.perf_counter()
    config = VerifyConfig(device=device, funnel=funnel, exclusive_timing=exclusive_timing,
                          ref_time_cache=str(ref_times))  # fmt: skip
    with VerifierPool(config, workers, **options) as pool:
        if warm:
            others = {f"builtin:{t}" for t in TASKS[-2:]}
            cases = [(t, c) for t, _, c in build_batch(len(TASKS)) if t.id in others]
            if cached_refs:  # the batch's references timed: a distinct source, same kernel
                tasks = {t.id: t for t, _, _ in batch}.values()
                cases += [(t, t.solution + "\n# a warm-up copy\n") for t in tasks]
            pool.verify_many(cases)
            start = time.perf_counter()
        gates = list({id(lane.gpu_gate): lane.gpu_gate for lane in pool.lanes
                      if lane.gpu_gate is not None}.values())  # fmt: skip
        for gate in gates:
            gate.stats(reset=True)
        cpu = _cpu_now()
        results = pool.verify_many([(t, c) for t, _, c in batch])
        seconds = time.perf_counter() - start
        cpu = {k: round(v - cpu[k], 2) for k, v in _cpu_now().items()}
        launchers = dict(pool.launchers.stats) if pool.launchers else None
        gpu_gates = [gate.stats() for gate in gates] or None
    extra = {"shared_launchers": launchers, "cpu": cpu, "gpu_gates": gpu_gates}
    return [r.to_dict() for r in results], seconds, extra


def _cpu_now() -> dict[str, float]:
    """CPU seconds so far: this (trusted) process's, all its threads together (near the
    wall time means its GIL is the limit), and the whole machine's busy and idle time."""
    own = os.times()
    out = {"trusted_s": own.user + own.system}
    with contextlib.suppress(OSError):
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        idle = ticks[3] + ticks[4]
        out.update(machine_busy_s=(sum(ticks) - idle) / hz, machine_idle_s=idle / hz)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tasks", type=int, default=8, help=f"first N of {len(TASKS)} tasks")
    ap.add_argument("--limit", type=int, default=0, help="candidates for the pool modes")
    ap.add_argument("--cli-limit", type=int, default=-1,
                    help="candidates for cli (default: 32 on cpu, all on cuda)")  # fmt: skip
    ap.add_argument("--modes", default="cli,batch,pool,nofunnel,warm")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument(
        "--no-shared-launchers",
        action="store_true",
        help="every job builds Triton's C modules itself (as before)",
    )
    ap.add_argument(
        "--shared-timing",
        action="store_true",
        help="VerifyConfig(exclusive_timing=False): timing beside other lanes' checks",
    )
    ap.add_argument(
        "--ref-times",
        choices=["cached", "cold"],
        default="cached",
        help="warm mode: the batch's reference times cached by the warm-up, or measured",
    )
    ap.add_argument(
        "--no-warm-compiler",
        action="store_true",
        help="the lanes' zygotes compile nothing before they fork",
    )
    args = ap.parse_args()
    batch = build_batch(args.tasks)
    if args.limit:
        batch = batch[: args.limit]
    cli_limit = args.cli_limit if args.cli_limit >= 0 else (32 if args.device == "cpu" else 0)
    report = {"device": args.device, "workers": args.workers, "tasks": TASKS[: args.tasks],
              "candidates": len(batch), "modes": {},
              "pool_options": {"shared_launchers": not args.no_shared_launchers,
                               "warm_compiler": not args.no_warm_compiler},
              "exclusive_timing": not args.shared_timing,
              "ref_times": args.ref_times}  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="verify-bench-"))
    try:
        _run_modes(args, batch, cli_limit, report, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _print_table(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))


def _run_modes(args, batch, cli_limit: int, report: dict, tmp: Path) -> None:
    for mode in args.modes.split(","):
        part = batch[:cli_limit] if mode == "cli" and cli_limit else batch
        start = time.perf_counter()
        if mode == "cli":
            rows = run_cli(part, args.device, args.workers, tmp)
        elif mode == "batch":
            rows = run_batch(part, args.device, args.workers, tmp)
        extra: dict = {}
        if mode in ("cli", "batch"):
            seconds = time.perf_counter() - start
        else:
            rows, seconds, extra = run_pool(
                part, args.device, args.workers, funnel=mode != "nofunnel",
                ref_times=tmp / f"ref_times_{mode}.json", warm=mode == "warm",
                exclusive_timing=report["exclusive_timing"],
                cached_refs=args.ref_times == "cached", **report["pool_options"],
            )  # fmt: skip
        stages: Counter = Counter()
        for r in rows:
            stages.update(r.get("stage_times") or {})
        correct = Counter(kind for (_, kind, _), r in zip(part, rows, strict=True)
                          if r.get("correct"))  # fmt: skip
        report["modes"][mode] = {
            "candidates": len(part), "seconds": round(seconds, 2),
            "per_second": round(len(part) / seconds, 3), "correct_by_kind": dict(correct),
            "verdicts": [[r.get("stage"), r.get("correct"), r.get("error")] for r in rows],
            "timings": [
                {"task": t.id, "kind": kind, **{k: r["timing"].get(k) for k in TIMING_KEYS},
                 "notes": r.get("notes", [])[:4]}
                for (t, kind, _), r in zip(part, rows, strict=True) if r.get("timing")
            ],
            "stage_seconds": {k: round(v, 2) for k, v in stages.items()},
            "timed": _timed_summary(rows),
            **extra,
        }  # fmt: skip
        print(f"{mode}: {len(part)} candidates in {seconds:.1f} s", file=sys.stderr, flush=True)


TIMING_KEYS = ("trials", "rse", "median_ms", "ref_median_ms", "ref_alone_ms", "off_stream",
               "host_ms", "ref_alone_cached", "tries", "preroll_us", "rerun", "interrupted",
               "sync_us", "lag_us", "ref_lag_us", "shared_gpu")  # fmt: skip


def _timed_summary(rows: list[dict]) -> dict | None:
    """What the timed candidates cost: trials per series, the worker's timing call in ms
    (`host_ms`), how many reference times came from the cache, and how often the host's
    load showed: trials thrown away for it (`interrupted`), candidates timed to the
    synchronisation (`off_stream`), timed twice (`retimed`) or given the reference's
    time alone (`alone_used`)."""
    timed_rows = [r for r in rows if (r.get("timing") or {}).get("trials")]
    timed = [r["timing"] for r in timed_rows]
    if not timed:
        return None
    trials = sorted(t["trials"] for t in timed)
    host = sorted(t["host_ms"] for t in timed)
    return {
        "timed": len(timed), "trials_median": trials[len(trials) // 2], "trials_max": trials[-1],
        "host_ms_median": host[len(host) // 2], "host_ms_max": host[-1],
        "host_ms_sum": round(sum(host), 1),
        "ref_alone_cached": sum(bool(t.get("ref_alone_cached")) for t in timed),
        "interrupted": sum(t.get("interrupted") or 0 for t in timed),
        "off_stream": sum(bool(t.get("off_stream")) for t in timed),
        "retimed": sum((t.get("tries") or 1) > 1 for t in timed),
        "alone_used": sum(
            any("time alone is used" in n for n in r.get("notes", [])) for r in timed_rows
        ),
    }  # fmt: skip


def _print_table(report: dict) -> None:
    modes = report["modes"]
    print(f"\n{report['candidates']} candidates over {len(report['tasks'])} tasks, "
          f"device {report['device']}, {report['workers']} workers\n")  # fmt: skip
    print("| mode | candidates | seconds | candidates/s | vs cli | correct (by kind) |")
    print("|---|---|---|---|---|---|")
    for mode, m in modes.items():
        ratio = f"{m['per_second'] / modes['cli']['per_second']:.2f}x" if "cli" in modes else ""
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(m["correct_by_kind"].items()))
        print(f"| {mode} | {m['candidates']} | {m['seconds']:.1f} | {m['per_second']:.3f} "
              f"| {ratio} | {kinds} |")  # fmt: skip
    for mode, m in modes.items():
        spent = ", ".join(f"{k} {v:.1f}" for k, v in m["stage_seconds"].items())
        print(f"{mode}: seconds summed over candidates per stage: {spent}")
        if m.get("shared_launchers"):
            print(f"{mode}: shared launchers: {m['shared_launchers']}")
        if m.get("timed"):
            print(f"{mode}: timed candidates: {m['timed']}")
        if m.get("cpu"):
            print(f"{mode}: CPU seconds while it ran ({m['seconds']:.1f} s): {m['cpu']}")
        for gate in m.get("gpu_gates") or []:
            print(f"{mode}: GPU gate: {gate}")
    print(f"pool options: {report['pool_options']}, exclusive timing: "
          f"{report['exclusive_timing']}, reference times: {report['ref_times']}")  # fmt: skip
    if "pool" in modes and "nofunnel" in modes:
        gain = modes["pool"]["per_second"] / modes["nofunnel"]["per_second"]
        print(f"\nthe staged funnel: {gain:.2f}x the candidates per second of the pool without it")


if __name__ == "__main__":
    main()
