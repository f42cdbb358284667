"""How much the reported speedup moves when nothing changed: the candidate is a copy of
the reference (`class ModelNew(Model): pass`), so the true speedup is exactly 1.

    python bench/timing_noise.py [--runs 6] [--json OUT.json] [--tasks builtin:level1 ...]
                                 [--big big_relu ...] [--graphs] [--fresh] [--busy N]

Each run is fresh: a new worker process (forked from a warm sandboxed zygote, as the
worker pool's are; `--fresh` starts a whole new sandboxed worker instead), new secret
inputs, the candidate and the reference timed interleaved by the verifier's timing phase
(`tritonrl.verify.timing_phase.time_candidate`: the same code path `verify` uses for a correct
kernel, minus the correctness verdict, which a torch-only copy would not get). The
reference time alone is not cached between runs. Besides the builtin tasks it times
three larger ones written here (memory-bound, a row reduction, compute-bound), since the
builtin sizes are small enough for the CPU interpreter. Prints a Markdown table: kernel
time, the range of speedups over the runs, the widest 95% interval, and whether a task
of at least 20 us stayed within [0.98, 1.02]. Measures; asserts nothing. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from tritonrl.config import VerifyConfig
from tritonrl.tasks import Task, load_tasks
from tritonrl.verify.pool.gate import gate_for, visible_gpus
from tritonrl.verify.pool.lane import Lane
from tritonrl.verify.timing_phase import time_candidate

_BIG = {
    "big_relu": ("torch.relu(x)", "[torch.randn(4096, 16384)]"),
    "big_softmax": ("torch.softmax(x, dim=-1)", "[torch.randn(8192, 8192)]"),
    "big_matmul": ("x @ w", "[torch.randn(4096, 4096), torch.randn(4096, 4096)]"),
}
DEFAULT_TASKS = [
    "builtin:level1/1_ReLU", "builtin:level1/16_Softmax", "builtin:level1/22_Matmul_Square",
    "builtin:level2/1_Gemm_Bias_ReLU",
]  # fmt: skip


def big_task(name: str) -> Task:
    expr, inputs = _BIG[name]
    args = "x, w" if "w" in expr else "x"
    source = (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def forward(self, {args}):\n        return {expr}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n"
    )
    return Task(name, 1, name, source, "bench/timing_noise.py")


def copy_of_reference(task: Task) -> str:
    return task.source + "\n\nclass ModelNew(Model):\n    pass\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--tasks", nargs="*", default=DEFAULT_TASKS)
    ap.add_argument("--big", nargs="*", default=list(_BIG), choices=list(_BIG),
                    help="the larger tasks written here to add (none: --big)")  # fmt: skip
    ap.add_argument("--graphs", action="store_true", help="time CUDA-graph replays")
    ap.add_argument("--fresh", action="store_true", help="a new sandboxed worker per run")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="meanwhile N pool lanes verify other candidates on the same GPU "
                         "(correctness runs only), as the other lanes of a pool do")  # fmt: skip
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    report = load_tasks(args.tasks)
    tasks = [*report.tasks, *(big_task(n) for n in args.big)]
    if report.errors:
        print(f"skipped: {report.errors}", file=sys.stderr)
    config = VerifyConfig(device="cuda", ref_time_cache="off", cuda_graphs=args.graphs)
    print("| task | kernel (us) | speedup min | speedup max | widest 95% CI | runs | "
          "within [0.98, 1.02] | s per run |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---|---:|", flush=True)
    runs: dict[str, list] = {}
    root = Path(tempfile.mkdtemp(prefix="timing-noise-"))
    gpu = visible_gpus()[0]
    # The lane shares this process's gate for the GPU with the --busy pool's lanes.
    lane = None if args.fresh else Lane(0, root / "lane", root / "cache", config, "cuda", gpu,
                                        gpu_gate=gate_for(gpu))  # fmt: skip
    stop = threading.Event()
    churn = threading.Thread(target=busy, args=(args.busy, "cuda", stop), daemon=True)
    if args.busy:
        churn.start()
    try:
        _measure(args, tasks, config, lane, runs)
    finally:
        stop.set()
        if lane is not None:
            lane.stop()
        if args.busy:
            churn.join()
        shutil.rmtree(root, ignore_errors=True)


def busy(lanes: int, device: str, stop: threading.Event) -> None:
    """Verify the throughput bench's mixed batch (each round's sources made new, so
    every round compiles and runs again) on `lanes` pool lanes without timing, until
    `stop`."""
    from verify_throughput import build_batch  # bench/, beside this file

    from tritonrl.verify.pool.pool import VerifierPool

    batch = [(t, c) for t, _, c in build_batch(8)]
    round_ = 0
    with VerifierPool(VerifyConfig(device=device, timing=False), lanes) as pool:
        while not stop.is_set():
            round_ += 1
            futures = [pool.submit(t, f"{c}\n# round {round_}\n") for t, c in batch]
            while not stop.is_set() and not all(f.done() for f in futures):
                time.sleep(0.1)


def _measure(args, tasks, config, lane, runs: dict[str, list]) -> None:
    for task in tasks:  # a row as each task finishes: a cut-off run keeps what it measured
        runs[task.id] = got = []
        for _ in range(args.runs):
            start = time.perf_counter()
            r = time_candidate(task, copy_of_reference(task), config, sessions=lane)
            if r.speedup is None:
                print(f"{task.id}: {r.error} {r.notes[-3:]}", file=sys.stderr)
                break
            got.append({
                "speedup": r.speedup, "ci": r.speedup_ci, "runtime_ms": r.runtime_ms,
                "ref_runtime_ms": r.ref_runtime_ms, "trials": r.timing["trials"],
                "rse": r.timing["rse"], "seconds": time.perf_counter() - start,
                "timing": r.timing, "notes": r.notes,
            })  # fmt: skip
        if got:
            print(_row(task.id, got), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"runs": runs, "graphs": args.graphs, "busy": args.busy}, f, indent=1)


def _row(task_id: str, got: list[dict]) -> str:
    s = [x["speedup"] for x in got]
    us = 1e3 * sum(x["ref_runtime_ms"] for x in got) / len(got)
    widest = max(x["ci"][1] - x["ci"][0] for x in got)
    within = all(0.98 <= v <= 1.02 for v in s)
    verdict = ("yes" if within else "NO") if us >= 20 else "n/a (<20 us)"
    seconds = sum(x["seconds"] for x in got) / len(got)
    return (f"| {task_id} | {us:.1f} | {min(s):.3f} | {max(s):.3f} | {widest:.3f} | "
            f"{len(got)} | {verdict} | {seconds:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
