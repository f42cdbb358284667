"""What a worker pays before its first verdict on a GPU, step by step.

    python bench/worker_startup.py [--json OUT.json]

Runs plain subprocesses (no sandbox: this measures Triton and CUDA, not our guards),
each with its own Triton cache dir, and times in each: importing torch and triton,
creating the CUDA context, Triton's driver utilities, the first launch of a ReLU kernel
(the JIT compile: Triton's passes, ptxas, the launcher), a second launch with a new
specialisation (an odd length), and a call of the compiled kernel. Three processes:

  cold        an empty cache: what a pool job with a new candidate pays today
  warm_other  the cache the cold process left, a different kernel source: what is left
              when only the shared parts (driver utilities, launchers) are cached
  warm_same   the same kernel again: a compile-cache hit

It lists the files the cold process left in its cache, so a reader sees what each
compile built. Measures; asserts nothing. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), SCALE), mask=mask)
"""


def child(scale: str) -> None:
    """One process's steps, printed as a JSON line of seconds."""
    t, out = time.perf_counter(), {}

    def step(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        out[name] = round(now - t, 3)
        t = now

    import torch
    import triton

    step("import")
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    step("cuda_context")
    triton.runtime.driver.active.get_current_device()
    step("driver_utils")
    path = Path(os.environ["TRITON_CACHE_DIR"]).parent / f"k_{scale.replace('.', '_')}.py"
    path.write_text(KERNEL.replace("SCALE", scale))
    sys.path.insert(0, str(path.parent))
    relu = __import__(path.stem).relu
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    relu[(1024,)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    step("first_launch")
    relu[(1024,)](x, y, x.numel() - 1, BLOCK=1024)
    torch.cuda.synchronize()
    step("new_specialisation")
    relu[(1024,)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    step("compiled_call")
    print(json.dumps(out))


def run(cache: Path, scale: str) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", scale], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return {**json.loads(done.stdout.splitlines()[-1]),
            "process": round(time.perf_counter() - start, 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    root = Path(tempfile.mkdtemp(prefix="worker-startup-"))
    cache = root / "cache"
    rows = {"cold": run(cache, "0.0")}
    files = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
    rows["warm_other"] = run(cache, "0.5")
    rows["warm_same"] = run(cache, "0.5")
    steps = list(rows["cold"])
    print("| process | " + " | ".join(steps) + " |")
    print("|---|" + "---:|" * len(steps))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[s]:.3f}" for s in steps) + " |")
    print("\nfiles the cold process left in its cache:\n" + "\n".join(files))
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": rows, "cold_cache": files}, indent=1))


if __name__ == "__main__":
    main()
