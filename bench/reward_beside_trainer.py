"""What the RL reward's verifier costs the trainer's own thread when it runs in the
trainer's process, against the same verifier as a `tritonrl serve` in a process of its own.

    python bench/reward_beside_trainer.py --out OUT.json [--candidates 24] [--rounds 3]
        [--lanes 2] [--device cpu]

A stand-in for the trainer's thread, a loop of small torch ops (dispatch-bound, as a small
model's update is while it launches its kernels), counts its iterations a second:

- `alone`: nothing else runs;
- `in_process`: beside `make_trl_reward(asynchronous=True)` verifying a batch through this
  process's pool, as `tritonrl rl` does by default (the pool's trusted side: extraction,
  static checks, the reference's passes, comparing outputs, in this process's threads);
- `served`: beside the same batch verified by a `tritonrl serve` subprocess through
  `verify.endpoint` (only a waiting HTTP client thread in this process).

The batch: `--candidates` distinct programs, builtin level-1 solutions each made a program
of its own (a module-level constant), every one correct. On Linux the loop's thread is
pinned to core 0 and everything else (this process's other threads, the lanes' workers,
the service) to the other cores, so the cores do not decide it: what is left is this
process's interpreter lock. Modes alternate for `--rounds` rounds; the report gives each
round and the medians. Measures; asserts nothing.

What it does NOT do: run a real trainer, or time anything on a GPU (`--device cuda` runs
the verifier there, the loop stays on the CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import torch

from tritonrl.config import VerifyConfig
from tritonrl.reward.adapters import make_trl_reward
from tritonrl.tasks.loaders import load_builtin

SERVE_START_S = 120.0


def batch(n: int):
    """(tasks, completions, task ids): n distinct correct programs over level 1's tasks."""
    tasks = [t for t in load_builtin("level1").tasks if t.solution][:6]
    completions, ids = [], []
    for i in range(n):
        t = tasks[i % len(tasks)]
        text = f"```python\n_variant = {i}\n{t.solution}```"
        completions.append([{"role": "assistant", "content": text}])
        ids.append(t.id)
    return tasks, completions, ids


def pin(cores: set[int]) -> None:
    """This thread (and what it starts) onto `cores`, where the OS allows it."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)


def spin(stop: threading.Event, out: list, core: int | None) -> None:
    """The trainer's stand-in: small torch ops until `stop`; iterations a second."""
    if core is not None:
        pin({core})
    x = torch.randn(32, 32)
    n, started = 0, time.perf_counter()
    while not stop.is_set():
        for _ in range(50):
            (x @ x).relu_().add_(1.0).mul_(0.5).sum()
        n += 50
    out.append(n / (time.perf_counter() - started))


def service(port: int, args, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tritonrl", "serve", "--port", str(port), "--workers",
           str(args.lanes), "--verify.device", args.device, "--verify.timing", "false"]  # fmt: skip
    with open(log, "w") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVE_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tritonrl serve exited {proc.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise RuntimeError(f"tritonrl serve did not answer in {SERVE_START_S:.0f} s")


def measure(reward, work, core: int | None, seconds: float = 0.0) -> dict:
    """The loop's rate beside `reward` verifying `work` (or alone for `seconds`)."""
    stop, out = threading.Event(), []
    loop = threading.Thread(target=spin, args=(stop, out, core))
    loop.start()
    started = time.perf_counter()
    correct = None
    if reward is None:
        time.sleep(seconds)
    else:
        completions, ids = work
        n = len(ids)
        rewards = asyncio.run(reward(prompts=[""] * n, completions=completions, task_id=ids))
        correct = sum(r > 0 for r in rewards)
    wall = time.perf_counter() - started
    stop.set()
    loop.join()
    return {"loop_it_per_s": round(out[0]), "wall_s": round(wall, 2), "correct": correct}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lanes", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--port", type=int, default=8799)
    args = ap.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    core = cores[0] if len(cores) > 1 else None
    if core is not None:
        pin(set(cores[1:]))
    tasks, completions, ids = batch(args.candidates)
    warm = (completions[:2], ids[:2])
    config = VerifyConfig(device=args.device, timing=False)
    local = make_trl_reward(tasks, config, workers=args.lanes, asynchronous=True)
    proc = service(args.port, args, args.out.with_suffix(".serve.log"))
    try:
        endpoint = VerifyConfig(device=args.device, timing=False,
                                endpoint=f"http://127.0.0.1:{args.port}")  # fmt: skip
        remote = make_trl_reward(tasks, endpoint, asynchronous=True)
        for reward in (local, remote):  # each verifier warm before anything is measured
            measure(reward, warm, core)
        rounds = []
        for _ in range(args.rounds):
            alone = measure(None, None, core, seconds=5.0)
            inside = measure(local, (completions, ids), core)
            served = measure(remote, (completions, ids), core)
            rounds.append({"alone": alone, "in_process": inside, "served": served})
    finally:
        proc.terminate()
        proc.wait()
    medians = {m: statistics.median(r[m]["loop_it_per_s"] for r in rounds)
               for m in ("alone", "in_process", "served")}  # fmt: skip
    report = {"device": args.device, "cores": len(cores), "loop_core": core,
              "candidates": args.candidates, "lanes": args.lanes, "rounds": rounds,
              "median_loop_it_per_s": medians,
              "loop_share_of_alone": {m: round(v / medians["alone"], 3)
                                      for m, v in medians.items()}}  # fmt: skip
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("median_loop_it_per_s", "loop_share_of_alone")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
