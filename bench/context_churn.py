"""Does another process creating and tearing down a CUDA context disturb a timed kernel?

    python bench/context_churn.py [--procs 15] [--seconds 8] [--rounds 3] [--json OUT]

A pool's worker makes its CUDA context when it loads a candidate and tears it down as it
exits. This bench answers whether that must stay out of timing windows. `--procs` churn
processes, forked before this process touches CUDA, each fork children in a loop, as a
lane's zygote forks workers; per phase the children:

  quiet      are not forked
  contexts   make a context as a worker does (`torch.zeros(1, device="cuda")`) and exit
  kernels    the same, and run 0.5 ms of GPU work before exiting (the control: what a
             disturbance looks like to this probe)

Meanwhile this process times three kernels with CUDA events, each trial after a 256 MB
L2 flush: a ReLU over 4 M floats, a 1024-cube matmul and a 256 MB copy, for `--seconds`
per phase after the churn has run 2 s (the children of one phase are reaped before the
next begins). Phases rotate `--rounds` times. Printed per kernel and phase: the median,
the 90th percentile and the largest trial as ratios to the quiet median, and the share
of trials over 1.1 times it.
Measures; asserts nothing. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time

import torch

PHASES = ("quiet", "contexts", "kernels")


def churn(mode, counter) -> None:
    """A churn process: forks a child per loop while `mode` says so (1 contexts, 2 with
    kernels), stops at -1. CUDA is never initialised here, so forking is safe; the
    children get one hardware queue each, as the pool's workers do."""
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    while (m := mode.value) != -1:
        if m == 0:
            time.sleep(0.005)
            continue
        pid = os.fork()
        if pid == 0:
            torch.zeros(1, device="cuda")
            if m == 2:
                torch.cuda._sleep(1_000_000)  # about 0.5 ms of a busy SM
            torch.cuda.synchronize()
            os._exit(0)
        os.waitpid(pid, 0)
        with counter.get_lock():
            counter.value += 1


def kernels() -> dict:
    x = torch.randn(4 << 20, device="cuda")
    a, b = torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda")
    src = torch.randn(64 << 20, device="cuda")
    dst = torch.empty_like(src)
    return {
        "relu": lambda: torch.relu(x),
        "matmul": lambda: torch.mm(a, b),
        "copy_256MB": lambda: dst.copy_(src),
    }


def time_trials(fns: dict, seconds: float) -> dict[str, list[float]]:
    flush = torch.empty(64 << 20, device="cuda")
    out: dict[str, list[float]] = {name: [] for name in fns}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for name, fn in fns.items():
            flush.zero_()
            start.record()
            fn()
            end.record()
            end.synchronize()
            out[name].append(start.elapsed_time(end))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=15)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    ctx = mp.get_context("fork")
    mode, counter = ctx.Value("i", 0), ctx.Value("i", 0)
    procs = [ctx.Process(target=churn, args=(mode, counter)) for _ in range(args.procs)]
    for p in procs:
        p.start()
    fns = kernels()
    time_trials(fns, 0.5)  # warm-up
    times: dict[str, dict[str, list[float]]] = {ph: {n: [] for n in fns} for ph in PHASES}
    churned = dict.fromkeys(PHASES, 0)
    try:
        for _ in range(args.rounds):
            for i, phase in enumerate(PHASES):
                mode.value = i
                time.sleep(2.0)  # the churn under way
                before = counter.value
                for name, ts in time_trials(fns, args.seconds).items():
                    times[phase][name] += ts
                churned[phase] += counter.value - before
                mode.value = 0
                time.sleep(3.0)  # the phase's last children gone
    finally:
        mode.value = -1
        for p in procs:
            p.join(10)
    report = {"procs": args.procs, "children_per_phase": churned, "kernels": {}}
    print(f"{args.procs} churn processes; children that exited while timing: {churned}\n")
    print("| kernel | phase | median | p90 | max | over 1.1x | quiet median (us) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in fns:
        base = statistics.median(times["quiet"][name])
        rows = {}
        for phase in PHASES:
            ts = sorted(times[phase][name])
            row = {
                "median": statistics.median(ts) / base, "p90": ts[int(0.9 * len(ts))] / base,
                "max": ts[-1] / base, "over_1.1": sum(t > 1.1 * base for t in ts) / len(ts),
            }  # fmt: skip
            rows[phase] = row
            print(f"| {name} | {phase} | {row['median']:.3f} | {row['p90']:.3f} | "
                  f"{row['max']:.2f} | {row['over_1.1']:.1%} | {base * 1e3:.1f} |")  # fmt: skip
        report["kernels"][name] = {"quiet_median_ms": base, "phases": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
