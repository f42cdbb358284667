"""Best-of-N rejection sampling and reward-weighted SFT: sample, verify, fine-tune.

    tritonrl rl --run runs/demo --algo best-of-n [--best_of_n.rounds 3 ...]
    tritonrl rl --run runs/demo --algo rwsft

`train(run, config, device, stop)` is called by `tritonrl.train.rl.run_rl`, which owns
the stage's start, failure and interruption. Each round (`best_of_n.rounds`):

1. Draw `best_of_n.tasks` prompts: by the curriculum when `curriculum.enabled` (its
   level mix decides, `best_of_n.level` is then not used), else the tasks of level
   `best_of_n.level` (null: any) in a seeded order, repeated when there are fewer.
2. Sample `best_of_n.samples` completions per prompt from the current policy
   (`model.generate`, `generation_batch_size` prompts at a time, temperature
   `rl.temperature`, at most `rl.max_completion_length` new tokens), and verify them
   all at once through the warm pool; the reward is `rl.reward_scheme` (null:
   `verify.reward_scheme`).
3. Keep: best-of-n keeps, per task, the top `best_of_n.keep` whose reward is above
   `best_of_n.min_reward` (weight 1); rwsft keeps every sample with a positive reward,
   weighted by its reward divided by the mean reward of the kept set (so the weights
   average 1 and the learning rate means the same as for best-of-n).
4. Fine-tune on the kept (prompt, completion) pairs for `best_of_n.epochs` epochs at
   `best_of_n.learning_rate`: AdamW (no weight decay, as TRL's default), one pair a step
   in a seeded order, cross-entropy on the completion's tokens only, times the pair's
   weight (a weight of 0 changes nothing).

Files: `RUN/rl/rounds/round-N.jsonl` (N from 1; every sample: task, level, sample index,
reward, verdict details, kept, weight, completion), each completion also in
`rl/completions.jsonl` (`step` = the rounds done before it); after each round a checkpoint
`rl/checkpoints/round-N` (the policy, `curriculum.json`, `round.json`), the last
`run.keep_last` kept, recorded in the manifest. A resumed stage continues after the last
recorded round from its checkpoint. The final policy goes to `rl/final` as for GRPO.

What it does NOT do: no KL penalty or reference model; no batching of the fine-tuning
step (one pair at a time keeps padding out of the loss); no vLLM generation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import time
from pathlib import Path

from tritonrl.config import Config
from tritonrl.runs import Interrupted, Run, StopSignals, atomic_write_json
from tritonrl.train.rl import (
    COMPLETIONS,
    CURRICULUM_FILE,
    STAGE,
    CompletionLog,
    RlResult,
    load_policy,
    record_info,
)

log = logging.getLogger(__name__)
ROUND_FILE = "round.json"


def select(algo: str, rows: list[dict], keep: int, min_reward: float) -> list[dict]:
    """The rows to fine-tune on, each with its `weight` (see the module docstring).
    `rows` are one round's samples: dicts with at least "task" and "reward"."""
    if algo == "best-of-n":
        by_task: dict[str, list[dict]] = {}
        for r in rows:
            by_task.setdefault(r["task"], []).append(r)
        kept = []
        for group in by_task.values():
            best = sorted((r for r in group if r["reward"] > min_reward),
                          key=lambda r: -r["reward"])[:keep]  # fmt: skip
            kept += [{**r, "weight": 1.0} for r in best]
        return kept
    if algo == "rwsft":
        kept = [r for r in rows if r["reward"] > 0]
        mean = sum(r["reward"] for r in kept) / len(kept) if kept else 1.0
        return [{**r, "weight": r["reward"] / mean} for r in kept]
    raise ValueError(f"best_of_n.select: algo must be best-of-n or rwsft, not {algo!r}")


def _draw(config: Config, tasks: dict, curriculum, rng: random.Random) -> list[str]:
    n = config.best_of_n.tasks
    if curriculum is not None:
        return curriculum.sample(n)
    level = config.best_of_n.level
    pool = sorted(t for t, task in tasks.items() if level is None or task.level == level)
    if not pool:
        log.warning("best_of_n: no task of level %s among the prompts; drawing from all", level)
        pool = sorted(tasks)
    rng.shuffle(pool)
    return [pool[i % len(pool)] for i in range(n)]


def generate(model, tokenizer, prompts: list, config: Config) -> list[list[str]]:
    """`best_of_n.samples` sampled completions for each prompt (chat messages), batched."""
    import torch

    bon, rl = config.best_of_n, config.rl
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    out: list[list[str]] = []
    model.eval()
    for start in range(0, len(prompts), bon.generation_batch_size):
        chunk = prompts[start : start + bon.generation_batch_size]
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                 for p in chunk]  # fmt: skip
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        batch = batch.to(model.device)
        with torch.no_grad():
            ids = model.generate(**batch, do_sample=True, temperature=rl.temperature,
                                 max_new_tokens=rl.max_completion_length,
                                 num_return_sequences=bon.samples,
                                 pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        new = ids[:, batch["input_ids"].shape[1] :]  # [len(chunk) * samples, new tokens]
        decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
        out += [decoded[i * bon.samples : (i + 1) * bon.samples] for i in range(len(chunk))]
    return out


def fine_tune(model, tokenizer, pairs: list[dict], config: Config, seed: int) -> list[float]:
    """One pass per epoch over `pairs` ({"prompt", "completion", "weight"}); the losses."""
    import torch

    bon = config.best_of_n
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=bon.learning_rate, weight_decay=0.0)  # as TRL
    model.train()
    losses, rng = [], random.Random(seed)
    for _ in range(bon.epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for i in order:
            pair = pairs[i]
            prompt = tokenizer.apply_chat_template(pair["prompt"], tokenize=False,
                                                   add_generation_prompt=True)  # fmt: skip
            p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            c_ids = tokenizer(pair["completion"], add_special_tokens=False)["input_ids"]
            c_ids = c_ids + [tokenizer.eos_token_id]
            ids = torch.tensor([p_ids + c_ids], device=model.device)  # [1, P + C]
            labels = ids.clone()
            labels[:, : len(p_ids)] = -100  # the completion's tokens only
            loss = model(input_ids=ids, labels=labels).loss * pair["weight"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    model.eval()
    return losses


def _save(model, tokenizer, path: Path, extra: dict[str, object]) -> None:
    """The policy and `extra` JSON files into `path`, written beside and renamed in."""
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    for name, value in extra.items():
        atomic_write_json(tmp / name, value)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def _checkpoint(run: Run, config: Config, model, tokenizer, done: int, curriculum) -> None:
    ckpt_dir = run.stage_dir(STAGE) / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    extra: dict[str, object] = {ROUND_FILE: {"rounds_done": done}}
    if curriculum is not None:
        extra[CURRICULUM_FILE] = curriculum.state_dict()
    _save(model, tokenizer, ckpt_dir / f"round-{done}", extra)
    run.add_artifact(STAGE, "checkpoint", ckpt_dir / f"round-{done}")
    run.set_step(STAGE, done)
    old = sorted(ckpt_dir.glob("round-*"), key=lambda p: int(p.name.split("-")[1]))
    for stale in old[: -config.run.keep_last]:
        shutil.rmtree(stale, ignore_errors=True)


def _resume(run: Run, config: Config, model, curriculum) -> tuple[object, int]:
    """(the policy to go on from, rounds done) from the stage's recorded checkpoint."""
    if not run.has_artifact(STAGE, "checkpoint"):
        return model, 0
    from tritonrl.runs import RESUMED

    ckpt = run.artifact(STAGE, "checkpoint")
    done = json.loads((ckpt / ROUND_FILE).read_text())["rounds_done"]
    if curriculum is not None and (ckpt / CURRICULUM_FILE).is_file():
        curriculum.load_state_dict(json.loads((ckpt / CURRICULUM_FILE).read_text()))
    if hasattr(model, "load_adapter"):  # a PeftModel: the adapter goes on from there
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(ckpt / "adapter_model.safetensors")))
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=model.dtype).to(model.device)
    run.set_info(STAGE, **{RESUMED: run.relpath(ckpt)})
    log.info("resuming %s after round %d from %s", config.rl.algo, done, run.relpath(ckpt))
    return model, done


def _round(run, config, verify, model, tokenizer, tasks, prompts, ids, recorder, number):
    """Sample, verify, record one round; (its rows, the kept rows)."""
    from tritonrl.reward.adapters import _details
    from tritonrl.reward.schemes import reward_for
    from tritonrl.verify.pool import shared_pool

    samples = generate(model, tokenizer, [prompts[t] for t in ids], config)
    pairs = [(tasks[t], text) for t, texts in zip(ids, samples, strict=True) for text in texts]
    results = shared_pool(verify).verify_many(pairs, verify)
    details = [_details(r, reward_for(r, verify)) for r in results]
    recorder.record(number, details, [text for _, text in pairs])
    rows = [{"task": task.id, "level": task.level, "sample": i % config.best_of_n.samples,
             "reward": d["reward"], "details": d, "completion": text}
            for i, ((task, text), d) in enumerate(zip(pairs, details, strict=True))]  # fmt: skip
    kept = select(config.rl.algo, rows, config.best_of_n.keep, config.best_of_n.min_reward)
    kept_ids = {(k["task"], k["completion"]) for k in kept}
    weights = {(k["task"], k["completion"]): k["weight"] for k in kept}
    rounds = run.stage_dir(STAGE) / "rounds"
    rounds.mkdir(exist_ok=True)
    path = rounds / f"round-{number + 1}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            key = (r["task"], r["completion"])
            f.write(json.dumps({**r, "kept": key in kept_ids, "weight": weights.get(key, 0.0)},
                               ensure_ascii=False) + "\n")  # fmt: skip
    run.add_artifact(STAGE, "rounds", rounds)
    return rows, kept


def train(run: Run, config: Config, device: str, stop: StopSignals) -> RlResult:
    """Best-of-N or reward-weighted SFT (`config.rl.algo`); see the module docstring."""
    from tritonrl.train.model_card import rl_card
    from tritonrl.train.rl_data import rl_prompts

    started = time.monotonic()
    dataset, tasks, source = rl_prompts(run, config)
    prompts = {row["task_id"]: row["prompt"] for row in dataset}
    verify = config.verify
    if config.rl.reward_scheme:
        verify = dataclasses.replace(verify, reward_scheme=config.rl.reward_scheme)
    stage_dir = run.stage_dir(STAGE)
    (stage_dir / COMPLETIONS).touch()
    run.add_artifact(STAGE, "completions", stage_dir / COMPLETIONS)
    curriculum = None
    if config.curriculum.enabled:
        from tritonrl.train.curriculum import Curriculum

        levels = {t: task.level for t, task in tasks.items()}
        curriculum = Curriculum(config.curriculum, levels, config.run.seed)
    recorder = CompletionLog(stage_dir / COMPLETIONS, {t: k.level for t, k in tasks.items()},
                             curriculum)  # fmt: skip
    model, tokenizer = load_policy(run, config, device)
    if device == "cuda":
        model = model.to("cuda")
    model, done = _resume(run, config, model, curriculum)
    lora = run.has_artifact("sft", "adapter")
    history: list[dict] = []
    rng = random.Random(config.run.seed + done)
    for number in range(done, config.best_of_n.rounds):
        ids = _draw(config, tasks, curriculum, rng)
        with stop.graceful():
            rows, kept = _round(run, config, verify, model, tokenizer, tasks, prompts, ids,
                                recorder, number)  # fmt: skip
            pairs = [{"prompt": prompts[k["task"]], "completion": k["completion"],
                      "weight": k["weight"]} for k in kept]  # fmt: skip
            losses = fine_tune(model, tokenizer, pairs, config, config.run.seed + number)
        if curriculum is not None:
            curriculum.end_step(number + 1)
        entry = {"step": number + 1, "reward": sum(r["reward"] for r in rows) / len(rows),
                 "verify/correct": sum(r["details"]["correct"] for r in rows) / len(rows),
                 "kept": len(kept), "samples": len(rows),
                 "loss": sum(losses) / len(losses) if losses else None,
                 **(curriculum.metrics() if curriculum is not None else {})}  # fmt: skip
        history.append(entry)
        log.info("%s round %d: %s", config.rl.algo, number + 1, entry)
        _checkpoint(run, config, model, tokenizer, number + 1, curriculum)
        if stop.signal:
            raise Interrupted(stop.signal)
    atomic_write_json(stage_dir / "log_history.json", history)
    run.add_artifact(STAGE, "log_history", stage_dir / "log_history.json")
    card = rl_card(run, config, source, len(prompts))(config.best_of_n.rounds)
    final = stage_dir / "final"
    _save(model, tokenizer, final, {})
    (final / "README.md").write_text(card)
    run.add_artifact(STAGE, "adapter" if lora else "model", final)
    run.add_artifact(STAGE, "tokenizer", final)
    run.set_step(STAGE, config.best_of_n.rounds)
    record_info(run, config, recorder, curriculum, data_source=source, prompts=len(prompts),
                device=device, kept=[h["kept"] for h in history])  # fmt: skip
    resumed = run.stage(STAGE)["info"].get("resumed_from_checkpoint") if done else None
    return RlResult(run_dir=run.path, output=final, lora=lora, steps=config.best_of_n.rounds,
                    completions=recorder.rows, mean_reward=recorder.mean_reward,
                    seconds=time.monotonic() - started, resumed_from=resumed)  # fmt: skip
