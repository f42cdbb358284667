"""Best-of-N rejection sampling and reward-weighted SFT (rwsft): sample, verify, fine-tune.

    tritonrl rl --run runs/demo --algo best-of-n [--best_of_n.rounds 3 ...]
    tritonrl rl --run runs/demo --algo rwsft

`train(run, config, device, stop)` is called by `tritonrl.train.rl.run_rl`, which owns
the stage's start, failure and interruption. The policy is the run's SFT model, or its
SFT adapter loaded trainable (`rl.load_policy`). Each of `best_of_n.rounds` rounds
(`tritonrl.train.rl.rounds` has the details of the first three steps):

1. draw `best_of_n.tasks` prompts: by the curriculum when `curriculum.enabled` (then
   `best_of_n.level` is not used), else distinct tasks of level `best_of_n.level`;
2. sample `best_of_n.samples` completions of each with the current policy and verify
   them all at once through the warm pool (reward: `rl.reward_scheme`, null:
   `verify.reward_scheme`);
3. keep: best-of-n the top `best_of_n.keep` of each task above `best_of_n.min_reward`
   (weight 1), rwsft every sample with a reward above 0 (weight reward / mean reward of
   the kept set);
4. fine-tune on the kept (prompt, completion) pairs with TRL's `SFTTrainer`
   (`tritonrl.train.sft.weighted`: completion-only loss, each sample's times its weight,
   TRL's SFT loss when every weight is 1), `best_of_n.epochs` epochs at
   `best_of_n.learning_rate`, a fresh optimizer each round.

After each round: a checkpoint `rl/checkpoints/round-N` (the policy, tokenizer,
`curriculum.json`, `round.json`; the last `run.keep_last` kept, the newest recorded as
`rl/checkpoint` with the stage's step = N), the round's metrics (mean reward, correct
and compiled rates, samples, kept, fine-tuning loss, the curriculum's) in the log,
`rl/log_history.json` and, with `run.report_to` tensorboard, `rl/tensorboard` (step =
round). Each completion is in `rl/completions.jsonl` with `step` = its round (from 1, as
the log counts). SIGTERM/SIGINT finish the round, checkpoint it and
stop (`Interrupted`); the same command resumes after the last checkpointed round with
its policy and curriculum state. The final policy goes to `rl/final` (`sft.save_final`).

On CUDA nothing else of this process uses the GPU while the pool verifies (sampling,
verifying and fine-tuning take turns), so no gate is held as GRPO's trainer does.

What it does NOT do: no KL penalty or reference model; no per-round metrics to wandb
(tensorboard and the files only); an interrupted round is sampled again on resume (its
completions stay in completions.jsonl, so that file may hold a round twice).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path

from tritonrl.config import Config
from tritonrl.config_loader import config_to_dict
from tritonrl.models.load import load_causal_lm
from tritonrl.runs import Interrupted, Run, RunError, StopSignals, atomic_write_json
from tritonrl.runs.checkpoint import seal
from tritonrl.runs.lifecycle import record_checkpoint, resume_point
from tritonrl.train.model_card import rl_card
from tritonrl.train.precision import final_dtype
from tritonrl.train.rl import rounds
from tritonrl.train.rl.common import (
    COMPLETIONS,
    CURRICULUM_FILE,
    RL_SECTIONS,
    STAGE,
    CompletionLog,
    RlResult,
    load_policy,
)
from tritonrl.train.rl.curriculum import Curriculum
from tritonrl.train.rl.data import rl_prompts
from tritonrl.train.sft import save_final
from tritonrl.train.sft.weighted import fine_tune

log = logging.getLogger(__name__)
ROUND_FILE = "round.json"  # in each checkpoint: {"rounds_done": N}


class PolicyWriter:
    """What `sft.save_final` needs of a trainer: `save_model(dir)` of the policy."""

    def __init__(self, model):
        self.model = model

    def save_model(self, path: str) -> None:
        self.model.save_pretrained(path)


def _checkpoint(run: Run, config: Config, model, tokenizer, done: int, curriculum) -> Path:
    """`rl/checkpoints/round-N`, written beside and renamed in, then recorded."""
    ckpt_dir = run.stage_dir(STAGE) / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    path, tmp = ckpt_dir / f"round-{done}", ckpt_dir / f".round-{done}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    atomic_write_json(tmp / ROUND_FILE, {"rounds_done": done})
    if curriculum is not None:
        atomic_write_json(tmp / CURRICULUM_FILE, curriculum.state_dict())
    seal(tmp)  # a round checkpoint counts only when sealed (runs/checkpoint.py)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    record_checkpoint(run, STAGE, path, done)
    old = sorted(ckpt_dir.glob("round-*"), key=lambda p: int(p.name.split("-")[1]))
    for stale in old[: -config.run.keep_last]:
        shutil.rmtree(stale, ignore_errors=True)
    return path


def _resume(run: Run, config: Config, model, curriculum) -> tuple[object, int]:
    """(the policy to go on from, rounds done) from the stage's recorded checkpoint."""
    resume = resume_point(run, STAGE, log)
    if resume is None:
        return model, 0
    ckpt = Path(resume)
    if not (ckpt / ROUND_FILE).is_file():
        raise RunError(
            f"run {run.path}: the rl stage's checkpoint {run.relpath(ckpt)} has no {ROUND_FILE}: "
            f"it was written by --algo {run.stage(STAGE)['info'].get('algo', 'grpo/rloo')}, "
            f"not {config.rl.algo}; resume with that algorithm or start a new run"
        )
    done = json.loads((ckpt / ROUND_FILE).read_text())["rounds_done"]
    if curriculum is not None and (ckpt / CURRICULUM_FILE).is_file():
        curriculum.load_state_dict(json.loads((ckpt / CURRICULUM_FILE).read_text()))
    if hasattr(model, "peft_config"):  # the adapter goes on from the checkpoint's weights
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(ckpt / "adapter_model.safetensors")))
        return model, done

    resumed = load_causal_lm(ckpt, dtype=model.dtype,
                             trust_remote_code=config.model.trust_remote_code)  # fmt: skip
    return resumed.to(model.device), done


class RoundReporter:
    """Each round's metrics to the log and, with `run.report_to` tensorboard, to
    `rl/tensorboard` (step = round)."""

    def __init__(self, run: Run, config: Config):
        self.writer = None
        if "tensorboard" in config.run.report_to:
            from torch.utils.tensorboard import SummaryWriter

            tb_dir = run.stage_dir(STAGE) / "tensorboard"
            tb_dir.mkdir(exist_ok=True)
            self.writer = SummaryWriter(log_dir=str(tb_dir))
            run.add_artifact(STAGE, "tensorboard", tb_dir)
        if "wandb" in config.run.report_to:
            log.warning("run.report_to wandb: %s writes its round metrics to tensorboard and "
                        "rl/log_history.json only", config.rl.algo)  # fmt: skip

    def report(self, entry: dict) -> None:
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in entry.items()}
        log.info("round %d: %s", entry["round"], shown)
        if self.writer is None:
            return
        for key, value in entry.items():
            if isinstance(value, (int, float)) and key != "round":
                self.writer.add_scalar(key, value, entry["round"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclasses.dataclass
class Loop:
    """What every round uses."""

    run: Run
    config: Config
    device: str
    model: object
    tokenizer: object
    tasks: dict
    prompts: dict  # task id -> chat messages
    verify: object  # VerifyConfig with the RL reward scheme
    recorder: CompletionLog
    curriculum: object | None

    def round(self, number: int) -> dict:
        """Round `number` (1-based): sample, verify, select, fine-tune; its metrics."""
        from transformers import set_seed

        config, algo = self.config, self.config.rl.algo
        ids = rounds.draw(config, self.tasks, self.curriculum, number)
        set_seed(config.run.seed + number)  # a resumed round samples as the first try did
        samples = rounds.generate(self.model, self.tokenizer, [self.prompts[t] for t in ids],
                                    config)  # fmt: skip
        rows = rounds.score(self.tasks, ids, samples, self.verify, self.recorder, number)
        kept = rounds.select(algo, rows, config.best_of_n.keep, config.best_of_n.min_reward)
        rounds.write_round(self.run, number, rows, kept)
        history = []
        if kept:
            pairs = [{**k, "prompt": self.prompts[k["task"]]} for k in kept]
            out_dir = self.run.stage_dir(STAGE) / "fine-tune"
            history = fine_tune(self.model, self.tokenizer, pairs, config, self.device, out_dir,
                                config.run.seed + number, self.run, STAGE)  # fmt: skip
        if self.curriculum is not None:
            self.curriculum.end_step(number)
        losses = [h["loss"] for h in history if "loss" in h]
        entry = {"round": number, **rounds.round_metrics(rows, kept),
                 "train/steps": float(len(losses)),
                 "train/loss": sum(losses) / len(losses) if losses else None}  # fmt: skip
        if self.curriculum is not None:
            entry.update(self.curriculum.metrics())
        return entry


def _loop(run: Run, config: Config, device: str) -> tuple[Loop, str]:
    """The round loop's parts (the policy resumed when a checkpoint is recorded), and
    the prompts' source; the rounds done are `run`'s step."""
    dataset, tasks, source = rl_prompts(run, config)  # fails fast, before models
    if not config.curriculum.enabled:
        rounds.level_pool(tasks, config.best_of_n.level)  # the same
    prompts: dict = {}
    for row in dataset:
        prompts.setdefault(row["task_id"], row["prompt"])  # a task's first prompt
    verify = config.rl_verify
    completions = run.stage_dir(STAGE) / COMPLETIONS
    completions.touch()
    run.add_artifact(STAGE, "completions", completions)
    curriculum = None
    if config.curriculum.enabled:
        levels = {t: task.level for t, task in tasks.items()}
        curriculum = Curriculum(config.curriculum, levels, config.run.seed)
    recorder = CompletionLog(completions, {t: k.level for t, k in tasks.items()}, curriculum)
    model, tokenizer = load_policy(run, config, device)
    if device == "cuda":
        model = model.to("cuda")
    return Loop(run, config, device, model, tokenizer, tasks, prompts, verify, recorder,
                curriculum), source  # fmt: skip


def train(run: Run, config: Config, device: str, stop: StopSignals) -> RlResult:
    """Best-of-N or reward-weighted SFT (`config.rl.algo`); see the module docstring."""
    started = time.monotonic()
    if config.rl.algo not in rounds.ALGOS:
        raise ValueError(f"best_of_n.train runs {rounds.ALGOS}, not {config.rl.algo!r}")
    loop, source = _loop(run, config, device)
    loop.model, done = _resume(run, config, loop.model, loop.curriculum)
    history_path = run.stage_dir(STAGE) / "log_history.json"
    history = json.loads(history_path.read_text()) if done and history_path.is_file() else []
    history = [h for h in history if h["round"] <= done]
    reporter = RoundReporter(run, config)
    try:
        for number in range(done + 1, config.best_of_n.rounds + 1):
            with stop.graceful():  # a signal waits for the round's end and checkpoint
                entry = loop.round(number)
                _checkpoint(run, config, loop.model, loop.tokenizer, number, loop.curriculum)
                history.append(entry)
                atomic_write_json(history_path, history)
                run.add_artifact(STAGE, "log_history", history_path)
                reporter.report(entry)
            if stop.signal:
                raise Interrupted(stop.signal)
    finally:
        reporter.close()
    return _finish(run, config, loop, source, history, started, done)


def _finish(run, config, loop: Loop, source, history, started, done) -> RlResult:
    """The final policy in `rl/final` with its card, the stage's info, the result."""
    rounds, lora = config.best_of_n.rounds, run.has_artifact("sft", "adapter")
    card = rl_card(run, config, source, len(loop.prompts))(rounds) + _card_lines(config)
    final = save_final(run, PolicyWriter(loop.model), loop.tokenizer, lora, card, stage=STAGE,
                       dtype=final_dtype(config.rl.bf16))  # fmt: skip
    run.set_step(STAGE, rounds)
    curriculum = loop.curriculum
    run.set_info(
        STAGE,
        algo=config.rl.algo,
        base_model=run.stage("sft")["info"].get("base_model"),
        lora=lora,
        data_source=source,
        prompts=len(loop.prompts),
        reward_scheme=loop.verify.reward_scheme,
        completions=loop.recorder.rows,
        mean_reward=loop.recorder.mean_reward,
        kept=[int(h["kept"]) for h in history],
        curriculum=None
        if curriculum is None
        else {"share": curriculum.share, "transitions": curriculum.transitions},
        device=loop.device,
        config={k: config_to_dict(config)[k] for k in RL_SECTIONS},
    )
    resumed = run.stage(STAGE)["info"].get("resumed_from_checkpoint") if done else None
    return RlResult(run_dir=run.path, output=final, lora=lora, steps=rounds,
                    completions=loop.recorder.rows, mean_reward=loop.recorder.mean_reward,
                    seconds=time.monotonic() - started, resumed_from=resumed)  # fmt: skip


def _card_lines(config: Config) -> str:
    bon = config.best_of_n
    keep = "every sample with a reward above 0, its loss weighted by reward / mean reward"
    if config.rl.algo == "best-of-n":
        keep = f"the top {bon.keep} per task with a reward above {bon.min_reward}"
    return (
        f"\n## {config.rl.algo}\n\nEach round: {bon.tasks} tasks x {bon.samples} samples, "
        f"verified; kept {keep}; fine-tuned on them for {bon.epochs} epoch(s). Every round's "
        "samples, rewards and kept set: `rl/rounds/round-N/samples.jsonl` in the run.\n"
    )
