"""CPU seconds per verified candidate: one lane, jobs one at a time, grouped by kind.

    python bench/verify_job_cpu.py [--device cuda] [--kinds wrong_op,correct]

Starts a one-lane pool, verifies a warm-up batch, then each kind's candidates from the
throughput bench's batch (bench/verify_throughput.py), and prints per job: the wall
time, the CPU seconds of the whole machine and of this (verifying) process, and the
stage times. Run it with OMP_NUM_THREADS=1 beside the default to see what idle OpenMP
threads cost. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

from verify_throughput import KINDS, TASKS, _cpu_now, build_batch  # bench/, beside this


def main() -> None:
    from tritonrl.config import VerifyConfig
    from tritonrl.verify.pool.pool import VerifierPool

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    by_kind: dict[str, list] = {}
    for task, kind, code in build_batch(8):
        by_kind.setdefault(kind, []).append((task, code))
    others = {f"builtin:{t}" for t in TASKS[-2:]}
    with VerifierPool(VerifyConfig(device=args.device), 1) as pool:
        pool.verify_many([(t, c) for t, _, c in build_batch(len(TASKS)) if t.id in others])
        for kind in args.kinds.split(","):
            pairs = by_kind[kind]
            before, start = _cpu_now(), time.perf_counter()
            results = pool.verify_many(pairs)
            wall = time.perf_counter() - start
            after, n = _cpu_now(), len(pairs)
            cpu = {k: (after[k] - before[k]) / n for k in after}
            stages: dict[str, float] = {}
            for r in results:
                for name, seconds in r.stage_times.items():
                    stages[name] = stages.get(name, 0.0) + seconds / n
            print(f"{kind}: {n} jobs; per job: wall {wall / n:.3f} s, machine CPU "
                  f"{cpu.get('machine_busy_s', float('nan')):.3f} s, verifying process CPU "
                  f"{cpu['trusted_s']:.3f} s; stages "
                  + ", ".join(f"{k} {v:.3f}" for k, v in stages.items()), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
