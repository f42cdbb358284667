"""Training on 1, 2, 4 GPUs of a node: SFT tokens a second and GRPO completions a second,
with a GRPO step split into generation, reward and update, through `accelerate launch`
of the product's own commands and its shipped DDP config.

    python bench/scaling.py --model DIR --out OUT.json [--gpus 1,2] [--work DIR]
        [--sft-steps 20] [--rl-steps 4] [--prompts 8] [--group 8] [--max-tokens 1024]
        [--vllm on|off] [--stages sft,rl,overlap,server] [--device cuda|cpu]

DIR is a model directory (`tritonrl convert-gguf qwen2.5-coder-0.5b --out DIR`). The
batch is per GPU (weak scaling, as `accelerate launch` runs a stage): on N GPUs an SFT
step holds N times the sequences and a GRPO step N x `--prompts` x `--group`
completions, so the figures a second are what to compare. Each run sees the machine's
first N GPUs alone (CUDA_VISIBLE_DEVICES). For each N of `--gpus`:

1. `sft`: `accelerate launch --num_processes N -m tritonrl sft --run WORK/sft-N` for
   `--sft-steps` full-parameter float32 steps on the builtin suite and 200 generator
   tasks; tokens a second are the trainer's `num_tokens` (every rank's) over its
   `train_runtime` (first steps and the last save included: compare like with like).
2. `rl`: a copy of the first SFT run (the same start for every N), then `accelerate launch
   --num_processes N -m tritonrl rl --algo grpo` for `--rl-steps` steps, vLLM colocated
   on each rank with `--vllm on`; per step the trainer's own clock (`time/generate_s`,
   `time/reward_wait_s`, `time/update_s`, `time/step_s` in log_history.json), means over
   the steps after the first (it holds the warm-ups), and completions a second.
3. `overlap`: `rl` with each batch verified a step ahead on every rank
   (`--rl.overlap_reward true`; on CUDA the reward's verifier a child process of each
   rank); means over the steps between the first and the last (which generates none
   ahead).
4. `server` (N of 2 or more): the same GRPO run with TRL's server mode, `trl vllm-serve`
   of the SFT model on the last GPU and `accelerate launch --num_processes N-1 -m
   tritonrl rl --rl.vllm_mode server` on the others (each process sees only those:
   CUDA_VISIBLE_DEVICES), its completions a second against `rl` on N GPUs.

Every run takes `--config` (default the Qwen config: the learning demo's reward and
verifier settings). Each command's log lies beside OUT; results merge into OUT.json by
stage and N, so the runs can be split over calls. `--device cpu` tries the script on a
CPU machine (gloo, no vLLM; the figures mean nothing there). Measures; asserts nothing.

What it does NOT do: measure the verifier apart from a step (bench/verify_throughput.py
with CUDA_VISIBLE_DEVICES does), FSDP or DeepSpeed (pass `--accelerate-config zero2`
etc.), several nodes, or a vLLM server of several GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from grpo_step_time import TIMES, answering, free_port, sft_args  # noqa: E402
from grpo_step_time import rl_args as grpo_rl_args  # noqa: E402
from learning_demo import run_logged  # noqa: E402

ACCELERATE = Path(__file__).resolve().parents[1] / "src" / "tritonrl" / "configs" / "accelerate"


VLLM_START_S = 600.0  # vLLM's engine start-up: weights, profiling, CUDA graphs


def launch(n: int, stage: str, run: Path, args, *extra: str) -> list[str]:
    """`accelerate launch` of `tritonrl STAGE --run RUN` in `n` processes."""
    port = free_port()  # runs one after another may overlap a little
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(ACCELERATE / f"{args.accelerate_config}.yaml"), "--num_processes",
            str(n), "--main_process_port", str(port), "-m", "tritonrl", stage,
            "--run", str(run), *extra]  # fmt: skip


def history(run: Path, stage: str) -> list[dict]:
    return json.loads((run / stage / "log_history.json").read_text())


def sft_figures(run: Path) -> dict:
    rows = history(run, "sft")
    tokens = max((h["num_tokens"] for h in rows if "num_tokens" in h), default=None)
    runtime = next((h["train_runtime"] for h in rows if "train_runtime" in h), None)
    steps = max((h["step"] for h in rows), default=0)
    out = {"steps": steps, "tokens": tokens, "train_runtime_s": runtime}
    if tokens and runtime:
        out["tokens_per_s"] = round(tokens / runtime, 1)
    return out


def rl_figures(run: Path, completions_a_step: int, ahead: bool = False) -> dict:
    """Means over the steps after the first (which holds the warm-ups); verifying a step
    ahead (`ahead`), also before the last (which generates no batch ahead)."""
    rows = [h for h in history(run, "rl") if "time/step_s" in h]
    steady = (rows[1:-1] if ahead and len(rows) > 2 else rows[1:]) or rows
    if not steady:
        return {"steps": 0}
    mean = {k: round(statistics.mean(r[k] for r in steady), 3) for k in TIMES if k in steady[0]}
    return {
        "steps": [r["step"] for r in steady],
        "completions_a_step": completions_a_step,
        **mean,
        "completions_per_s": round(completions_a_step / mean["time/step_s"], 2),
        "reward_wait_share": round(mean["time/reward_wait_s"] / mean["time/step_s"], 3),
        "per_step": [{k: r.get(k) for k in ("step", *TIMES)} for r in rows],
    }


def rl_args(args) -> list[str]:
    """grpo_step_time's GRPO command line: float32, `--rl-steps` steps, `--vllm`."""
    same = argparse.Namespace(
        **{**vars(args), "steps": args.rl_steps, "bf16": False, "rl_extra": []}
    )
    return grpo_rl_args(args.vllm, same)


def measure(stage: str, n: int, args, report: dict) -> None:
    runs = report.setdefault(stage, {})
    log = args.logs / f"scaling_{stage}_{n}.log"
    if stage == "sft":
        run = args.work / f"sft-{n}"
        shutil.rmtree(run, ignore_errors=True)
        extra = sft_args(args.model, args.sft_steps, args.device)
        cmd = launch(n, "sft", run, args, "--config", args.config, *extra)
        seconds = run_logged(cmd, log, env=first(n, args))
        runs[str(n)] = {"command": cmd[2:], "seconds": round(seconds, 1), **sft_figures(run)}
        return
    start = args.work / f"sft-{min(args.gpus)}"
    if not (start / "sft" / "final").is_dir():
        raise SystemExit(f"no SFT start in {start}: run --stages sft first (same --work)")
    run = args.work / f"{stage}-{n}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(start, run)
    if stage in ("rl", "overlap"):
        ahead = ["--rl.overlap_reward", "true"] if stage == "overlap" else []
        cmd = launch(n, "rl", run, args, *rl_args(args), *ahead)
        seconds = run_logged(cmd, log, env=first(n, args))
    else:
        port = free_port()
        cmd = launch(n - 1, "rl", run, args, *rl_args(args), "--rl.vllm_mode", "server",
                     "--rl.vllm_server_port", str(port))  # fmt: skip
        seconds = served_vllm(cmd, run / "sft" / "final", n, port, log, args)
    completions = (n - (stage == "server")) * args.prompts * args.group
    figures = rl_figures(run, completions, ahead=stage == "overlap")
    runs[str(n)] = {"command": cmd[2:], "seconds": round(seconds, 1), **figures}
    for weights in ("final", "checkpoints"):  # 2 GB and more each: the disk is small
        shutil.rmtree(run / "rl" / weights, ignore_errors=True)


def served_vllm(cmd: list[str], model: Path, n: int, port: int, log: Path, args) -> float:
    """`cmd` (the trainer on GPUs 0..n-2) run beside `trl vllm-serve` of `model` on GPU
    n-1; the trainer's seconds."""
    serve = [sys.executable, "-m", "trl.scripts.vllm_serve", "--model", str(model),
             "--port", str(port), "--gpu_memory_utilization", "0.9"]  # fmt: skip
    alone = {**os.environ, "CUDA_VISIBLE_DEVICES": str(n - 1)}
    health = f"http://127.0.0.1:{port}/health"
    with answering(serve, alone, log.with_name(f"{log.stem}_vllm.log"), health, VLLM_START_S):
        return run_logged(cmd, log, env=first(n - 1, args))


def first(n: int, args) -> dict[str, str] | None:
    """The environment that shows a run the machine's first `n` GPUs alone: a run on
    fewer GPUs than the machine has must not verify on the others."""
    if args.device != "cuda":
        return None
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(n)))}


def summary(report: dict) -> dict:
    out = {}
    for stage, key in (
        ("sft", "tokens_per_s"),
        ("rl", "completions_per_s"),
        ("overlap", "completions_per_s"),
        ("server", "completions_per_s"),
    ):
        runs = report.get(stage, {})
        base = (runs.get("1") or {}).get(key)
        out[stage] = {n: {key: r.get(key), "vs 1 GPU": round(r[key] / base, 2)
                          if base and r.get(key) else None}
                      for n, r in sorted(runs.items(), key=lambda kv: int(kv[0]))}  # fmt: skip
    return out


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="a model directory")
    ap.add_argument("--out", type=Path, required=True, help="the JSON report (merged into)")
    ap.add_argument("--work", type=Path, default=None, help="default: OUT's folder/work")
    ap.add_argument("--gpus", default="1,2", help="process counts, e.g. 1,2,4")
    ap.add_argument("--stages", default="sft,rl", help="sft, rl, overlap, server: in that order")
    ap.add_argument("--sft-steps", type=int, default=20)
    ap.add_argument("--rl-steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=8, help="prompts a GPU a step")
    ap.add_argument("--group", type=int, default=8, help="completions a prompt")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--vllm", default="on", choices=("on", "off"))
    ap.add_argument("--accelerate-config", default="ddp", help="a shipped config's name")
    ap.add_argument("--config", default="qwen-coder-1.5b-1gpu",
                    help="the run's config (its reward and verify settings)")  # fmt: skip
    ap.add_argument("--device", default="cuda", help="cpu: try the script (gloo, no vLLM)")
    args = ap.parse_args(argv)
    args.work = args.work or args.out.parent / "work"
    args.logs = args.out.parent
    try:
        args.gpus = sorted({int(g) for g in args.gpus.split(",") if g.strip()})
    except ValueError:
        ap.error(f"--gpus {args.gpus!r}: process counts such as 1,2,4")
    if not args.gpus or min(args.gpus) < 1:
        ap.error("--gpus: at least one process count, each 1 or more")
    if not (args.model / "config.json").is_file():
        ap.error(f"--model {args.model}: no model directory there (config.json); make one "
                 "with `tritonrl convert-gguf qwen2.5-coder-0.5b --out DIR`")  # fmt: skip
    args.stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if not set(args.stages) <= {"sft", "rl", "overlap", "server"}:
        ap.error("--stages takes sft, rl, overlap and server, comma-separated")
    if "server" in args.stages and (args.vllm == "off" or args.device != "cuda"):
        ap.error("--stages server: vLLM's server mode needs --vllm on and CUDA")
    if args.device == "cpu" and args.vllm == "on":
        args.vllm = "off"  # vLLM needs CUDA
    if not (ACCELERATE / f"{args.accelerate_config}.yaml").is_file():
        ap.error(f"--accelerate-config {args.accelerate_config}: no such shipped config")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    cuda = args.device == "cuda"
    if cuda and torch.cuda.device_count() < max(args.gpus):
        raise SystemExit(f"--gpus {max(args.gpus)}: {torch.cuda.device_count()} GPUs here")
    report.update(device=torch.cuda.get_device_name(0) if cuda else "cpu",
                  gpus_on_machine=torch.cuda.device_count() if cuda else 0,
                  date=time.strftime("%Y-%m-%d"), model=args.model.name,
                  argv=sys.argv[1:])  # fmt: skip
    for stage in args.stages:
        for n in args.gpus:
            if stage == "server" and n < 2:
                continue  # a GPU for the server, one at least for the trainer
            measure(stage, n, args, report)
            report["summary"] = summary(report)
            args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report.get("summary", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
