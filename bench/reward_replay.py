"""A GRPO run's reward batches verified again, without training: how long the reward keeps
a step waiting, and where a correct program's time goes, under variants of the timing.

    python3 bench/reward_replay.py RUN/rl/completions.jsonl --steps 5 10 15 \\
        --variant "run: --verify.trials 20 --verify.max_trials 60 --verify.target_rse 0.03" \\
        --variant "light: --verify.trials 10 --verify.max_trials 30 --verify.warmup 3" \\
        --out OUT

Each step's completions (the run's `completions.jsonl`: task id and text) go through the
reward's own path, `make_trl_reward(...).scorer.verify(jobs, same_program=True)`, on the
process-wide pool, with the config (`--config`, default qwen-coder-1.5b-1gpu) and each
variant's overrides resolved as `rl` resolves them (`Config.rl_verify`). One step is
verified first and not counted, so every variant meets a warm pool and cached reference
times, as a run does after its first step; then the variants take turns step by step, so
drift hits them alike. Per variant: the wall clock of each step's batch (what the trainer
waits for), the distinct programs and correct ones, and the median seconds per stage of
the correct ones (`VerifyResult.stage_times`: the timing's exclusive hold is
`performance`, its queue `gpu_wait`; `gate_wait` is the wait for the shared side, inside
`perf_prep`, `perf_check` and the correctness stages). Task ids are the run's: `builtin:...` and
`generated:sN[:lL]`. Writes OUT/reward_replay.json and .md. Measures; asserts nothing;
does not time training beside it (bench/timing_beside_training.py does).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from tritonrl.config_loader import load_config
from tritonrl.reward.adapters import make_trl_reward
from tritonrl.tasks import load_source
from tritonrl.tasks.generator import generate_task
from tritonrl.verify.pool.pool import close_shared_pools, program_key

GENERATED = re.compile(r"generated:s(\d+)(?::l(\d+))?$")
STAGES = ("correctness", "perf_prep", "gpu_wait", "performance", "perf_check", "gate_wait")


def task_for(task_id: str):
    """The task a run's completion names: a generated seed, else a loadable source spec."""
    m = GENERATED.match(task_id)
    if m:
        return generate_task(int(m[1]), int(m[2]) if m[2] else None)
    (task,) = load_source(task_id).tasks
    return task


def read_steps(path: Path) -> dict[int, list[tuple[str, str]]]:
    steps: dict[int, list[tuple[str, str]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        steps.setdefault(int(row["step"]), []).append((row["task"], row["completion"]))
    return steps


def replay(scorer, jobs) -> dict:
    """One batch through the reward's path: its wall clock and its verdicts' stages."""
    started = time.monotonic()
    results = scorer.verify(jobs, same_program=True)
    wall = time.monotonic() - started
    programs = {(t.id, program_key(c)) for t, c in jobs}
    correct = {(t.id, program_key(c)): r for (t, c), r in zip(jobs, results, strict=True)
               if r.correct}  # fmt: skip
    stages = {s: [r.stage_times.get(s, 0.0) for r in correct.values()] for s in STAGES}
    return {"wall_s": round(wall, 2), "completions": len(jobs), "programs": len(programs),
            "correct_programs": len(correct),
            "stage_median_s": {s: round(statistics.median(v), 3) for s, v in stages.items() if v},
            "stage_sum_s": {s: round(sum(v), 2) for s, v in stages.items()}}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("completions", type=Path)
    ap.add_argument("--steps", type=int, nargs="+", required=True)
    ap.add_argument("--warm-step", type=int, default=1, help="verified first, not counted")
    ap.add_argument("--variant", action="append", required=True,
                    help='"NAME: --section.key value ..." (as rl takes them)')  # fmt: skip
    ap.add_argument("--config", default="qwen-coder-1.5b-1gpu")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=None, help="the pool's lanes (default: rl's)")
    ap.add_argument("--out", type=Path, default=Path("out"))
    args = ap.parse_args()
    steps = read_steps(args.completions)
    tasks = {i: task_for(i) for rows in steps.values() for i, _ in rows}
    scorers = {}
    for spec in args.variant:
        name, _, overrides = spec.partition(":")
        config = load_config(args.config, overrides.split() + ["--verify.device", args.device],
                             cuda_available=args.device == "cuda", stage="rl")  # fmt: skip
        reward = make_trl_reward(tasks, config.rl_verify, workers=args.workers)
        scorers[name.strip()] = reward.scorer

    def jobs(step: int):
        return [(tasks[i], text) for i, text in steps[step]]

    first = next(iter(scorers.values()))
    argv = vars(args) | {"completions": str(args.completions), "out": str(args.out)}
    report: dict = {"argv": argv, "warm": replay(first, jobs(args.warm_step)),
                    "variants": {n: {} for n in scorers}}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for step in args.steps:
            for name, scorer in scorers.items():
                report["variants"][name][step] = r = replay(scorer, jobs(step))
                print(f"step {step} {name}: {r['wall_s']} s, {r['correct_programs']} correct of "
                      f"{r['programs']} programs, {r['stage_median_s']}", flush=True)  # fmt: skip
                (args.out / "reward_replay.json").write_text(json.dumps(report, indent=1))
    finally:
        close_shared_pools()
    (args.out / "reward_replay.md").write_text(markdown(report))
    print(markdown(report))


def markdown(report: dict) -> str:
    lines = ["| variant | step | wall s | programs | correct | performance s (median) "
             "| gpu_wait s | perf_check s | gate_wait s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, by_step in report["variants"].items():
        for step, r in by_step.items():
            m = r["stage_median_s"]
            lines.append(f"| {name} | {step} | {r['wall_s']} | {r['programs']} | "
                         f"{r['correct_programs']} | {m.get('performance', '-')} | "
                         f"{m.get('gpu_wait', '-')} | {m.get('perf_check', '-')} | "
                         f"{m.get('gate_wait', '-')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
