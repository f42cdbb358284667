"""GRPO step time with transformers' generate and with vLLM, through the product's own
commands on one GPU (the served arm: two), and the verifier's timing spread while the
vLLM run trains.

    python bench/grpo_step_time.py --model DIR --out OUT.json [--work DIR] [--steps 3]
        [--prompts 8] [--group 8] [--max-tokens 1024] [--sft-steps 16] [--bf16]
        [--config qwen-coder-1.5b-1gpu] [--generators off,on,overlap] [--probe-runs 12]
        [--idle-probe-runs 6] [-- --rl.generated_tasks 400 ...]

DIR is a model directory (`tritonrl convert-gguf qwen2.5-coder-0.5b --out DIR`). In
WORK (default: beside OUT), each step a `tritonrl` command with its log beside OUT:

Every command runs under `--config` (default the Qwen config, whose reward, verifier and
sampling settings the learning demo trains with; float32 unless `--bf16`), and the
overrides after `--` go to sft (`--sft.*`, `--data.*`) or rl (`--rl.*`, `--curriculum.*`,
`--verify.*`, `--sampling.*`), as the learning demo's do:

1. `tritonrl sft --run WORK/sft`: the config's SFT (the Qwen config's: the learning
   demo's SFT model), or with `--sft-steps N` N full-parameter float32 steps at lr 5e-5
   on the builtin suite and 200 generator tasks; kept and reused by a later call with
   the same WORK;
2. per generator (`off`: `--rl.vllm off`; `off_bf16`: that with the update under bf16
   autocast; `on`: `--rl.vllm on`; `overlap`: vLLM and `--rl.overlap_reward true`, each
   batch verified during the step before, the verifier's lanes at the default
   `rl.reward_nice`, the verifier a child process of the stage (`rl.reward_process`
   auto); `overlap_trainer`: that with the verifier in the trainer's process
   (`--rl.reward_process trainer`), as are the next five: `overlap_nice0`, with the lanes
   at the trainer's CPU priority; `overlap_lanes8`, with 8 reward lanes, leaving cores to
   the trainer; `overlap_bf16_trainer`, with the update under bf16 autocast;
   `overlap_bf16_lanes4`, that with 4 reward lanes (less verifier work at once beside
   it); `overlap_bf16_alone`, that with `--rl.update_gpu_alone true`; `overlap_bf16`:
   overlap with the update under bf16 autocast; `overlap_bf16_served`: overlap_bf16 with the
   verifier a `tritonrl serve` on the second visible GPU, verifying as the run's reward
   would (the config's `rl_verify` as `--verify.*`), the trainer on the first, through
   `--verify.endpoint`); `overlap_bf16_served_same`: that service on the trainer's own
   GPU (honest: the GPU gate's lock reaches across processes), so the verifier's trusted
   side (extraction, static checks, the reference's passes, comparisons) runs outside
   the trainer's process and its Python; `overlap_bf16_mps`: overlap_bf16_trainer with the
   trainer, its vLLM and the verifier's workers clients of one CUDA MPS server started
   for the run, so their kernels share the SMs instead of time slices;
   `overlap_bf16_child_mps`: overlap_bf16 so, its verifier's child one more client): a
   copy of that run and
   `tritonrl rl --algo grpo` for `--steps` optimizer steps of `--prompts` x `--group`
   completions (64 by default) of at most `--max-tokens` tokens, generated at
   once; each step's seconds come from the run's log_history.json, where the trainer writes them
   (`tritonrl.train.rl.grpo.StepClock`): `time/generate_s`, `time/reward_wait_s` (the
   verifier), `time/update_s` (log-probabilities, loss, backward, optimizer) and
   `time/step_s`, beside TRL's completion lengths;
3. a one-lane pool in this process verifies a copy of a reference
   (`learning_demo.timing_probe`; its true speedup is 1) `--idle-probe-runs` times with
   the GPU idle, then up to `--probe-runs` times while each vLLM run trains (0: none; from its
   first verified completion to its end): the spread of honest timing beside it.

The summary takes the mean over the steps between the first and the last (the first
holds warm-ups: the verifier's lanes start, kernels compile; with overlap it generates
two batches and the last none): per run the step, generation, reward-wait and update
seconds, generated tokens a second, the reward-wait share of a step, and where the wait
went (`verify/programs` verified a step, `verify/stage_s/<stage>` their seconds per
verifier stage summed over lanes: `performance` is the timing, `gpu_wait` the wait for
the GPU alone), and what the GPU gate cost the trainer (`time/gpu_wait_s`, its wait to
take its hold, inside the update's and the reward wait's seconds; the verifier's timing
windows `gpu/timing_windows`, `gpu/window_s`, `gpu/timing_held_s`); the speedup of a
step (the transformers run of the same precision, off or off_bf16, / each other run)
and of generation, and `same_prompts`: the share of steps whose tasks were the same
in the runs (the curriculum draws from one seed; what a step's answers earn can change
later draws). Results merge into OUT.json by generator, so the
runs can be split over calls (`--generators off`, then `--generators on` with the same
WORK and OUT); a run that fails is recorded with its log's tail and the next one runs.
Measures; asserts nothing.

On the workplace's H100 vLLM comes from bench/carry_vllm.sh (set
VLLM_USE_FLASHINFER_SAMPLER=0 there) and the model from bench/carry_model.sh.

What it does NOT do: train anything worth keeping (3 steps at rl.learning_rate 1e-6),
compare equal completions (each generator samples its own, so their lengths differ;
tokens a second is the fair figure), or time vLLM's start apart from the command's wall
time (`seconds`: loading, vLLM's profiling and CUDA graphs, the final save).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from learning_demo import run_logged, split_extra, spread, timing_probe, tritonrl  # noqa: E402

from tritonrl.verify.pool.gate import visible_gpus  # noqa: E402

TIMES = ("time/generate_s", "time/reward_wait_s", "time/update_s", "time/step_s")
KEPT = (*TIMES, "completions/mean_length", "completions/clipped_ratio", "reward", "step_time")
# where the reward's wait went: programs verified a step and their seconds per stage,
# summed over the pool's lanes (tritonrl.reward.adapters)
VERIFY = ("verify/programs", "verify/stage_s/")
# what the GPU gate cost the trainer a step: its wait to take its hold, the verifier's
# timing windows (tritonrl.train.rl.grpo.GpuHold)
GATE = ("time/gpu_wait_s", "gpu/")


def kept(key: str) -> bool:
    return key in KEPT or key.startswith(VERIFY + GATE)


def sft_args(model: Path, steps: int, device: str) -> list[str]:
    """The SFT start's overrides (the config's other settings stand)."""
    return [
        "--model.name_or_path", str(model), "--lora.enabled", "false",
        "--data.generated_tasks", "200", "--sft.device", device, "--sft.bf16", "false",
        "--sft.learning_rate", "5e-5", "--sft.max_steps", str(steps),
        "--sft.per_device_batch_size", "4", "--sft.gradient_accumulation", "1",
        "--sft.max_length", "2048", "--sft.save_steps", "100000", "--sft.eval_steps", "100000",
        "--sft.logging_steps", "4", "--run.report_to", "none",
    ]  # fmt: skip


OVERLAP = ["--rl.vllm", "on", "--rl.overlap_reward", "true"]  # the verifier a child (auto)
# the verifier in the trainer's process, as before rl.reward_process
TRAINER = [*OVERLAP, "--rl.reward_process", "trainer"]
GENERATORS = {
    "off": ["--rl.vllm", "off"],
    "off_bf16": ["--rl.vllm", "off", "--rl.bf16", "true"],  # the update under bf16 autocast
    "on": ["--rl.vllm", "on"],
    "overlap": OVERLAP,  # its reward lanes at the default rl.reward_nice (10)
    "overlap_trainer": TRAINER,
    "overlap_nice0": [*TRAINER, "--rl.reward_nice", "0"],  # the lanes share the cores evenly
    "overlap_lanes8": [*TRAINER, "--rl.reward_lanes", "8"],  # cores left to the trainer
    "overlap_bf16": [*OVERLAP, "--rl.bf16", "true"],
    "overlap_bf16_trainer": [*TRAINER, "--rl.bf16", "true"],
    # and 4 reward lanes: less of the verifier's GPU work at once beside the trainer
    "overlap_bf16_lanes4": [*TRAINER, "--rl.bf16", "true", "--rl.reward_lanes", "4"],
    # and the update with the GPU alone (the verifier's GPU work waits for it)
    "overlap_bf16_alone": [*TRAINER, "--rl.bf16", "true", "--rl.update_gpu_alone", "true"],
    # and the verifier a `tritonrl serve` on a GPU of its own (`served`)
    "overlap_bf16_served": [*OVERLAP, "--rl.bf16", "true"],
    # and that service on the trainer's GPU: the trusted side out of the trainer's process
    "overlap_bf16_served_same": [*OVERLAP, "--rl.bf16", "true"],
    # and every process of the run a client of one CUDA MPS server (`mps`)
    "overlap_bf16_mps": [*TRAINER, "--rl.bf16", "true"],
    # and that with the verifier a child of the stage, as overlap_bf16
    "overlap_bf16_child_mps": [*OVERLAP, "--rl.bf16", "true"],
}
SERVED = {"overlap_bf16_served": 1, "overlap_bf16_served_same": 0}  # the service's GPU
MPS = ("overlap_bf16_mps", "overlap_bf16_child_mps")
SERVE_START_S = 300.0  # the service's pool and first answer on a busy host


def baseline(generator: str) -> str:
    """The transformers run a generator's step is compared with: the same precision."""
    return "off_bf16" if "bf16" in generator else "off"


def rl_args(generator: str, args) -> list[str]:
    """GRPO's overrides: `--prompts` x `--group` completions a step, in micro-batches of
    a group; float32 unless `--bf16`; the generator's own (which win over those); then the
    rl overrides after `--`."""
    return [
        "--algo", "grpo", "--rl.bf16", str(args.bf16).lower(),
        "--rl.device", args.device,
        "--verify.device", args.device, "--rl.max_steps", str(args.steps),
        "--rl.num_generations", str(args.group), "--rl.per_device_batch_size", str(args.group),
        "--rl.gradient_accumulation", str(args.prompts),
        "--sampling.max_new_tokens", str(args.max_tokens), "--rl.learning_rate", "1e-6",
        "--rl.gradient_checkpointing", "false",
        "--rl.save_steps", "100000", "--rl.logging_steps", "1", "--run.report_to", "none",
        *GENERATORS[generator], *args.rl_extra,
    ]  # fmt: skip


def step_tasks(run: Path) -> dict[int, list[str]]:
    """{step: its tasks, sorted} from the run's completions.jsonl."""
    tasks: dict[int, set[str]] = {}
    for line in (run / "rl" / "completions.jsonl").read_text().splitlines():
        row = json.loads(line)
        tasks.setdefault(row["step"], set()).add(row["task"])
    return {step: sorted(ids) for step, ids in tasks.items()}


def steps_of(run: Path) -> list[dict]:
    history = json.loads((run / "rl" / "log_history.json").read_text())
    return [{"step": h["step"], **{k: v for k, v in h.items() if kept(k)}}
            for h in history if "time/step_s" in h]  # fmt: skip


def steady(steps: list[dict], completions: int) -> dict:
    """Means over the steps between the first and the last (all of them when there are
    fewer than three)."""
    rows = steps[1:-1] if len(steps) > 2 else steps
    if not rows:
        return {}
    keys = [k for k in rows[0] if kept(k) and all(k in r for r in rows)]
    mean = {k: round(statistics.mean(r[k] for r in rows), 3) for k in keys}
    if mean.get("time/generate_s") and "completions/mean_length" in mean:
        tokens = mean["completions/mean_length"] * completions
        mean["generated_tokens_per_s"] = round(tokens / mean["time/generate_s"], 1)
    mean["reward_wait_share"] = round(
        statistics.mean(r["time/reward_wait_s"] / r["time/step_s"] for r in rows), 3
    )
    return {"steps": [r["step"] for r in rows], **mean}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_verify(args) -> list[str]:
    """`--verify.KEY VALUE` for a `tritonrl serve` that verifies as the run's own reward
    would: the config's `rl_verify` (RL's reward scheme, wall clock, timing and CPU
    priority) under the rl overrides after `--`, where it differs from `verify`."""
    from tritonrl.config_loader import load_config

    config = load_config(args.config, args.rl_extra, cuda_available=args.device == "cuda")
    ours, theirs = config.rl_verify, config.verify
    out = ["--verify.device", args.device]
    for f in dataclasses.fields(ours):
        value = getattr(ours, f.name)
        if value != getattr(theirs, f.name) and f.name != "device":
            out += [f"--verify.{f.name}", str(value).lower() if isinstance(value, bool) else
                    str(value)]  # fmt: skip
    return out


@contextlib.contextmanager
def answering(cmd: list[str], env: dict, log_path: Path, health: str, wait_s: float):
    """`cmd` started in `env` with its output in `log_path`, yielded once `health` answers
    200 (within `wait_s`); stopped by SIGTERM (then SIGKILL after 60 s) on leaving."""
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd[2:5])} exited {proc.returncode}:\n"
                                   f"{log_path.read_text()[-2000:]}")  # fmt: skip
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(health, timeout=2) as answer,
            ):
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(cmd[2:5])} did not answer in {wait_s:.0f} s")
            time.sleep(1)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def served(args, log_path: Path, gpu: int = 1):
    """A `tritonrl serve` on visible GPU `gpu` (1: the second; 0: the trainer's own),
    verifying as the run's reward would; yields (its URL, the environment that gives the
    trainer's command the first GPU). Stopped by SIGTERM after."""
    gpus = visible_gpus()
    if len(gpus) <= gpu:
        raise RuntimeError(f"a verifier served on GPU {gpu} needs {gpu + 1} GPUs; this "
                           f"machine shows {gpus}")  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = tritonrl("serve", "--port", str(port), "--config", args.config, *served_verify(args))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[gpu]}
    with answering(cmd, env, log_path, f"{url}/health", SERVE_START_S):
        yield url, {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[0]}


@contextlib.contextmanager
def mps(log_path: Path):
    """A CUDA MPS control daemon of this run's own (its pipe and log folders in a fresh
    temporary folder, short enough for a socket's path, so no other process on the
    machine meets it); yields the environment that makes the trainer, its vLLM and the
    verifier's workers its clients: their kernels then share the GPU's SMs instead of
    taking turns in time slices. Told to quit after."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise RuntimeError("nvidia-cuda-mps-control is not on PATH: no CUDA MPS here")
    root = Path(tempfile.mkdtemp(prefix="mps-"))
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}  # fmt: skip
    for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        Path(env[key]).mkdir(parents=True)
    started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True)
    if started.returncode:
        raise RuntimeError(f"nvidia-cuda-mps-control -d exited {started.returncode}: "
                           f"{started.stdout}{started.stderr}")  # fmt: skip
    # The daemon serves the GPUs CUDA_VISIBLE_DEVICES names, and its clients see them
    # renumbered from 0: a client asking for GPU 1 of the machine asks for device 0.
    clients = dict(env)
    if env.get("CUDA_VISIBLE_DEVICES"):
        count = len(env["CUDA_VISIBLE_DEVICES"].split(","))
        clients["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(count)))
    try:
        yield clients
    finally:
        subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
        with open(log_path, "a") as log:
            for name in ("control.log", "server.log"):
                with contextlib.suppress(OSError):
                    log.write(f"== {name}\n" + (root / "log" / name).read_text()[-4000:])
        shutil.rmtree(root, ignore_errors=True)


def rl_run(generator: str, sft_run: Path, args, probe: bool) -> dict:
    """`tritonrl rl` on a copy of `sft_run` with the generator's overrides (a served one:
    beside its `tritonrl serve`; an MPS one: under its own MPS daemon); with `probe`, the
    timing probe runs in this process from its first verified completion to its end."""
    run = args.work / f"rl-{generator}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(sft_run, run)
    try:
        with contextlib.ExitStack() as stack:
            endpoint, env = [], None
            if generator in SERVED:
                log = args.logs / f"grpo_step_time_{generator}_serve.log"
                url, env = stack.enter_context(served(args, log, SERVED[generator]))
                endpoint = ["--verify.endpoint", url]
            if generator in MPS:
                env = stack.enter_context(mps(args.logs / f"grpo_step_time_{generator}_mps.log"))
            cmd = tritonrl("rl", "--run", str(run), *rl_args(generator, args), *endpoint)
            seconds, rows = trained(cmd, run, args, generator, probe, env)
        info = json.loads((run / "manifest.json").read_text())["stages"]["rl"]["info"]
        steps = steps_of(run)
        result = {"command": cmd[2:], "seconds": round(seconds, 1),
                  "generation": info.get("generation"), "per_step": steps,
                  "tasks": step_tasks(run),
                  "steady": steady(steps, args.prompts * args.group)}  # fmt: skip
        if probe:
            result["probe"] = {"rows": rows, "device": spread(rows, "device"),
                               "launch": spread(rows, "launch")}  # fmt: skip
        return result
    finally:  # the figures read (or the run failed), the run's weights go: a float32
        # 0.5B run's checkpoints (with the optimizer's state) and model are some 14 GB,
        # and three filled a 64 GB disk
        for weights in ("checkpoints", "final", "model"):
            shutil.rmtree(run / "rl" / weights, ignore_errors=True)


def trained(cmd: list[str], run: Path, args, generator: str, probe: bool, env=None):
    """(seconds, probe rows) of `cmd` (in `env`), the probe beside it once its first
    rewards are in."""
    training, stop, rows = threading.Event(), threading.Event(), []
    completions = run / "rl" / "completions.jsonl"

    def watch():  # set once the first rewards are in: training is under way
        while not stop.is_set():
            if completions.is_file() and completions.stat().st_size:
                training.set()
                return
            stop.wait(0.5)

    threads = [threading.Thread(target=watch, daemon=True)]
    if probe:
        threads.append(threading.Thread(
            target=lambda: rows.extend(timing_probe(args.probe_runs, training, stop)),
            daemon=True))  # fmt: skip
    for t in threads:
        t.start()
    try:
        seconds = run_logged(cmd, args.logs / f"grpo_step_time_{generator}.log", env=env)
    finally:
        training.clear()
        stop.set()
        for t in threads:
            t.join()
    return seconds, rows


def summary(report: dict) -> dict:
    runs = report.get("runs", {})
    shown = (*TIMES, "reward_wait_share", "generated_tokens_per_s", "verify/programs")
    out = {g: {k: v for k, v in r.get("steady", {}).items()
               if k in shown or k.startswith(VERIFY + GATE)}
           if "error" not in r else {"error": r["error"].splitlines()[0]}
           for g, r in runs.items()}  # fmt: skip
    for g in (g for g in GENERATORS if g != baseline(g)):
        off, other = (runs.get(k, {}).get("steady") for k in (baseline(g), g))
        if not (off and other):
            continue
        out.setdefault("speedup_step", {})[g] = round(off["time/step_s"] / other["time/step_s"], 2)
        out.setdefault("speedup_generate", {})[g] = round(
            off["time/generate_s"] / other["time/generate_s"], 2
        )
        a, b = runs[baseline(g)].get("tasks", {}), runs[g].get("tasks", {})
        shared = [k for k in a if k in b]
        if shared:
            out.setdefault("same_prompts", {})[g] = round(
                sum(a[k] == b[k] for k in shared) / len(shared), 2
            )
    return out


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="a model directory")
    ap.add_argument("--out", type=Path, required=True, help="the JSON report (merged into)")
    ap.add_argument("--work", type=Path, default=None, help="default: OUT's folder/work")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8, help="prompts an optimizer step")
    ap.add_argument("--group", type=int, default=8, help="completions a prompt")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--sft-steps", type=int, default=None,
                    help="SFT at lr 5e-5 for N steps (default: the config's own SFT)")  # fmt: skip
    ap.add_argument("--bf16", action="store_true", help="RL under bf16 autocast")
    ap.add_argument("--config", default="qwen-coder-1.5b-1gpu", help="every command's")
    ap.add_argument("--generators", default="off,on,overlap", help="which runs, in order")
    ap.add_argument("--probe-runs", type=int, default=12)
    ap.add_argument("--idle-probe-runs", type=int, default=6)
    ap.add_argument("--device", default="cuda", help="cpu: try the script (off only, no probe)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then overrides for sft and rl")
    args = ap.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    args.sft_extra, args.rl_extra = split_extra(extra)
    args.work = args.work or args.out.parent / "work"
    args.logs = args.out.parent
    args.generators = [g.strip() for g in args.generators.split(",") if g.strip()]
    if not set(args.generators) <= set(GENERATORS):
        ap.error(f"--generators takes a list of {', '.join(GENERATORS)}")
    if args.device != "cuda" and not all(g.startswith("off") for g in args.generators):
        ap.error("--device cpu runs --generators off or off_bf16 only (vLLM needs CUDA)")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    report.update(device=name, date=time.strftime("%Y-%m-%d"),
                  model=args.model.name, argv=sys.argv[1:],
                  settings={"steps": args.steps, "prompts": args.prompts, "group": args.group,
                            "max_tokens": args.max_tokens, "bf16": args.bf16,
                            "config": args.config, "extra": args.extra})  # fmt: skip
    sft_run = args.work / "sft"
    if not (sft_run / "sft" / "final").is_dir():
        shutil.rmtree(sft_run, ignore_errors=True)
        sft = (sft_args(args.model, args.sft_steps, args.device) if args.sft_steps else
               ["--model.name_or_path", str(args.model), "--sft.device", args.device,
                "--sft.save_steps", "100000", "--sft.eval_steps", "100000",
                "--run.report_to", "none"])  # fmt: skip
        cmd = tritonrl("sft", "--run", str(sft_run), "--config", args.config, *sft,
                       *args.sft_extra)  # fmt: skip
        seconds = run_logged(cmd, args.logs / "grpo_step_time_sft.log")
        report["sft"] = {"command": cmd[2:], "seconds": round(seconds, 1)}
    if args.idle_probe_runs and set(args.generators) - {"off", "off_bf16"}:
        rows = timing_probe(args.idle_probe_runs, None, threading.Event())
        report["probe_idle"] = {"rows": rows, "device": spread(rows, "device"),
                                "launch": spread(rows, "launch")}  # fmt: skip
    runs = report.setdefault("runs", {})
    for generator in args.generators:
        probe = args.probe_runs > 0 and not generator.startswith("off")
        try:
            runs[generator] = rl_run(generator, sft_run, args, probe=probe)
        except RuntimeError as e:  # the run failed (its log's tail): the next still run
            runs[generator] = {"error": str(e)[-2000:]}
        report["summary"] = summary(report)
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report["summary"], indent=1))
    shown = [("idle", report.get("probe_idle"))] + [
        (f"beside GRPO ({g})", runs[g].get("probe")) for g in runs
    ]
    for name, p in shown:
        if p:
            print(f"copy of the reference, {name}: device {p['device']}, launch {p['launch']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
