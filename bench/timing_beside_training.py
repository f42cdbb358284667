"""The verifier's timing while GRPO trains in the same process, with and without the
trainer's hold on the GPU gate (`tritonrl.train.rl.grpo.GpuHold`). Needs CUDA.

    python3 bench/timing_beside_training.py [--runs 12] [--pause-s 2] [--out DIR]

A copy of the reference (a 2048x4096 softmax; its true speedup is 1) is verified
`--runs` times through a pool of this process, a probe thread beside a GRPO run of the
tiny model on the same GPU (the builtin tasks' prompts, the verifier as reward, 256-token
completions): first with the idle GPU, then while GRPO trains without the hold (gate
None, as before the hold existed), then with it (what `tritonrl rl` does). Prints and
writes `timing_beside_training.json`: each phase's speedups (device time, and time with
the launch inside) and their spread.

What it does NOT do: it trains nothing worth keeping (a from-scratch tiny model, random
prompts' rewards) and it does not measure other processes' GPU work.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from learning_demo import PROBE_TASK, probe_once, probe_pool, spread  # noqa: E402


def probe(runs: int, pause_s: float, start: threading.Event | None = None) -> list[dict]:
    from tritonrl.tasks import Task

    task = Task("probe:softmax_2048x4096", 1, "softmax", PROBE_TASK, "bench")
    pool, config = probe_pool()
    try:
        if start is not None:
            start.wait()
        rows = []
        for _ in range(runs):
            rows.append({"t": round(time.time(), 1), **probe_once(pool, config, task)})
            time.sleep(pause_s)
        return rows
    finally:
        pool.close()


def grpo(model_dir: Path, out: Path, hold: bool, started: threading.Event, stop: threading.Event):
    """GRPO steps of the tiny model until `stop` (checked at each step's end)."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from tritonrl.config_loader import load_config
    from tritonrl.data.prompts import build_messages
    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.tasks import load_builtin
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args, trainer_gate

    config = load_config(None, [
        "--rl.device", "cuda", "--rl.max_steps", "1000", "--sampling.max_new_tokens", "256",
        "--rl.num_generations", "4", "--rl.per_device_batch_size", "16",
        "--verify.device", "cuda", "--curriculum.enabled", "false", "--run.report_to", "[none]",
    ], cuda_available=True, stage="rl")  # fmt: skip
    tasks = load_builtin("all").tasks
    rows = [{"prompt": build_messages(t.source, include_example=False), "task_id": t.id}
            for t in tasks]  # fmt: skip

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            started.set()
            control.should_training_stop = stop.is_set()

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    gate = trainer_gate("cuda") if hold else None
    trainer = _trainer_class(config, None, [r["task_id"] for r in rows], gate)(
        model=model, reward_funcs=[make_trl_reward(tasks, config.verify, asynchronous=True)],
        args=trainer_args(config, out, "cuda"), train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer, callbacks=[Stop()],
    )  # fmt: skip
    trainer.train()
    return trainer.state.global_step


def phase(model_dir: Path, work: Path, hold: bool, runs: int, pause_s: float) -> dict:
    started, stop = threading.Event(), threading.Event()
    result: dict = {}

    def train():
        result["steps"] = grpo(model_dir, work / f"grpo-{hold}", hold, started, stop)

    trainer = threading.Thread(target=train)
    t0 = time.monotonic()
    trainer.start()
    rows = probe(runs, pause_s, started)
    stop.set()
    trainer.join()
    return {"rows": rows, "steps": result.get("steps"), "seconds": time.monotonic() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--pause-s", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    from tritonrl.models.tiny import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="tbt-"))
    model_dir = build_tiny_model(work / "tiny")
    report = {"idle": {"rows": probe(args.runs, args.pause_s)}}
    report["grpo_without_hold"] = phase(model_dir, work, False, args.runs, args.pause_s)
    report["grpo_with_hold"] = phase(model_dir, work, True, args.runs, args.pause_s)
    for name, p in report.items():
        p["device"] = spread(p["rows"], "device")
        p["launch"] = spread(p["rows"], "launch")
        print(f"{name}: device {p['device']}  launch {p['launch']}  steps {p.get('steps')}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timing_beside_training.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
