"""Does RL teach? A real model through base -> SFT -> GRPO, each point evaluated on tasks
no stage trained on, with the product's own commands; one GPU, one command.

    python bench/learning_demo.py --model qwen2.5-coder-1.5b --out OUT \
        [--kernelbench KB_CHECKOUT] [--config qwen-coder-1.5b-1gpu] [--samples 4]
        [--rl-budget-s 600 | --deadline-s 1260] [--rl-turns 3 --turns-rl-args "..." [--turns-only]]
        [--device cuda] [--work DIR]
        [-- --rl.learning_rate 1e-6 ...]

The model is a named offline model (`qwen2.5-coder-0.5b`, `qwen2.5-coder-1.5b`,
`smollm2`), a `.gguf`, a model directory, or `tiny` (the from-scratch model, for trying the
script on a CPU). Every stage is a `tritonrl` command run in OUT/work, its log in OUT:

1. `tritonrl convert-gguf MODEL --out work/base` (or `tiny-model`), once;
2. the held-out set written as a KernelBench-layout folder, work/heldout/level{1,2}/:
   the builtin tasks kept out of training (`builtin:heldout`, numbered from 201),
   `--heldout-generated` generator tasks from seed 1,000,000 whose program (the chain of
   ops, the task's name) no training generator task has (numbered from 301), and, given
   `--kernelbench`, a fixed systematic subset of that checkout's problems (level 1 every
   `--kb-every1`-th problem id from 1, level 2 every `--kb-every2`-th, numbers kept),
   and `--heldout-families` task-family tasks of held-out signatures (from 401);
3. `tritonrl sft --run work/run --config CONFIG` on the builtin suite less the held-out
   tasks plus the config's generator tasks (seeds from 0), or, with `--family-tasks N`,
   N training tasks of each strict task family instead (beside them with
   `--with-generated`); every training task equal to a
   held-out one (`tritonrl tasks decontaminate`'s forms, the held-out folder and
   `builtin:heldout`; `--decontaminate-form`, forward by default: the same op sequence
   in forward, which leaves out every sum along any dim where KernelBench's sum over a
   dim is held out; program: the same program) is left out unless `--no-decontaminate`,
   counted per family in the report, and so is every fresh
   task GRPO is given (`-- --rl.generated_tasks N`, from the generator or, with
   `--rl.fresh_source families`, the families' training split); its checkpoints are
   then removed (GRPO starts from sft/final) unless `--keep-sft-checkpoints`;
4. with `--filter-samples N`, `tritonrl eval` of the SFT model on the run's training
   tasks (`--tasks train:work/run`, N answers each, no timing), whose folder GRPO takes
   as `rl.pass_rates` (only tasks it solved sometimes but not always);
   `tritonrl rl --run work/run --algo grpo` (a checkpoint every `rl.save_steps`), stopped
   by SIGTERM after `--rl-budget-s` (it then checkpoints, which counts as done), or,
   with `--deadline-s`, when what is left of the deadline is what the GRPO evals will
   take (each as long as the SFT model's eval took, and a tenth more);
   With `--turns-eval T`, `tritonrl eval --turns T` (no timing) of the SFT model runs
   beside that (not with `--turns-rl-only`, when its figures come from an earlier run),
   and of the last GRPO point after its eval when the deadline leaves time (the GRPO
   budget then keeps half as much again as one eval for it);
   With `--rl-turns T` (and `--rl-budget-s`), single-turn against multi-turn GRPO at the
   same GPU budget on one GPU: after the single-turn arm and its evals, `tritonrl rl
   --rl.turns T` (plus `--turns-rl-args`) on a copy of the run made before GRPO (the
   same SFT model, work/run-turnsT, its log rl_turns.log) for the same budget; its
   points (`rlTt-STEP`) are evaluated as the others, and the last point of each arm
   also with `--turns T` (with `--turns-only`, with `--turns T` alone: its correct@1 is
   the one-answer figure without timing, and the evals take 40% less). The two arms
   may also run side by side, one GPU each: a plain demo, and one given `--rl.turns T`
   after `--`, both with `--turns-eval T --turns-only --rl-budget-s S`;
   With `--sft-only`, no GRPO: the SFT model's eval is the last point (two arms of one
   recipe side by side, this one and one with `--skip-sft-eval`, give both points in
   the time of one arm);
5. `tritonrl eval` of the base, the SFT model and up to `--rl-evals` GRPO checkpoints on
   the held-out folder (`--samples` answers a task, sampled as `sampling.*` says: the
   extra `--sampling.*` overrides go to rl and to every eval, `--eval-temperature`
   replaces the temperature for the evals), one folder each, then `tritonrl eval
   --compare` of them all.

Per point and per source (builtin, generated, families, KernelBench level 1 and 2) the
figures are read back from each eval's samples.jsonl with the product's own metrics
(`tritonrl.evaluate.metrics.summarize`): verified-correct, compiled, fast_1, pass@1,
pass@k and the mean reward. A one-lane pool times a copy of a reference (`PROBE_TASK`)
while the GPU is idle and again while GRPO trains, as the spread of honest timing.

Writes into OUT: learning_demo.json (every figure and command, the GRPO curve),
learning_demo.md (the tables), learning_demo.png (GRPO reward and batch correct rate per
step; held-out correct per source at each point), compare.json and each stage's log.
Arguments after `--` go to both `sft` and `rl` where they name their sections
(`--sft.*` to sft; `--rl.*`, `--curriculum.*` to rl). Measures; asserts nothing.

On a lent GPU machine `bench/device_demo.sh` sets it up, starts it and polls it (its
header says how). On a machine of two GPUs it runs two arms side by side, one a GPU, for
a comparison in one session (SFT on the generator's tasks and on `--family-tasks N`;
single-turn and multi-turn GRPO): `bash bench/device_demo.sh start --gpu 0 ARGS...`, then
`start --gpu 1 OTHER_ARGS...`; each arm sees its GPU alone, runs its own copy of the code
with its own MASTER_PORT (colocated vLLM's process group) and writes /tmp/demo-out-K, and
`poll` waits for both and brings each back as demo-K.tar.gz.

What it does NOT do: no tuning; no timing of its own (speedups are the verifier's); it
does not ship KernelBench's problems (point --kernelbench at your checkout).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from tritonrl.tasks.loaders import HELDOUT_BUILTIN  # the builtin tasks kept out of training

log = logging.getLogger("learning_demo")

HELDOUT_SEED = 1_000_000  # the generator's seeds for held-out tasks (training: from 0)
TURNS_COST = 1.5  # a --turns eval's seconds, in single-answer evals of the same model
BUILTIN_FROM, GENERATED_FROM, FAMILIES_FROM = 201, 301, 401  # held-out file numbers;
# below 201: KernelBench
PROBE_TASK = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n\n\n"
    "def get_inputs():\n    return [torch.randn(2048, 4096)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)
COPY_TAIL = "\n\nclass ModelNew(Model):\n    pass\n"
NAMED = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2")


# --------------------------------------------------------------------------- tasks


def training_specs(family_tasks: int = 0) -> list[str]:
    """`data.tasks` for SFT and RL: every builtin task but the held-out ones and, with
    `family_tasks`, that many training-split tasks of each strict task family."""
    from tritonrl.tasks import load_builtin

    held = set(HELDOUT_BUILTIN)
    ids = [t.id.removeprefix("builtin:") for t in load_builtin("all").tasks]
    specs = [f"builtin:{i}" for i in ids if i not in held]
    return specs + [f"fam:{name}:{family_tasks}:0:train" for name in strict_families()
                    if family_tasks]  # fmt: skip


def left_out(specs: list[str], against: list[str], form: str) -> dict:
    """For each family spec of `specs` (and the builtin tasks together): how many of its
    tasks SFT leaves out as equal to a task of `against` in `form`, of how many."""
    from tritonrl.tasks import load_tasks
    from tritonrl.tasks.decontaminate import find_matches, load_specs

    held = list(load_specs(against).tasks)
    groups: dict[str, list[str]] = {}
    for spec in specs:
        groups.setdefault(spec.split(":")[1] if spec.startswith("fam:") else "builtin", []).append(
            spec
        )
    counts = {"form": form}
    for name, group in groups.items():
        tasks = list(load_tasks(group).tasks)
        dropped = {m.task for m in find_matches(tasks, held, form=form)}
        counts[name] = [len(dropped), len(tasks)]
    return counts


def strict_families() -> list[str]:
    """The task families whose solutions are all Triton (the demo's policy is strict)."""
    from tritonrl.tasks import families

    return [name for name in families.FAMILIES if families.policy(name) == "strict"]


def source_of(task_id: str) -> str:
    """The held-out source a task of the held-out folder came from, by its number."""
    level, number = re.match(r".*level(\d)/(\d+)_", task_id).groups()
    n = int(number)
    if n >= FAMILIES_FROM:
        return "families"
    if n >= GENERATED_FROM:
        return "generated"
    return "builtin" if n >= BUILTIN_FROM else f"kernelbench_l{level}"


def write_heldout(folder: Path, n_generated: int, train: tuple[int, int], kb: Path | None,
                  every: tuple[int, int], n_families: int = 0) -> dict[str, list[str]]:  # fmt: skip
    """The held-out set as a KernelBench-layout folder; the file names by source."""
    from tritonrl.tasks import families, load_builtin
    from tritonrl.tasks.generator import generate_tasks

    if folder.exists():
        shutil.rmtree(folder)
    train_n, train_seed = train  # the training generator tasks: how many, from which seed
    seen = {t.name for t in generate_tasks(train_n, seed=train_seed)} if train_n else set()
    novel = [t for t in generate_tasks(4 * n_generated + 20, seed=HELDOUT_SEED)
             if t.name not in seen][:n_generated]  # fmt: skip
    builtin = [load_builtin(spec).tasks[0] for spec in HELDOUT_BUILTIN]
    files: dict[str, list[str]] = {"builtin": [], "generated": []}

    def put(task_source: str, level: int, number: int, name: str, key: str) -> None:
        path = folder / f"level{level}" / f"{number}_{re.sub(r'[^A-Za-z0-9]+', '_', name)}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(task_source)
        files.setdefault(key, []).append(f"level{level}/{path.name}")

    for i, t in enumerate(builtin):
        put(t.source, t.level, BUILTIN_FROM + i, t.name, "builtin")
    for i, t in enumerate(novel):
        put(t.source, t.level, GENERATED_FROM + i, t.name, "generated")
    held_families = families.draw(n_families, 0, "heldout", strict_families()) if n_families else []
    for i, t in enumerate(held_families):  # programs no family's training split has
        put(t.source, t.level, FAMILIES_FROM + i, t.name, "families")
    for level, step in zip((1, 2), every, strict=True):
        if kb is None or step <= 0:
            continue
        for path in sorted((kb / f"level{level}").glob("*_*.py")):
            number = int(path.name.split("_", 1)[0])
            if (number - 1) % step == 0:
                put(path.read_text(), level, number, path.stem.split("_", 1)[1],
                    f"kernelbench_l{level}")  # fmt: skip
    return files


# --------------------------------------------------------------------------- stages


def tritonrl(*args: str) -> list[str]:
    return [sys.executable, "-m", "tritonrl", *args]


def run_logged(cmd: list[str], log_path: Path, budget_s: float | None = None,
               env: dict[str, str] | None = None) -> float:  # fmt: skip
    """Run `cmd` (in `env`, else this process's) with its output in `log_path`; seconds.
    After `budget_s` it gets SIGTERM (a training stage then checkpoints and stops, exit
    143, which counts as done). Any other failure raises with the log's tail."""
    started = time.monotonic()
    log.info("%s", " ".join(cmd[2:8]))
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            rc = proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            log.info("%s: time budget of %.0f s spent: SIGTERM", log_path.stem, budget_s)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait()
            rc = 0 if rc == 128 + signal.SIGTERM else rc
    if rc:
        tail = log_path.read_text()[-2000:]
        raise RuntimeError(f"{' '.join(cmd[2:6])} ... exited {rc}:\n{tail}")
    return time.monotonic() - started


def build_base(source: str, work: Path, out: Path) -> Path:
    """The base model's directory: the tiny model built, or a GGUF converted."""
    base = work / "base"
    if (base / "config.json").is_file():
        return base
    if source == "tiny":
        cmd = tritonrl("tiny-model", "--out", str(base), "--overwrite")
    elif source in NAMED or source.endswith(".gguf"):
        cmd = tritonrl("convert-gguf", source, "--out", str(base), "--overwrite")
    else:
        return Path(source)
    run_logged(cmd, out / "base.log")
    return base


def split_extra(extra: list[str]) -> tuple[list[str], list[str]]:
    """The extra overrides for sft (`--sft.*`, `--data.*`, ...) and for rl (its sections)."""
    rl_sections = ("--sampling.", "--rl.", "--curriculum.", "--verify.")
    sft, rl, i = [], [], 0
    while i < len(extra):
        pair = extra[i : i + 2]
        (rl if pair[0].startswith(rl_sections) else sft).extend(pair)
        i += 2
    return sft, rl


def eval_extra(rl_extra: list[str], temperature: float | None) -> list[str]:
    """The `--sampling.*` pairs of the rl overrides, so every eval samples as RL did;
    with `temperature` (`--eval-temperature`), the evals sample at that one instead."""
    pairs = dict(zip(rl_extra[::2], rl_extra[1::2], strict=True))
    if temperature is not None:
        pairs["--sampling.temperature"] = str(temperature)
    return [
        a for key, value in pairs.items() if key.startswith("--sampling.") for a in (key, value)
    ]


def evaluate(label: str, model: Path, ctx: dict) -> Path:
    """`tritonrl eval` of `model` on the held-out folder; the eval folder."""
    a = ctx["args"]
    folder = ctx["work"] / "evals" / label
    cmd = tritonrl("eval", "--model", str(model), "--tasks", str(ctx["heldout"]),
                   "--samples", str(a.samples), "--out", str(folder), "--config", ctx["config"],
                   "--device", a.device, "--backend", a.eval_backend,
                   "--verify.device", a.device, *ctx["eval_extra"])  # fmt: skip
    ctx["commands"][f"eval_{label}"] = cmd[2:]
    log_path = ctx["out"] / f"eval_{label}.log"
    try:
        ctx["seconds"][f"eval_{label}"] = round(run_logged(cmd, log_path), 1)
    except RuntimeError as e:
        if a.eval_backend == "transformers":
            raise
        # vLLM may fail where transformers works (a build the image lacks): say so, go on.
        ctx["fallbacks"].append(f"eval {label}: {a.eval_backend} failed ({str(e)[-300:]})")
        log.warning("eval %s failed with --backend %s; again with transformers", label,
                    a.eval_backend)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
        cmd[cmd.index("--backend") + 1] = "transformers"
        ctx["commands"][f"eval_{label}"] = cmd[2:]
        ctx["seconds"][f"eval_{label}"] = round(run_logged(cmd, log_path), 1)
    return folder


def point(label: str, folder: Path, work: Path, samples: int) -> dict:
    """A point of the report: its label, eval folder (under `work`) and figures."""
    return {"label": label, "eval": str(folder.relative_to(work)),
            "figures": point_figures(folder, samples)}  # fmt: skip


def point_figures(folder: Path, samples: int) -> dict:
    """Overall and per-source metrics of one eval folder, from its samples.jsonl."""
    from tritonrl.evaluate.metrics import summarize

    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()
            if line.strip()]  # fmt: skip
    ks = [k for k in (1, 2, 4, 8) if k <= samples]
    groups = {"all": rows}
    for r in rows:
        groups.setdefault(source_of(r["task"]), []).append(r)
    figures = {}
    for name, group in groups.items():
        m = summarize(group, k_values=ks)["overall"]
        figures[name] = {
            "tasks": m["tasks"], "n": m["n"], "correct": m["correct"],
            "compiled": m["compiled"], "valid": m["valid"], "fast_1": m["fast_1"],
            **{f"pass@{k}": m.get(f"pass@{k}") for k in ks},
            "mean_reward": round(statistics.mean(r.get("reward") or 0.0 for r in group), 4),
            "truncated": sum(bool(r.get("truncated")) for r in group),
        }  # fmt: skip
    return figures


# --------------------------------------------------------------------------- GRPO


def pass_rates(run: Path, rl_extra: list[str], ctx: dict) -> Path:
    """`tritonrl eval` of the SFT model on the run's own training tasks (`train:RUN`),
    `--filter-samples` answers a task sampled as GRPO samples, correctness only (no
    timing): the folder `rl.pass_rates` reads."""
    a = ctx["args"]
    folder = ctx["work"] / "evals" / "passrates"
    cmd = tritonrl("eval", "--model", str(run / "sft" / "final"), "--tasks", f"train:{run}",
                   "--samples", str(a.filter_samples), "--out", str(folder), "--config",
                   ctx["config"], "--device", a.device, "--backend", a.eval_backend,
                   "--verify.device", a.device, "--verify.timing", "false",
                   *eval_extra(rl_extra, None))  # fmt: skip
    ctx["commands"]["pass_rates"] = cmd[2:]
    ctx["seconds"]["pass_rates"] = round(run_logged(cmd, ctx["out"] / "eval_passrates.log"), 1)
    return folder


def turns_eval(label: str, model: Path, ctx: dict) -> Path:
    """`tritonrl eval --turns T` (`--turns-eval`) of `model` on the held-out folder,
    correctness only (no timing: it may run beside other evals); its folder."""
    a = ctx["args"]
    folder = ctx["work"] / "evals" / f"{label}-turns{a.turns_eval}"
    cmd = tritonrl("eval", "--model", str(model), "--tasks", str(ctx["heldout"]),
                   "--samples", str(a.samples), "--turns", str(a.turns_eval), "--out",
                   str(folder), "--config", ctx["config"], "--device", a.device, "--backend",
                   a.eval_backend, "--verify.device", a.device, "--verify.timing", "false",
                   *ctx["eval_extra"])  # fmt: skip
    ctx["commands"][f"eval_{label}_turns"] = cmd[2:]
    seconds = run_logged(cmd, ctx["out"] / f"eval_{label}_turns.log")
    ctx["seconds"][f"eval_{label}_turns"] = round(seconds, 1)
    return folder


def turn_figures(folder: Path, turns: int) -> dict:
    """correct@turn, how many conversations answered at each turn and the share of those
    answers repeating an earlier kernel, overall and per source, from a multi-turn eval's
    samples.jsonl (`tritonrl.evaluate.metrics`)."""
    from tritonrl.evaluate.metrics import turn_metrics

    convs: dict[tuple[str, int], list[dict]] = {}
    for line in (folder / "samples.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            convs.setdefault((r["task"], r["sample"]), []).append(r)
    groups: dict[str, list] = {"all": list(convs.values())}
    for (task, _), conv in convs.items():
        groups.setdefault(source_of(task), []).append(conv)
    return {name: {t: {"correct": round(m["correct"], 4), "answered": m["answered"],
                       "repeated": m.get("repeated")}
                   for t, m in turn_metrics(group, turns).items()}
            for name, group in groups.items()}  # fmt: skip


def stage_info(run: Path, stage: str) -> dict:
    from tritonrl.runs import Run

    return Run.open(run, readonly=True).stages.get(stage, {}).get("info") or {}


def rl_curve(run: Path) -> list[dict]:
    """Per GRPO step: mean reward, the batch's verified-correct rate, the share of groups
    with one reward, the step's time split (from the stage's log history, or the last
    checkpoint's when stopped) and, from completions.jsonl, how many correct answers
    earned no reward (a sandbox limit, such as the wall clock in the timing phase)."""
    path = run / "rl" / "log_history.json"
    history = json.loads(path.read_text()) if path.is_file() else None
    if history is None:
        found = checkpoints(run)
        if not found:
            return []
        history = json.loads((found[-1][1] / "trainer_state.json").read_text())["log_history"]
    keep = ("step", "reward", "reward_std", "verify/correct", "verify/compiled",
            "completions/mean_length", "completions/clipped_ratio", "curriculum/level2_share",
            "curriculum/retired", "curriculum/unseen_level1_correct",
            "curriculum/unseen_level2_correct", "entropy", "frac_reward_zero_std",
            "time/generate_s",
            "time/reward_wait_s", "time/step_s", "step_time")  # fmt: skip
    unpaid: dict[int, int] = {}
    completions = run / "rl" / "completions.jsonl"
    if completions.is_file():
        for line in completions.read_text().splitlines():
            row = json.loads(line)
            if row.get("correct") and not row.get("reward"):
                unpaid[row["step"]] = unpaid.get(row["step"], 0) + 1
    curve = [{k: h[k] for k in keep if k in h} for h in history if "reward" in h]
    for c in curve:
        c["correct_unpaid"] = unpaid.get(c["step"], 0)
    return curve


def unseen_curve(run: Path, every: int = 5) -> list[dict]:
    """Per `every` GRPO steps, by level (1, and 2 for 2+): answers to tasks no earlier
    step drew and how many were correct (completions.jsonl; the curriculum's
    `unseen_level*_correct`, pooled so that a point holds more than a task or two)."""
    path = run / "rl" / "completions.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first: dict[str, int] = {}
    for row in rows:
        first.setdefault(row["task"], row["step"])
    points: dict[int, dict] = {}
    for row in rows:
        if row["step"] != first[row["task"]]:
            continue
        start = (row["step"] - 1) // every * every + 1
        point = points.setdefault(start, {"steps": f"{start}-{start + every - 1}"})
        counts = point.setdefault(f"level{min(2, row.get('level', 1))}", [0, 0])
        counts[0] += bool(row.get("correct"))
        counts[1] += 1
    return [points[k] for k in sorted(points)]


def rl_budget(ctx: dict) -> float | None:
    """GRPO's seconds: `--rl-budget-s`, or what `--deadline-s` leaves after the GRPO
    evals to come (none: no limit)."""
    a = ctx["args"]
    if not a.deadline_s:
        return a.rl_budget_s or None
    one_eval = ctx["seconds"].get("eval_sft", a.eval_estimate_s)
    evals = 1.1 * one_eval * max(1, a.rl_evals) + 30
    if a.turns_eval and a.turns_rl_only:  # the last point's --turns eval, after its eval
        evals += TURNS_COST * one_eval
    left = a.deadline_s - (time.monotonic() - ctx["started"]) - evals
    log.info("GRPO budget: %.0f s (%.0f s to the deadline, %.0f s for its evals)",
             left, left + evals, evals)  # fmt: skip
    return max(120.0, left)


def grpo(cmd: list[str], run: Path, ctx: dict, name: str = "rl") -> float:
    """The GRPO stage within the time budget; seconds (its log OUT/NAME.log). When it
    fails before its first checkpoint with vLLM generating, it runs again with
    transformers' generate (said in the report): a demo that still measures learning
    beats none."""
    log_path = ctx["out"] / f"{name}.log"
    budget = rl_budget(ctx)
    ctx["seconds"]["rl_budget"] = budget
    started = time.monotonic()
    try:
        return run_logged(cmd, log_path, budget)
    except RuntimeError as e:
        if checkpoints(run) or "--rl.vllm" in cmd:
            raise
        ctx["fallbacks"].append(f"{name}: failed with vLLM generating ({str(e)[-300:]})")
        log.warning("GRPO failed; again with --rl.vllm off")
        shutil.copy(log_path, ctx["out"] / f"{name}_vllm_failed.log")
        cmd += ["--rl.vllm", "off"]
        ctx["commands"][name] = cmd[2:]
        return run_logged(cmd, log_path, budget and max(60.0, budget - time.monotonic() + started))


def prune_checkpoints(folder: Path) -> None:
    """Remove a finished SFT stage's checkpoints: GRPO starts from sft/final, and a
    1.5B's two checkpoints with their optimizer states take 40 GB, which four arms on
    one machine's disk (and a multi-turn arm's copy of the run) cannot spare."""
    if folder.is_dir():
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        shutil.rmtree(folder)
        log.info("SFT checkpoints removed (%.1f GB; --keep-sft-checkpoints keeps them)",
                 size / 1e9)  # fmt: skip


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    found = (run / "rl" / "checkpoints").glob("checkpoint-*")
    return sorted((int(p.name.split("-")[1]), p) for p in found if (p / "config.json").is_file())


def rl_points(run: Path, most: int, prefix: str = "rl") -> list[tuple[str, Path]]:
    """What to evaluate after GRPO: up to `most` checkpoints spread over the run (the
    last always), or the final model when the stage finished; labelled PREFIX-STEP."""
    found = checkpoints(run)
    if len(found) > most:
        keep = {round(i * (len(found) - 1) / (most - 1)) for i in range(most)} if most > 1 else {
            len(found) - 1}  # fmt: skip
        found = [c for i, c in enumerate(found) if i in keep]
    points = [(f"{prefix}-{step}", path) for step, path in found]
    final = run / "rl" / "final"
    if (final / "config.json").is_file() and not points:
        points.append((f"{prefix}-final", final))
    return points


# --------------------------------------------------------------------------- timing probe


def probe_pool():
    """A one-lane CUDA pool that times whatever the candidate is (no static checks, no
    funnel), and its config."""
    from tritonrl.config import VerifyConfig
    from tritonrl.verify.pool.pool import VerifierPool

    config = VerifyConfig(device="cuda", static_checks=False, funnel=False,
                          skip_timing_on_failure=False, ref_time_cache="off")  # fmt: skip
    return VerifierPool(config, workers=1), config


def probe_once(pool, config, task) -> dict:
    """One copy-of-reference verification: its speedups (device, launch), and whether
    its timing shared the GPU (`shared_gpu`: it waited past the gate's drain)."""
    r = pool.verify_many([(task, task.source + COPY_TAIL)], config)[0]
    row = {k: round(v["speedup"], 4) for k, v in r.speedups.items()}
    if not row:
        return {"error": (r.error or "not timed")[:200]}
    return row | ({"shared_gpu": True} if (r.timing or {}).get("shared_gpu") else {})


def timing_probe(runs: int, while_event: threading.Event | None, stop: threading.Event,
                 pause_s: float = 0.0) -> list[dict]:  # fmt: skip
    """`runs` copy-of-reference verifications on a one-lane CUDA pool, `pause_s` apart;
    with `while_event`, only while it is set (waiting for it first), until `stop`."""
    from tritonrl.tasks import Task

    task = Task("probe:softmax_2048x4096", 1, "softmax", PROBE_TASK, "bench/learning_demo.py")
    pool, config = probe_pool()
    rows: list[dict] = []
    try:
        if while_event is not None:
            while not while_event.wait(1.0):
                if stop.is_set():
                    return rows
        while len(rows) < runs and not stop.is_set():
            if while_event is not None and not while_event.is_set():
                break
            rows.append({"t": round(time.time(), 1), **probe_once(pool, config, task)})
            if pause_s:
                stop.wait(pause_s)
    finally:
        pool.close()
    return rows


def spread(rows: list[dict], key: str) -> dict | None:
    values = sorted(r[key] for r in rows if key in r)
    if len(values) < 2:
        return None
    q = statistics.quantiles(values, n=4)
    return {"n": len(values), "min": values[0], "median": statistics.median(values),
            "max": values[-1], "iqr": round(q[2] - q[0], 4)}  # fmt: skip


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


# --------------------------------------------------------------------------- report


SOURCES = ("all", "generated", "families", "builtin", "kernelbench_l1", "kernelbench_l2")


def markdown(report: dict) -> str:
    k = report["samples"]
    lines = [f"| point | source | tasks | correct | compiled | fast_1 | pass@1 | pass@{k} | "
             "mean reward |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for p in report["points"]:
        for s in SOURCES:
            f = p["figures"].get(s)
            if f is None:
                continue
            cells = [_pct(f["correct"]), _pct(f["compiled"]), _pct(f["fast_1"]),
                     _pct(f.get("pass@1")), _pct(f.get(f"pass@{k}"))]  # fmt: skip
            lines.append(f"| {p['label']} | {s} | {f['tasks']} | " + " | ".join(cells)
                         + f" | {f['mean_reward']:.3f} |")  # fmt: skip
    gone = report.get("left_out")
    if gone:
        names = [n for n in gone if n != "form"]
        lines += ["", f"| SFT tasks left out as equal to a held-out task ({gone['form']} form) | "
                  + " | ".join(names) + " |", "|---|" + "---:|" * len(names),
                  "| left out, of all | " + " | ".join(f"{gone[n][0]} of {gone[n][1]}"
                                                      for n in names) + " |"]  # fmt: skip
    for label, by_source in (report.get("turns") or {}).items():
        turns = sorted(by_source["all"], key=int)
        lines += ["", f"| {label}, eval --turns {turns[-1]} (no timing) | "
                  + " | ".join(f"correct@{t}" for t in turns) + " |",
                  "|---|" + "---:|" * len(turns)]  # fmt: skip
        for source in SOURCES:
            if source in by_source:
                lines.append(f"| {source} | " + " | ".join(
                    _pct(by_source[source][t]["correct"]) for t in turns) + " |")  # fmt: skip
        lines.append("| all: answers repeating an earlier kernel | - | " + " | ".join(
            _pct(by_source["all"][t].get("repeated")) for t in turns[1:]) + " |")  # fmt: skip
    f = report.get("pass_rate_filter")
    if f:
        fresh = f.get("fresh", 0)
        lines += [
            "",
            f"GRPO's tasks: {f['kept']}, of them {f['kept'] - fresh} of the {f['tasks']} "
            f"training tasks, those the SFT model solved sometimes ({f['below_min']} "
            f"never, {f['above_max']} always)"
            + (f", and {fresh} fresh tasks (`rl.generated_tasks`)." if fresh else "."),
        ]
    for key, name in (("rl_curve", "GRPO"), ("rl_curve_turns", "multi-turn GRPO")):
        lines += _curve_lines(report.get(key) or [], name)
    unseen = report.get("unseen") or []
    if unseen:
        lines += ["", "Answers to tasks no earlier GRPO step drew (sampled before any training "
                  "on them), correct of all:", "", "| GRPO steps | level 1 | level 2+ |",
                  "|---|---:|---:|"]  # fmt: skip
        for u in unseen:
            cells = [f"{u[k][0]}/{u[k][1]} ({_pct(u[k][0] / u[k][1])})" if k in u else "-"
                     for k in ("level1", "level2")]  # fmt: skip
            lines.append(f"| {u['steps']} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "| timing probe | n | min | median | max | IQR |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for phase in ("idle", "training"):
        for key in ("device", "launch"):
            s = (report.get("probe") or {}).get(f"{phase}_{key}")
            if s:
                lines.append(f"| {phase}, {key} | {s['n']} | {s['min']} | {s['median']} | "
                             f"{s['max']} | {s['iqr']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _curve_lines(curve: list[dict], name: str) -> list[str]:
    """The table of a GRPO run's steps (`rl_curve`)."""
    if not curve:
        return []
    lines = ["", f"| {name} step | mean reward | batch correct | compiled | clipped | "
             "groups with one reward | entropy | tasks retired | correct, paid 0 | "
             "reward wait s | step s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for c in curve:
        lines.append(f"| {c['step']} | {c['reward']:.3f} | {_pct(c.get('verify/correct'))} | "
                     f"{_pct(c.get('verify/compiled'))} | "
                     f"{_pct(c.get('completions/clipped_ratio'))} | "
                     f"{_pct(c.get('frac_reward_zero_std'))} | "
                     f"{_num(c.get('entropy'))} | {_num(c.get('curriculum/retired'), 0)} | "
                     f"{c.get('correct_unpaid', '-')} | "
                     f"{c.get('time/reward_wait_s', '-')} | "
                     f"{c.get('time/step_s', c.get('step_time', '-'))} |")  # fmt: skip
    return lines


def _num(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    curve = report.get("rl_curve") or []
    if curve:
        steps = [c["step"] for c in curve]
        left.plot(steps, [c["reward"] for c in curve], marker=".", label="mean reward")
        left.plot(steps, [c.get("verify/correct") or 0 for c in curve], marker=".",
                  label="batch verified-correct rate")  # fmt: skip
    for level in (1, 2):
        pts = [(sum(map(int, u["steps"].split("-"))) / 2, u[f"level{level}"])
               for u in report.get("unseen") or [] if f"level{level}" in u]  # fmt: skip
        if pts:
            left.plot(
                [x for x, _ in pts],
                [c / n for _, (c, n) in pts],
                marker="s",
                linestyle="--",
                label=f"correct on new level-{level} tasks (5 steps)",
            )
    left.set(xlabel="GRPO step", title=f"GRPO on {report['model']}")
    labels = [p["label"] for p in report["points"]]
    for s in SOURCES:
        ys = [(p["figures"].get(s) or {}).get("correct") for p in report["points"]]
        if any(y is not None for y in ys):
            right.plot(labels, [100 * (y or 0) for y in ys], marker="o", label=s)
    right.set(ylabel="% verified correct (held out)", title="Held-out tasks at each point",
              ylim=(-2, 100))  # fmt: skip
    for ax in (left, right):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # an SFT-only demo draws no GRPO curve
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def grpo_arms(run: Path, rl_extra: list[str], folders: list[tuple[str, Path]], report: dict,
              ctx: dict) -> list[tuple[str, Path]]:  # fmt: skip
    """GRPO (and with `--rl-turns`, the multi-turn arm) from the SFT model of `run`, each
    arm's points evaluated; `folders` (the points so far) gains theirs and the report
    its curves, points and timing probe. The multi-turn evals' folders."""
    args, work, started = ctx["args"], ctx["work"], ctx["started"]
    cuda = args.device == "cuda"
    rl_cmd = tritonrl("rl", "--run", str(run), "--algo", "grpo", "--rl.device", args.device,
                      "--verify.device", args.device, *rl_extra)  # fmt: skip
    sft_turns = None  # the SFT model's multi-turn eval, beside the pass rates' (no timing)
    if args.turns_eval and not args.turns_rl_only:
        sft_turns = Background(turns_eval, "sft", run / "sft" / "final", ctx)
    if args.pass_rates:  # measured before, of this recipe's SFT model
        rl_cmd += ["--rl.pass_rates", str(args.pass_rates.resolve())]
    elif args.filter_samples:  # GRPO on the tasks the SFT model solves sometimes
        rl_cmd += ["--rl.pass_rates", str(pass_rates(run, rl_extra, ctx))]
    turn_folders = [("sft", sft_turns.get())] if sft_turns is not None else []
    ctx["commands"]["rl"] = rl_cmd[2:]
    run_turns = work / f"run-turns{args.rl_turns}"
    if args.rl_turns:  # the multi-turn arm starts from the same SFT model
        shutil.rmtree(run_turns, ignore_errors=True)
        shutil.copytree(run, run_turns)
    stop, training = threading.Event(), threading.Event()
    probe = None
    if cuda and args.probe_runs:
        probe = Background(timing_probe, args.probe_runs, training, stop, args.probe_pause_s)
    training.set()
    try:
        ctx["seconds"]["rl"] = round(grpo(rl_cmd, run, ctx), 1)
    finally:
        training.clear()
        stop.set()
    report["rl_curve"] = rl_curve(run)
    report["unseen"] = unseen_curve(run)
    report["pass_rate_filter"] = stage_info(run, "rl").get("pass_rate_filter")
    if not args.turns_only:
        for label, path in rl_points(run, args.rl_evals):
            folders.append((label, evaluate(label, path, ctx)))
    report["points"] += [point(label, folder, work, args.samples) for label, folder in folders]
    points = rl_points(run, args.rl_evals)
    if args.turns_eval and points:  # the last GRPO point's, if the deadline leaves time
        one_eval = ctx["seconds"].get("eval_sft", args.eval_estimate_s)
        need = 1.1 * ctx["seconds"].get("eval_sft_turns", TURNS_COST * one_eval)
        left = args.deadline_s - (time.monotonic() - started) if args.deadline_s else need
        if left >= need:
            turn_folders.append((points[-1][0], turns_eval(*points[-1], ctx)))
        else:
            report["skipped"] = (f"{points[-1][0]}'s --turns eval: {left:.0f} s left, "
                                 f"{need:.0f} s needed")  # fmt: skip
    if args.rl_turns:  # GRPO with feedback turns, the same budget, then its evals
        cmd = [str(run_turns) if c == str(run) else c for c in rl_cmd]
        cmd += ["--rl.turns", str(args.rl_turns), *args.turns_rl_args]
        ctx["commands"]["rl_turns"] = cmd[2:]
        ctx["seconds"]["rl_turns"] = round(grpo(cmd, run_turns, ctx, "rl_turns"), 1)
        report["rl_curve_turns"] = rl_curve(run_turns)
        points_t = rl_points(run_turns, args.rl_evals, f"rl{args.rl_turns}t")
        arm = [] if args.turns_only else [(label, evaluate(label, path, ctx))
                                          for label, path in points_t]  # fmt: skip
        folders.extend(arm)
        report["points"] += [point(label, folder, work, args.samples) for label, folder in arm]
        if points_t:
            turn_folders.append((points_t[-1][0], turns_eval(*points_t[-1], ctx)))
    if probe is not None:
        report["probe"]["training"] = probe.get()
    return turn_folders


# --------------------------------------------------------------------------- main


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="a named model, .gguf, dir or tiny")
    ap.add_argument("--out", default="out")
    ap.add_argument("--work", default=None, help="runs, models and evals (default OUT/work)")
    ap.add_argument("--config", default=None, help="default: qwen-coder-1.5b-1gpu (tiny: tiny-cpu)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kernelbench", type=Path, default=None, help="a KernelBench checkout")
    ap.add_argument("--kb-every1", type=int, default=5)
    ap.add_argument("--kb-every2", type=int, default=10)
    ap.add_argument("--heldout-generated", type=int, default=40)
    ap.add_argument(
        "--heldout-families",
        type=int,
        default=0,
        help="held-out family tasks (programs no training family task has)",
    )
    ap.add_argument(
        "--family-tasks",
        type=int,
        default=0,
        help="train on N tasks of each strict family instead of the generator's",
    )
    ap.add_argument("--with-generated", action="store_true",
                    help="with --family-tasks: the families beside the generator's tasks, "
                    "not instead of them")  # fmt: skip
    ap.add_argument("--keep-sft-checkpoints", action="store_true",
                    help="keep work/run/sft/checkpoints (removed once SFT is done: GRPO "
                    "starts from sft/final)")  # fmt: skip
    ap.add_argument("--no-decontaminate", action="store_true",
                    help="do not leave out training tasks equal to held-out ones")  # fmt: skip
    ap.add_argument("--decontaminate-form", choices=("forward", "program"), default="forward",
                    help="the weakest equality that leaves a training task out "
                    "(data.decontaminate_form): forward also drops every task sharing a "
                    "held-out task's op sequence (any sum along any dim, for "
                    "KernelBench's sum over dim 1); program only the same program, sizes "
                    "and names aside")  # fmt: skip
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--filter-samples", type=int, default=0,
                    help="GRPO only on training tasks the SFT model solves sometimes, "
                    "from N answers each (0: every task)")  # fmt: skip
    ap.add_argument("--eval-temperature", type=float, default=None,
                    help="eval's temperature (default: GRPO's)")  # fmt: skip
    ap.add_argument("--eval-backend", default="auto")
    ap.add_argument("--pass-rates", type=Path, default=None,
                    help="rl.pass_rates measured before (an eval folder or samples.jsonl of "
                    "this recipe's SFT model on train:RUN), not --filter-samples")  # fmt: skip
    ap.add_argument("--turns-eval", type=int, default=0,
                    help="also evaluate the SFT model (and the last GRPO point, when the "
                    "deadline leaves time) with eval --turns T, no timing")  # fmt: skip
    ap.add_argument("--turns-rl-only", action="store_true",
                    help="with --turns-eval: the last GRPO point's only, not the SFT "
                    "model's")  # fmt: skip
    ap.add_argument("--rl-turns", type=int, default=0,
                    help="after single-turn GRPO, GRPO with --rl.turns T from the same SFT "
                    "model for the same --rl-budget-s; both arms' last points evaluated "
                    "with one answer and with --turns T")  # fmt: skip
    ap.add_argument("--turns-only", action="store_true",
                    help="with --rl-turns or --turns-eval: GRPO points evaluated with "
                    "--turns T alone (its correct@1: the one-answer figure, untimed)")  # fmt: skip
    ap.add_argument("--turns-rl-args", default="",
                    help="with --rl-turns: more rl overrides for that arm alone, as one "
                    "string (its batch must be a multiple of num_generations x T)")  # fmt: skip
    ap.add_argument("--rl-budget-s", type=float, default=0, help="SIGTERM GRPO after (0: none)")
    ap.add_argument("--deadline-s", type=float, default=0, help="the whole demo's seconds")
    ap.add_argument("--rl-evals", type=int, default=2, help="GRPO checkpoints evaluated")
    ap.add_argument("--skip-base", action="store_true", help="do not evaluate the base model")
    ap.add_argument(
        "--skip-sft-eval",
        action="store_true",
        help="do not evaluate the SFT model (its figures come from an earlier "
        "run of the same recipe): GRPO gets that time",
    )
    ap.add_argument("--sft-only", action="store_true",
                    help="evaluate the SFT model and stop, no GRPO (the SFT point of an arm "
                    "of the same recipe run beside it with --skip-sft-eval)")  # fmt: skip
    ap.add_argument(
        "--eval-estimate-s",
        type=float,
        default=220.0,
        help="one eval's seconds when no SFT eval has measured it",
    )
    ap.add_argument("--probe-runs", type=int, default=10)
    ap.add_argument("--probe-pause-s", type=float, default=20.0)
    ap.add_argument("--replot", action="store_true", help="redraw OUT's .png and .md only")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then overrides for sft and rl")
    args = ap.parse_args(argv)
    args.extra = [a for a in args.extra if a != "--"]
    if args.filter_samples == 1:
        ap.error("--filter-samples must be 0 or at least 2 (one answer a task is greedy)")
    if args.config is None:
        args.config = "tiny-cpu" if args.model == "tiny" else "qwen-coder-1.5b-1gpu"
    if args.rl_turns:
        if args.rl_turns < 2 or not args.rl_budget_s or args.deadline_s:
            ap.error("--rl-turns T takes T >= 2 and --rl-budget-s (both arms get it), "
                     "not --deadline-s")  # fmt: skip
        if args.turns_eval not in (0, args.rl_turns):
            ap.error("--turns-eval must equal --rl-turns (or be left out)")
        if not args.turns_eval:
            args.turns_eval, args.turns_rl_only = args.rl_turns, True
    if args.sft_only and (args.skip_sft_eval or args.rl_turns or args.turns_only):
        ap.error("--sft-only evaluates the SFT model alone: not with --skip-sft-eval, "
                 "--rl-turns or --turns-only")  # fmt: skip
    if args.turns_only and not args.turns_eval:
        ap.error("--turns-only goes with --rl-turns T or --turns-eval T")
    if args.turns_only and args.deadline_s:
        ap.error("--turns-only takes --rl-budget-s, not --deadline-s")
    args.turns_rl_args = args.turns_rl_args.split()
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse(argv)
    out = Path(args.out).resolve()
    if args.replot:
        report = json.loads((out / "learning_demo.json").read_text())
        (out / "learning_demo.md").write_text(markdown(report))
        plot(report, out / "learning_demo.png")
        return 0
    from tritonrl.config_loader import load_config

    work = Path(args.work).resolve() if args.work else out / "work"
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    sft_extra, rl_extra = split_extra(args.extra)
    try:  # GRPO's overrides too: refused now, not after SFT and its eval
        config = load_config(args.config, sft_extra, cuda_available=args.device == "cuda")
        load_config(args.config, rl_extra, cuda_available=args.device == "cuda")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    started = time.monotonic()
    heldout = work / "heldout"
    train = (config.data.generated_tasks, config.data.generator_seed)
    every = (args.kb_every1, args.kb_every2)
    files = write_heldout(heldout, args.heldout_generated, train, args.kernelbench, every,
                          args.heldout_families)  # fmt: skip
    ctx = {"args": args, "out": out, "work": work, "heldout": heldout, "config": args.config,
           "commands": {}, "seconds": {}, "fallbacks": [], "started": started,
           "eval_extra": eval_extra(rl_extra, args.eval_temperature)}  # fmt: skip
    report: dict = {"argv": sys.argv[1:], "model": args.model, "device": device_name(args.device),
                    "samples": args.samples, "heldout": files, "points": [], "probe": {},
                    "commands": ctx["commands"], "seconds": ctx["seconds"],
                    "fallbacks": ctx["fallbacks"]}  # fmt: skip
    if cuda and args.probe_runs:
        report["probe"]["idle"] = timing_probe(args.probe_runs, None, threading.Event())
    t = time.monotonic()
    base = build_base(args.model, work, out)
    ctx["seconds"]["base"] = round(time.monotonic() - t, 1)
    folders = [] if args.skip_base else [("base", evaluate("base", base, ctx))]
    run = work / "run"
    device = ["--sft.device", args.device, "--rl.device", args.device]
    data = ["--data.tasks", ",".join(training_specs(args.family_tasks))]
    if args.family_tasks and not args.with_generated:  # instead of the generator's tasks
        data += ["--data.generated_tasks", "0"]
    if not args.no_decontaminate:  # nothing trained on equals a held-out task
        data += ["--data.decontaminate_against", f"builtin:heldout,{heldout}",
                 "--data.decontaminate_form", args.decontaminate_form]  # fmt: skip
        report["left_out"] = left_out(
            training_specs(args.family_tasks),
            ["builtin:heldout", str(heldout)],
            args.decontaminate_form,
        )
    sft_cmd = tritonrl("sft", "--run", str(run), "--config", args.config,
                       "--model.name_or_path", str(base), *data, "--run.report_to", "none",
                       *device[:2], *sft_extra)  # fmt: skip
    ctx["commands"]["sft"] = sft_cmd[2:]
    ctx["seconds"]["sft"] = round(run_logged(sft_cmd, out / "sft.log"), 1)
    if not args.keep_sft_checkpoints:
        prune_checkpoints(run / "sft" / "checkpoints")
    if not args.skip_sft_eval:
        folders.append(("sft", evaluate("sft", run / "sft" / "final", ctx)))
    if args.sft_only:
        report["points"] += [point(label, folder, work, args.samples) for label, folder in folders]
        turn_folders = []
        if args.turns_eval and not args.turns_rl_only:
            turn_folders.append(("sft", turns_eval("sft", run / "sft" / "final", ctx)))
    else:
        turn_folders = grpo_arms(run, rl_extra, folders, report, ctx)
    report["turns"] = {label: turn_figures(f, args.turns_eval) for label, f in turn_folders}
    if folders:
        compare = subprocess.run(tritonrl("eval", "--compare", *(str(f) for _, f in folders),
                                          "--json"), capture_output=True, text=True)  # fmt: skip
        (out / "compare.json").write_text(compare.stdout or compare.stderr)
    for phase in ("idle", "training"):
        for key in ("device", "launch"):
            report["probe"][f"{phase}_{key}"] = spread(report["probe"].get(phase) or [], key)
    report["seconds"]["total"] = round(time.monotonic() - started, 1)
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
