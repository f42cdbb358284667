"""One sampling round of best-of-n and rwsft: draw tasks, sample, verify, select, record.

    ids = draw(config, tasks, curriculum, round_number)
    samples = generate(model, tokenizer, [prompts[t] for t in ids], config)
    rows = score(tasks, ids, samples, verify_config, recorder, step)
    kept = select("best-of-n", rows, keep=3, min_reward=0.3)
    write_round(run, round_number, rows, kept)

`tritonrl.train.rl.best_of_n` runs these each round and fine-tunes on what `select` keeps.

Drawing (`draw`): with `curriculum.enabled` the curriculum draws `best_of_n.tasks` task
ids (distinct while its pools last, level 2 at its current share; `best_of_n.level` is
then not used); otherwise `best_of_n.tasks` distinct tasks of level `best_of_n.level` (null: any
level), in an order seeded by `run.seed` and the round, all of them when there are fewer
(said in the log). A task drawn twice has its samples pooled.

Selection (`select`): best-of-n keeps, per task, the `keep` highest rewards above
`min_reward`, each with weight 1. rwsft keeps every sample whose reward is above 0, with
weight reward / (mean reward of the kept samples): the weights average 1 over a round's
kept set, so `best_of_n.learning_rate` means the same step size for both algorithms.

Files: `RUN/rl/rounds/round-N/samples.jsonl` (N from 1), one line per sample: round,
task, level, sample (its number in the round), reward, verdict details, kept, weight,
completion; recorded as the stage's `rounds` artifact. Every completion also goes to
`rl/completions.jsonl` through `common.CompletionLog` (which tells the curriculum of each
verdict).

What it does NOT do: no fine-tuning (best_of_n.py), no deduplication of identical
samples beyond the pool verifying them once, no vLLM generation.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

from tritonrl.config import Config, VerifyConfig
from tritonrl.models.sampling import sampling_kwargs
from tritonrl.reward.adapters import make_trl_reward
from tritonrl.runs import Run
from tritonrl.train.rl.common import STAGE, CompletionLog

log = logging.getLogger(__name__)
ALGOS = ("best-of-n", "rwsft")


def draw(config: Config, tasks: dict, curriculum, number: int) -> list[str]:
    """The task ids of round `number` (1-based); see the module docstring."""
    n = config.best_of_n.tasks
    if curriculum is not None:
        return curriculum.sample(n)
    pool = level_pool(tasks, config.best_of_n.level)
    random.Random(f"{config.run.seed}:{number}").shuffle(pool)
    if len(pool) < n:
        log.info("round %d: %d task(s) of the wanted level, fewer than best_of_n.tasks %d: "
                 "all of them", number, len(pool), n)  # fmt: skip
    return pool[:n]


def level_pool(tasks: dict, level: int | None) -> list[str]:
    """The ids of `tasks` of `level` (None: all), sorted; a ValueError naming the levels
    there are when none is."""
    pool = sorted(t for t, task in tasks.items() if level is None or task.level == level)
    if not pool:
        present = sorted({task.level for task in tasks.values()})
        raise ValueError(
            f"best_of_n.level is {level} but the run's {len(tasks)} RL prompts have tasks of "
            f"level {present} only: set --best_of_n.level to one of them, or null for any, "
            "or enable the curriculum"
        )
    return pool


def generate(model, tokenizer, prompts: list, config: Config) -> list[list[str]]:
    """`best_of_n.samples` sampled completions for each prompt (chat messages), rendered
    with the tokenizer's chat template as TRL does, `generation_batch_size` prompts at a
    time (left-padded), sampled as the `sampling` section says (`sampling_kwargs`), at
    most `sampling.max_new_tokens` tokens; under bf16 autocast with `rl.bf16`."""
    import torch

    bon, rl = config.best_of_n, config.rl
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    out: list[list[str]] = []
    model.eval()  # no dropout (LoRA's) while sampling
    try:
        for start in range(0, len(prompts), bon.generation_batch_size):
            chunk = prompts[start : start + bon.generation_batch_size]
            texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                     for p in chunk]  # fmt: skip
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            batch = batch.to(model.device)
            # under `rl.bf16`, bf16 autocast over the float32 policy, as in training
            bf16 = torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=rl.bf16)
            with torch.no_grad(), bf16:
                ids = model.generate(**batch, **sampling_kwargs(config.sampling),
                                     max_new_tokens=config.sampling.max_new_tokens,
                                     num_return_sequences=bon.samples,
                                     pad_token_id=tokenizer.pad_token_id)  # fmt: skip
            new = ids[:, batch["input_ids"].shape[1] :]  # [len(chunk) * samples, new tokens]
            text = tokenizer.batch_decode(new, skip_special_tokens=True)
            out += [text[i * bon.samples : (i + 1) * bon.samples] for i in range(len(chunk))]
    finally:
        tokenizer.padding_side = side
    return out


def score(
    tasks: dict, ids: list[str], samples: list[list[str]], verify: VerifyConfig,
    recorder: CompletionLog, step: int,
) -> list[dict]:  # fmt: skip
    """One row per sample (task, level, `sample`: its number in the round from 0, a
    prompt's samples in a row; reward, details, completion), all verified at once
    through the shared pool and recorded in `recorder` at `step`."""
    reward = make_trl_reward(tasks, verify)
    flat = [(t, text) for t, texts in zip(ids, samples, strict=True) for text in texts]
    completions = [text for _, text in flat]
    rewards, details = reward.with_details(None, completions, task_id=[t for t, _ in flat])
    recorder.record(step, details, completions)
    return [{"task": t, "level": tasks[t].level, "sample": i, "reward": r, "details": d,
             "completion": text}
            for i, ((t, text), r, d) in enumerate(zip(flat, rewards, details, strict=True))
            ]  # fmt: skip


def select(algo: str, rows: list[dict], keep: int, min_reward: float) -> list[dict]:
    """The rows to fine-tune on, each with its `weight` (see the module docstring).
    `rows` are one round's samples: dicts with at least "task" and "reward"; ties keep
    the earlier sample."""
    if algo == "best-of-n":
        by_task: dict[str, list[dict]] = {}
        for r in rows:
            by_task.setdefault(r["task"], []).append(r)
        kept = []
        for group in by_task.values():
            above = [r for r in group if r["reward"] > min_reward]
            best = sorted(above, key=lambda r: -r["reward"])[:keep]
            kept += [{**r, "weight": 1.0} for r in best]
        return kept
    if algo == "rwsft":
        kept = [r for r in rows if r["reward"] > 0]
        mean = sum(r["reward"] for r in kept) / len(kept) if kept else 1.0
        return [{**r, "weight": r["reward"] / mean} for r in kept]
    raise ValueError(f"select: algo must be one of {ALGOS}, not {algo!r}")


def write_round(run: Run, number: int, rows: list[dict], kept: list[dict]) -> Path:
    """`rl/rounds/round-N/samples.jsonl`: every row with `kept` and `weight` (0 when not
    kept); the `rounds` artifact is recorded. Returns the file."""
    weights = {k["sample"]: k["weight"] for k in kept}
    rounds = run.stage_dir(STAGE) / "rounds"
    folder = rounds / f"round-{number}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "samples.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            weight = weights.get(r["sample"])
            line = {"round": number, **r, "kept": weight is not None, "weight": weight or 0.0}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    run.add_artifact(STAGE, "rounds", rounds)
    return path


def round_metrics(rows: list[dict], kept: list[dict]) -> dict[str, float]:
    """What is logged each round: mean reward, verified-correct and compiled rates, the
    number of samples, tasks and kept samples."""
    n = len(rows) or 1
    compiled = [r for r in rows if r["details"]["stage"] not in ("extract", "static", "compile")]
    return {
        "reward/mean": sum(r["reward"] for r in rows) / n,
        "verify/correct": sum(bool(r["details"]["correct"]) for r in rows) / n,
        "verify/compiled": len(compiled) / n,
        "samples": float(len(rows)),
        "tasks": float(len({r["task"] for r in rows})),
        "kept": float(len(kept)),
    }
