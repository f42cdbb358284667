"""Device time against time with the launch inside, beside KernelBench's evaluator.

    python bench/launch_overhead.py [--kernelbench-timing PATH/timing.py] [--runs 2]
                                    [--copies 16] [--json OUT.json]

Part 1: five honest builtin kernels (their shipped Triton solutions) through `verify` on
CUDA, `--runs` times each: the device-time speedup (the launch hidden behind a pre-roll,
as a CUDA graph gives) and the launch-inclusive one (the GPU idle when each call begins,
as an eager `model(x)` costs), each with its 95% interval, and the speedup the reward
uses (the lower, noise-ruled). With `--kernelbench-timing` (the `timing.py` of your own
KernelBench checkout, loaded as a plain file: none of its code ships here) the same
models, with the same weights, are also timed by its `time_execution_with_cuda_event`
(cold L2, 100 trials, the speedup as the ratio of mean times, as its evaluator reports).

Part 2: how noisy the launch-inclusive measure is. `--copies` copies of the reference
(`class ModelNew(Model): pass`, true speedup 1) of two tasks through a pool whose lanes
all work at once (busy), and one at a time (idle): the range of each measure's speedup.
Measures; asserts nothing. CUDA only.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import statistics
import sys

import torch

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.tasks.runtime import import_source
from tritonrl.tasks.shapes import instantiate
from tritonrl.verify import verify
from tritonrl.verify.pool.pool import VerifierPool

TASKS = ["level1/1_ReLU", "level1/16_Softmax", "level1/23_Matmul_Rectangular",
         "level1/18_LayerNorm", "level2/1_Gemm_Bias_ReLU"]  # fmt: skip
NOISE_TASKS = ["level1/1_ReLU", "level1/23_Matmul_Rectangular"]
COPY = "\n\nclass ModelNew(Model):\n    pass\n"


def _kernelbench_speedup(task, timing_py: str, tmp: str) -> float:
    """KernelBench's evaluator's speedup for the task's solution: mean reference time over
    mean candidate time, each from its cuda-event timer (cold L2, 100 trials)."""
    spec = importlib.util.spec_from_file_location("kb_timing", timing_py)
    kb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kb)
    inst = instantiate(task, "full")
    init = inst.init_inputs()
    torch.manual_seed(0)
    ref = inst.module.Model(*init).cuda()
    solution = import_source(task.solution, f"kb_solution_{abs(hash(task.id))}", tmp)
    torch.manual_seed(0)
    new = solution.ModelNew(*init).cuda()
    with contextlib.suppress(RuntimeError):
        new.load_state_dict(ref.state_dict())
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inst.inputs(1)]
    device = torch.device("cuda:0")
    means = []
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        for model in (ref, new):
            times = kb.time_execution_with_cuda_event(
                model, inputs, num_warmup=3, num_trials=100, verbose=False, device=device
            )
            means.append(statistics.fmean(times))
    return means[0] / means[1]


def part1(args, rows: list) -> None:
    import tempfile

    config = VerifyConfig(device="cuda", ref_time_cache="off")
    print("| task | device speedup [95% CI] | launch-inclusive speedup [95% CI] | reward uses"
          " | KernelBench |\n|---|---|---|---|---|")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in TASKS:
            task = load_builtin(name).tasks[0]
            for run in range(args.runs):
                r = verify(task, task.solution, config)
                kb = (
                    _kernelbench_speedup(task, args.kernelbench_timing, tmp)
                    if args.kernelbench_timing
                    else None
                )
                row = {"task": name, "run": run, "correct": r.correct, "flags": r.flags,
                       "speedups": r.speedups, "reward_speedup": r.reward_speedup,
                       "kernelbench": kb}  # fmt: skip
                rows.append(row)
                cells = []
                for m in ("device", "launch"):
                    s = r.speedups.get(m)
                    cells.append(
                        f"{s['speedup']:.2f} [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}]" if s else "-"
                    )
                kb_cell = f"{kb:.2f}" if kb is not None else "-"
                used = f"{r.reward_speedup:.2f}" if r.reward_speedup is not None else "-"
                print(f"| {name} | {cells[0]} | {cells[1]} | {used} | {kb_cell} |", flush=True)


def part2(args, rows: list) -> None:
    config = VerifyConfig(
        device="cuda", static_checks=False, funnel=False, skip_timing_on_failure=False,
        ref_time_cache="off",
    )  # fmt: skip
    print("\n| pool | task | copies | device speedup min..max | launch speedup min..max |"
          "\n|---|---|---|---|---|")  # fmt: skip
    for label, workers in (("busy (default lanes)", None), ("idle (1 lane)", 1)):
        pairs = []
        for name in NOISE_TASKS:
            task = load_builtin(name).tasks[0]
            pairs += [(task, task.source + COPY + f"# copy {i}\n") for i in range(args.copies)]
        with VerifierPool(config, workers=workers) as pool:
            results = pool.verify_many(pairs, config)
        for name in NOISE_TASKS:
            got = [r for (t, _), r in zip(pairs, results, strict=True) if t.id.endswith(name)]
            spread = {}
            for m in ("device", "launch"):
                xs = [r.speedups[m]["speedup"] for r in got if m in r.speedups]
                spread[m] = (min(xs), max(xs), len(xs)) if xs else None
            rows.append({"pool": label, "task": name, "spread": spread})
            cells = [f"{s[0]:.3f}..{s[1]:.3f}" if s else "-" for s in spread.values()]
            timed = min((s[2] for s in spread.values() if s), default=0)
            print(f"| {label} | {name} | {timed} | {cells[0]} | {cells[1]} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench-timing", help="timing.py of a KernelBench checkout")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--skip-noise", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows: list = []
    part1(args, rows)
    if not args.skip_noise:
        part2(args, rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
