"""Does RL teach? SFT, then GRPO, then an evaluation on tasks neither stage saw, for each
model given, side by side on one GPU; and the verifier's timing spread idle and while
GRPO trains on the same GPU.

    python bench/learning_demo.py --out OUT [--model tiny] [--model smollm2=PATH.gguf|DIR]
        [--device cuda] [--generated 800] [--heldout-generated 36] [--rl-steps 12]
        [--save-steps 4] [--max-tokens 768] [--probe-runs 20] [--work DIR]

Per model it runs the product's own commands in a run directory: `tritonrl tiny-model`
(for `tiny`) or `tritonrl convert-gguf` (for a `.gguf`) to build the base, `tritonrl sft`
(full-parameter, on the builtin suite less the held-out tasks plus `--generated`
generator tasks of seeds from 0), then `tritonrl rl --algo grpo` (the verifier as reward
through its warm pool, a checkpoint every `--save-steps`). The held-out set is
`HELDOUT_BUILTIN` (builtin level-1 and level-2 tasks kept out of `data.tasks`) plus
generator tasks drawn from seed `HELDOUT_SEED` whose program (its name: the ops, in order)
no training task has. The base, the SFT model and each GRPO checkpoint answer every
held-out task once (greedy, `--max-tokens`), and each answer goes through a
`VerifierPool` on the device: verified-correct rate, compiled rate and mean `staged`
reward (the scheme RL trains on). Models run in parallel, each pinned to its share of
the CPU cores (its verifier pools size themselves from it).

Timing spread: the candidate is a copy of the reference (`class ModelNew(Model): pass`,
static checks and the funnel off as in bench/kernelbench_fullsize.py, so the timing phase
runs whatever the torch-only flags say) of `PROBE_TASK`, verified `--probe-runs` times
on a one-lane pool with the GPU idle, then again in a thread while the GRPO stages train
(`--probe-pause-s` apart, to spread them over the stage).

Writes into OUT: learning_demo.json (every figure, the commands, the per-step RL curve),
learning_demo.png (mean reward per GRPO step; held-out verified-correct rate at each
evaluated point), learning_demo.md (the tables) and each stage's log. Measures; asserts
nothing. On a CPU (`--device cpu`, for trying the script) there is no timing probe.

On the workplace's H100 (docs/benchmarks.md, "Learning demo"): the GGUF and the wheels the
image lacks go over with bench/carry_model.sh; copy src/ and bench/ to /tmp there and run from
the copy with PYTHONPATH=/tmp/site:/tmp/demo/src, under `setsid nohup` (a later call checks on
it): a folder ignored only through .git/info/exclude did not survive to the next call there.

What it does NOT do: no sampling at evaluation (one greedy answer per task: pass@1), no
timing of its own (speedups are the verifier's), and it does not tune anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("learning_demo")

HELDOUT_BUILTIN = [
    "level1/1_ReLU", "level1/2_Sigmoid", "level1/4_GELU", "level1/7_ELU",
    "level1/9_SiLU", "level1/11_Sum_Reduction", "level1/16_Softmax", "level1/19_RMSNorm",
    "level2/1_Gemm_Bias_ReLU", "level2/4_Gemm_Sigmoid_Scale", "level2/16_Mul_Add_ReLU_Sum",
    "level2/18_Swish_RowMax",
]  # fmt: skip
HELDOUT_SEED = 1_000_000  # the generator's seeds for held-out tasks (training: from 0)
PROBE_TASK = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n\n\n"
    "def get_inputs():\n    return [torch.randn(2048, 4096)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)
COPY_TAIL = "\n\nclass ModelNew(Model):\n    pass\n"


# --------------------------------------------------------------------------- tasks


def training_specs() -> list[str]:
    """`data.tasks` for SFT and RL: every builtin task but the held-out ones."""
    from tritonrl.tasks import load_builtin

    held = set(HELDOUT_BUILTIN)
    ids = [t.id.removeprefix("builtin:") for t in load_builtin("all").tasks]
    return [f"builtin:{i}" for i in ids if i not in held]


def heldout_tasks(n_generated: int, train_generated: int) -> list:
    """The held-out builtin tasks and `n_generated` generator tasks whose program no
    training generator task has."""
    from tritonrl.tasks import load_builtin
    from tritonrl.tasks.generator import generate_tasks

    seen = {t.name for t in generate_tasks(train_generated, seed=0)} if train_generated else set()
    novel = [t for t in generate_tasks(4 * n_generated + 20, seed=HELDOUT_SEED)
             if t.name not in seen][:n_generated]  # fmt: skip
    builtin = [load_builtin(spec).tasks[0] for spec in HELDOUT_BUILTIN]
    return builtin + novel


# --------------------------------------------------------------------------- stages


def tritonrl(*args: str) -> list[str]:
    return [sys.executable, "-m", "tritonrl", *args]


def run_logged(
    cmd: list[str], log_path: Path, cores: str | None, budget_s: float | None = None
) -> float:
    """Run `cmd` (pinned to `cores` when given) with its output in `log_path`; seconds.
    After `budget_s` it gets SIGTERM (a training stage then checkpoints and stops, exit
    143, which counts as done). Any other failure raises with the log's tail."""
    if cores:
        cmd = ["taskset", "-c", cores, *cmd]  # taskset execs: the pid is the command's
    started = time.monotonic()
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            log.info("%s: time budget of %.0f s spent: SIGTERM", log_path.stem, budget_s)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait()
            rc = 0 if rc == 128 + signal.SIGTERM else rc
    if rc:
        tail = log_path.read_text()[-1500:]
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {rc}:\n{tail}")
    return time.monotonic() - started


def build_base(name: str, source: str, work: Path, out: Path, cores: str | None) -> Path:
    """The base model's directory: the tiny model built, or a GGUF converted."""
    base = work / f"{name}-base"
    if (base / "config.json").is_file():
        return base
    if source == "tiny":
        cmd = tritonrl("tiny-model", "--out", str(base), "--overwrite")
    elif source.endswith(".gguf") or source == "smollm2":
        cmd = tritonrl("convert-gguf", source, "--out", str(base), "--overwrite")
    else:
        return Path(source)
    run_logged(cmd, out / f"{name}_base.log", cores)
    return base


def sft_args(name: str, base: Path, args) -> list[str]:
    small = name == "tiny"
    return [
        "--model.name_or_path", str(base), "--lora.enabled", "false",
        "--data.tasks", ",".join(training_specs()),
        "--data.generated_tasks", str(args.generated), "--data.validation_fraction", "0.02",
        "--data.include_example", "false",
        "--sft.device", args.device, "--sft.bf16", str(args.device == "cuda" and not small),
        "--sft.learning_rate", "1e-3" if small else "5e-5",
        "--sft.epochs", str(args.sft_epochs_tiny if small else args.sft_epochs),
        "--sft.per_device_batch_size", str(args.sft_batch), "--sft.max_length", "2048",
        "--sft.save_steps", "100000", "--sft.eval_steps", "100000", "--sft.logging_steps", "10",
        "--sft.max_steps", str(args.sft_max_steps),
        "--run.report_to", "none", "--run.keep_last", "50",
    ]  # fmt: skip


def rl_args(name: str, args) -> list[str]:
    small = name == "tiny"
    return [
        "--rl.device", args.device, "--verify.device", args.device,
        "--rl.max_steps", str(args.rl_steps), "--rl.save_steps", str(args.save_steps),
        "--rl.num_generations", str(args.group), "--rl.per_device_batch_size", str(args.rl_batch),
        "--rl.gradient_accumulation", str(args.rl_accum),
        "--rl.max_completion_length", str(args.max_tokens),
        "--rl.learning_rate", "1e-4" if small else args.rl_lr,
        "--rl.bf16", str(args.device == "cuda" and not small),
        "--rl.gradient_checkpointing", "false", "--rl.logging_steps", "1",
    ]  # fmt: skip


# --------------------------------------------------------------------------- evaluation


def load_for_eval(path: Path, tokenizer_path: Path, device: str):
    import torch

    from tritonrl.train.models import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = load_causal_lm(path, dtype=dtype).to(device).eval()
    return model, tokenizer


def generate(model, tokenizer, tasks: list, max_tokens: int, batch: int) -> tuple[list, dict]:
    """One greedy answer per task, and generation figures."""
    import torch

    from tritonrl.data.prompts import build_prompt

    prompts = [build_prompt(t.source, tokenizer, include_example=False) for t in tasks]
    texts, lengths, started = [], [], time.monotonic()
    for i in range(0, len(prompts), batch):
        enc = tokenizer(prompts[i : i + batch], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(model.device)  # fmt: skip
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        new = out[:, enc["input_ids"].shape[1] :]
        for row in new:
            keep = row[row != tokenizer.pad_token_id]
            lengths.append(len(keep))
            texts.append(tokenizer.decode(keep, skip_special_tokens=True))
    figures = {
        "generate_s": round(time.monotonic() - started, 1),
        "mean_tokens": round(statistics.mean(lengths), 1),
        "at_max_tokens": sum(n >= max_tokens for n in lengths) / len(lengths),
    }
    return texts, figures


def score(pool, tasks: list, texts: list[str], config) -> dict:
    """Verified-correct rate, compiled rate and mean staged reward of the answers."""
    from tritonrl.reward import reward_for

    started = time.monotonic()
    results = pool.verify_many(list(zip(tasks, texts, strict=True)), config)
    rewards = [reward_for(r, config) for r in results]
    correct = [r.correct and not r.cheated for r in results]

    def rate(flags, keep) -> float | None:
        chosen = [f for f, k in zip(flags, keep, strict=True) if k]
        return round(sum(chosen) / len(chosen), 4) if chosen else None

    generated = [t.id.startswith("generated:") for t in tasks]
    stages: dict[str, int] = {}
    for r in results:
        stages[r.stage] = stages.get(r.stage, 0) + 1
    return {
        "n": len(tasks),
        "correct": rate(correct, [True] * len(tasks)),
        "compiled": rate([r.compiled for r in results], [True] * len(tasks)),
        "mean_reward": round(statistics.mean(rewards), 4),
        "correct_generated": rate(correct, generated),
        "correct_builtin": rate(correct, [not g for g in generated]),
        "stages": stages,
        "correct_tasks": [t.id for t, c in zip(tasks, correct, strict=True) if c],
        "verify_s": round(time.monotonic() - started, 1),
    }


def eval_main(args) -> None:
    """The `--eval` mode (a subprocess of the demo): evaluate each model of the list."""
    from tritonrl.config import VerifyConfig
    from tritonrl.tasks import Task
    from tritonrl.verify.pool import VerifierPool

    spec = json.loads(Path(args.eval).read_text())
    tasks = [Task(**t) for t in spec["tasks"]]
    config = VerifyConfig(device=spec["device"], reward_scheme="staged")
    rows = []
    with VerifierPool(config) as pool:
        for label, path, tok in spec["models"]:
            model, tokenizer = load_for_eval(Path(path), Path(tok), spec["device"])
            texts, figures = generate(model, tokenizer, tasks, spec["max_tokens"], spec["batch"])
            del model
            row = {"label": label, "model": path, **figures, **score(pool, tasks, texts, config)}
            row["sample"] = texts[len(HELDOUT_BUILTIN)][:1200] if len(texts) > 12 else texts[0]
            rows.append(row)
            log.info("%s: correct %s compiled %s reward %s", label, row["correct"],
                     row["compiled"], row["mean_reward"])  # fmt: skip
            Path(spec["out"]).write_text(json.dumps(rows, indent=1))


def task_dicts(tasks: list) -> list[dict]:
    keys = ("id", "level", "name", "source", "origin")
    return [{k: getattr(t, k) for k in keys} for t in tasks]


def evaluate(name: str, label: str, models: list, ctx: dict, cores: str | None) -> list[dict]:
    """Evaluate `models` ([(label, model dir, tokenizer dir)]) in a subprocess."""
    out, work = ctx["out"], ctx["work"]
    spec_path = work / f"{name}_{label}_eval_spec.json"
    result_path = work / f"{name}_{label}_eval.json"
    spec = {"tasks": ctx["tasks"], "models": [[a, str(b), str(c)] for a, b, c in models],
            "device": ctx["device"], "max_tokens": ctx["max_tokens"], "batch": ctx["batch"],
            "out": str(result_path)}  # fmt: skip
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--eval", str(spec_path)]
    run_logged(cmd, out / f"{name}_eval_{label}.log", cores)
    return json.loads(result_path.read_text())


# --------------------------------------------------------------------------- the pipeline


def rl_curve(run: Path) -> list[dict]:
    """Per GRPO step: the mean reward and the batch's verified-correct rate (from the
    stage's log history, or the last checkpoint's when a time budget stopped it)."""
    path = run / "rl" / "log_history.json"
    if not path.is_file():
        found = checkpoints(run)
        if not found:
            return []
        state = json.loads((found[-1][1] / "trainer_state.json").read_text())
        path = run / "rl" / "log_history.from_checkpoint.json"
        path.write_text(json.dumps(state["log_history"]))
    keep = ("step", "reward", "verify/correct", "verify/compiled", "completions/mean_length",
            "completions/clipped_ratio", "curriculum/share")  # fmt: skip
    return [{k: h[k] for k in keep if k in h} for h in json.loads(path.read_text())
            if "reward" in h]  # fmt: skip


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    found = (run / "rl" / "checkpoints").glob("checkpoint-*")
    return sorted((int(p.name.split("-")[1]), p) for p in found if (p / "config.json").is_file())


def rl_points(run: Path, final: Path, most: int) -> list[tuple]:
    """What to evaluate after GRPO: up to `most` checkpoints spread over the run (the last
    always), and the final model when the stage finished."""
    found = checkpoints(run)
    if len(found) > most:
        keep = {round(i * (len(found) - 1) / (most - 1)) for i in range(most)}
        found = [c for i, c in enumerate(found) if i in keep]
    points = [(f"rl-{step}", path, final) for step, path in found]
    if (run / "rl" / "final" / "config.json").is_file():
        points.append(("rl-final", run / "rl" / "final", final))
    return points


def pipeline(name: str, base_job, ctx: dict, cores: str | None, rl_running) -> dict:
    """SFT, GRPO and their evaluations (and the base's) for one model; every figure in
    a dict. `base_job` is the Background building its base."""
    out, work, args = ctx["out"], ctx["work"], ctx["args"]
    result: dict = {"model": name, "cores": cores, "seconds": {}}
    t0 = time.monotonic()
    base = base_job.get()
    run = work / f"{name}-run"
    sft_cmd = tritonrl("sft", "--run", str(run), *sft_args(name, base, args))
    result["commands"] = {"sft": sft_cmd[2:]}
    base_eval = Background(evaluate, name, "base", [("base", base, base)], ctx, cores)
    result["seconds"]["sft"] = round(run_logged(sft_cmd, out / f"{name}_sft.log", cores), 1)
    final = run / "sft" / "final"
    sft_eval = Background(evaluate, name, "sft", [("sft", final, final)], ctx, cores)
    rl_cmd = tritonrl("rl", "--run", str(run), "--algo", "grpo", *rl_args(name, args))
    result["commands"]["rl"] = rl_cmd[2:]
    budget = args.rl_budget_s * (args.tiny_budget_share if name == "tiny" else 1.0)
    with rl_running:
        seconds = run_logged(rl_cmd, out / f"{name}_rl.log", cores, budget or None)
    result["seconds"]["rl"] = round(seconds, 1)
    result["rl_curve"] = rl_curve(run)
    points = rl_points(run, final, args.rl_evals)
    result["evals"] = base_eval.get() + sft_eval.get() + evaluate(name, "rl", points, ctx, cores)
    result["seconds"]["total"] = round(time.monotonic() - t0, 1)
    return result


class Background(threading.Thread):
    """`fn(*args)` in a thread; `get()` is its result, or raises its error."""

    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args, self.value, self.error = fn, args, None, None
        self.start()

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as e:  # noqa: BLE001 - handed to get()
            self.error = e

    def get(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


class RunningStages:
    """How many stages are running, and an event set while any is."""

    def __init__(self):
        self.n, self.lock, self.active, self.done = 0, threading.Lock(), threading.Event(), 0

    def __enter__(self):
        with self.lock:
            self.n += 1
            self.active.set()

    def __exit__(self, *exc):
        with self.lock:
            self.n -= 1
            self.done += 1
            if self.n == 0:
                self.active.clear()


# --------------------------------------------------------------------------- timing probe


def probe_pool():
    from tritonrl.config import VerifyConfig
    from tritonrl.verify.pool import VerifierPool

    config = VerifyConfig(device="cuda", static_checks=False, funnel=False,
                          skip_timing_on_failure=False, ref_time_cache="off")  # fmt: skip
    return VerifierPool(config, workers=1), config


def probe_once(pool, config, task) -> dict:
    r = pool.verify_many([(task, task.source + COPY_TAIL)], config)[0]
    return {k: round(v["speedup"], 4) for k, v in r.speedups.items()} | (
        {} if r.speedups else {"error": (r.error or "not timed")[:200]}
    )


def spread(rows: list[dict], key: str) -> dict | None:
    values = sorted(r[key] for r in rows if key in r)
    if len(values) < 2:
        return None
    q = statistics.quantiles(values, n=4)
    return {"n": len(values), "min": values[0], "median": statistics.median(values),
            "max": values[-1], "iqr": round(q[2] - q[0], 4)}  # fmt: skip


def timing_probe(
    runs: int, while_event: threading.Event | None, stop: threading.Event, pause_s: float = 0
) -> list:
    """`runs` copy-of-reference verifications, `pause_s` apart; with `while_event`, only
    while it is set (waiting for it first), stopping at `stop`."""
    from tritonrl.tasks import Task

    task = Task("probe:softmax_2048x4096", 1, "softmax", PROBE_TASK, "bench/learning_demo.py")
    pool, config = probe_pool()
    rows = []
    try:
        if while_event is not None:
            while not while_event.wait(1.0):
                if stop.is_set():
                    return rows
        while len(rows) < runs and not stop.is_set():
            if while_event is not None and not while_event.is_set():
                break
            rows.append({"t": round(time.time(), 1), **probe_once(pool, config, task)})
            if pause_s and len(rows) < runs:
                stop.wait(pause_s)
    finally:
        pool.close()
    return rows


# --------------------------------------------------------------------------- report


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for m in report["models"]:
        curve = m.get("rl_curve") or []
        if curve:
            left.plot([c["step"] for c in curve], [c["reward"] for c in curve], marker=".",
                      label=m["model"])  # fmt: skip
        evals = m.get("evals") or []
        last = (m.get("rl_curve") or [{"step": 0}])[-1]["step"]
        xs = [-2 if e["label"] == "base" else -1 if e["label"] == "sft" else
              (last if e["label"] == "rl-final" else int(e["label"][3:]))
              for e in evals]  # fmt: skip
        line = right.plot(xs, [100 * (e["correct"] or 0) for e in evals], marker="o",
                          label=f"{m['model']}: verified correct")  # fmt: skip
        right.plot(xs, [100 * (e["compiled"] or 0) for e in evals], marker="s", linestyle="--",
                   color=line[0].get_color(), label=f"{m['model']}: compiled")  # fmt: skip
    left.set(xlabel="GRPO step", ylabel="mean reward (staged)", title="GRPO: mean reward")
    right.set(xlabel="GRPO step (-2: base, -1: after SFT)", ylabel="% of held-out tasks",
              title="Held-out tasks (pass@1, greedy)", ylim=(-2, 100))  # fmt: skip
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(report: dict) -> str:
    lines = [
        "| model | point | verified correct | compiled | mean reward | generated / builtin |",
        "|---|---|---:|---:|---:|---|",
    ]
    for m in report["models"]:
        for e in m.get("evals") or []:
            lines.append(
                f"| {m['model']} | {e['label']} | {100 * e['correct']:.1f}% | "
                f"{100 * e['compiled']:.1f}% | {e['mean_reward']:.3f} | "
                f"{e['correct_generated']} / {e['correct_builtin']} |"
            )
        if m.get("error"):
            lines.append(f"| {m['model']} | error | {m['error'][:200]} | | | |")
    lines += ["", "| timing probe | n | min | median | max | IQR |"]
    lines += ["|---|---:|---:|---:|---:|---:|"]
    for phase in ("idle", "training"):
        for key in ("device", "launch"):
            s = (report.get("probe") or {}).get(f"{phase}_{key}")
            if s:
                lines.append(f"| {phase}, {key} | {s['n']} | {s['min']} | {s['median']} | "
                             f"{s['max']} | {s['iqr']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--work", default=None, help="runs and models (default OUT/work)")
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        help="NAME=SOURCE or tiny (SOURCE: tiny, a .gguf, smollm2, a directory)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--generated", type=int, default=800)
    ap.add_argument("--heldout-generated", type=int, default=36)
    ap.add_argument("--sft-epochs", type=int, default=2)
    ap.add_argument("--sft-epochs-tiny", type=int, default=3)
    ap.add_argument("--sft-max-steps", type=int, default=-1)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--rl-steps", type=int, default=12)
    ap.add_argument("--save-steps", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rl-batch", type=int, default=32)
    ap.add_argument("--rl-accum", type=int, default=2)
    ap.add_argument("--rl-lr", default="1e-5")
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument(
        "--rl-budget-s",
        type=float,
        default=0,
        help="SIGTERM the GRPO stage after this long (0: none)",
    )
    ap.add_argument(
        "--tiny-budget-share",
        type=float,
        default=1.0,
        help="the tiny model's share of --rl-budget-s",
    )
    ap.add_argument("--rl-evals", type=int, default=4, help="GRPO checkpoints evaluated")
    ap.add_argument("--probe-runs", type=int, default=20)
    ap.add_argument(
        "--probe-pause-s",
        type=float,
        default=0,
        help="pause between the verifications during GRPO, to spread them over it",
    )
    ap.add_argument(
        "--replot",
        action="store_true",
        help="only redraw OUT/learning_demo.png and .md from OUT's JSON",
    )
    ap.add_argument("--eval", help=argparse.SUPPRESS)  # internal: one evaluation subprocess
    return ap.parse_args(argv)


def core_split(n: int) -> list[str | None]:
    """Each model's share of this process's cores, as taskset lists."""
    cores = sorted(os.sched_getaffinity(0))
    if n < 2 or len(cores) < 2 * n:
        return [None] * n
    size = len(cores) // n
    return [",".join(map(str, cores[i * size : (i + 1) * size])) for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse(argv)
    if args.eval:
        eval_main(args)
        return 0
    out = Path(args.out).resolve()
    if args.replot:
        report = json.loads((out / "learning_demo.json").read_text())
        (out / "learning_demo.md").write_text(markdown(report))
        plot(report, out / "learning_demo.png")
        return 0
    work = Path(args.work).resolve() if args.work else out / "work"
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    models = [m.split("=", 1) if "=" in m else (m, m) for m in (args.model or ["tiny"])]
    tasks = heldout_tasks(args.heldout_generated, args.generated)
    ctx = {
        "out": out,
        "work": work,
        "args": args,
        "tasks": task_dicts(tasks),
        "device": args.device,
        "max_tokens": args.max_tokens,
        "batch": args.eval_batch,
    }
    report: dict = {"argv": sys.argv[1:], "device": device_name(args.device),
                    "heldout": [t.id for t in tasks], "models": [], "probe": {}}  # fmt: skip
    started = time.monotonic()
    cuda = args.device == "cuda"
    cores = core_split(len(models))
    # The bases are built (on the CPU) while the idle GPU times the probe.
    bases = [Background(build_base, name, source, work, out, c)
             for (name, source), c in zip(models, cores, strict=True)]  # fmt: skip
    if cuda and args.probe_runs:
        report["probe"]["idle"] = timing_probe(args.probe_runs, None, threading.Event())
    rl_running, stop = RunningStages(), threading.Event()
    probe = None
    if cuda and args.probe_runs:
        pause = args.probe_pause_s
        probe = Background(timing_probe, args.probe_runs, rl_running.active, stop, pause)
    threads = [
        Background(pipeline, name, base, ctx, c, rl_running)
        for (name, _), base, c in zip(models, bases, cores, strict=True)
    ]
    for (name, source), t in zip(models, threads, strict=True):
        try:
            report["models"].append({**t.get(), "source": source})
        except Exception as e:  # noqa: BLE001 - the other model's figures still count
            report["models"].append({"model": name, "source": source, "error": str(e)})
        log.info("%s done at %.0f s", name, time.monotonic() - started)
    stop.set()
    if probe is not None:
        report["probe"]["training"] = probe.get()
    for phase in ("idle", "training"):
        for key in ("device", "launch"):
            report["probe"][f"{phase}_{key}"] = spread(report["probe"].get(phase) or [], key)
    report["seconds"] = round(time.monotonic() - started, 1)
    (out / "learning_demo.json").write_text(json.dumps(report, indent=1))
    (out / "learning_demo.md").write_text(markdown(report))
    plot(report, out / "learning_demo.png")
    print(markdown(report))
    return 0


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"cpu, torch {torch.__version__}"


if __name__ == "__main__":
    sys.exit(main())
