"""What every RL algorithm shares: the stage's record, the completion log, the policy.

    recorder = CompletionLog(run.stage_dir(STAGE) / COMPLETIONS, levels, curriculum)
    model, tokenizer = load_policy(run, config, device)     # SFT's result, to train on
    record_info(run, config, recorder, curriculum, rounds=3)  # the stage info at the end

Every verified completion is appended to `RUN/rl/completions.jsonl` (`CompletionLog`),
one line each: `{"step", "task", "level", "reward", "stage", "correct", "flags", "error",
"speedup", "completion"}`, `step` being the optimizer step (GRPO, RLOO) or round
(best-of-n, rwsft) it was generated for, counted from 1 as the trainer's log counts; the
curriculum, when there is one, is told of each verdict.

The algorithms (grpo.py, best_of_n.py) import this module, never the package's
`__init__` (which dispatches to them).

What it does NOT do: it does not start, finish or dispatch the stage (`run_rl` does) or
generate and score completions (the algorithms do).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from tritonrl.config import RL_SECTIONS, TINY, Config
from tritonrl.config_loader import config_to_dict
from tritonrl.models.adapters import relocate_adapters
from tritonrl.models.load import load_causal_lm
from tritonrl.reward.adapters import completion_text
from tritonrl.runs import Run, RunError
from tritonrl.train.precision import load_dtype

log = logging.getLogger(__name__)

STAGE = "rl"
COMPLETIONS = "completions.jsonl"
CURRICULUM_FILE = "curriculum.json"  # in each checkpoint: the curriculum's state


@dataclass
class RlResult:
    run_dir: Path
    output: Path  # the final adapter or full-model directory
    lora: bool
    steps: int  # optimizer steps (grpo, rloo) or rounds (best-of-n, rwsft)
    completions: int  # rows written to rl/completions.jsonl by this attempt
    mean_reward: float | None  # over this attempt's completions
    seconds: float
    resumed_from: str | None = None


def load_policy(run: Run, config: Config, device: str):
    """(model to train, tokenizer) from the run's SFT stage, found through its manifest:
    a full model in float32 (its weights are trained; `rl.bf16` autocasts), or the base
    in bf16 under `rl.bf16` with the SFT adapter trainable in float32 (PEFT upcasts it):
    `tritonrl.train.precision`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    relocate_adapters(run)
    tokenizer = AutoTokenizer.from_pretrained(run.artifact("sft", "tokenizer"))
    if run.has_artifact("sft", "model"):
        return AutoModelForCausalLM.from_pretrained(
            run.artifact("sft", "model"), dtype=load_dtype(config.rl.bf16, lora=False)
        ), tokenizer
    from peft import PeftModel

    name = run.stage("sft")["info"].get("base_model")
    if not name:
        raise RunError(f"run {run.path}: stage sft records an adapter but no base_model")
    base_path = run.artifact("tiny_model", "model") if name == TINY else name
    base = load_causal_lm(
        base_path,
        dtype=load_dtype(config.rl.bf16, lora=True),
        revision=config.model.revision if name != TINY else None,
        trust_remote_code=config.model.trust_remote_code,
    )
    adapter = run.artifact("sft", "adapter")
    return PeftModel.from_pretrained(base, adapter, is_trainable=True), tokenizer


class CompletionLog:
    """Every verified completion, one JSONL line, and the curriculum told of each."""

    def __init__(self, path: Path, levels: dict[str, int], curriculum=None):
        self.path, self.levels, self.curriculum = path, levels, curriculum
        self.rows = 0
        self.total = 0.0
        self._lock = threading.Lock()

    def record(self, step: int | None, details: list[dict], completions: list[str]) -> None:
        lines = [
            json.dumps(
                {"step": step, "task": d["task"], "level": self.levels.get(d["task"]), **d,
                 "completion": completion_text(c)},
                ensure_ascii=False,
            )
            for d, c in zip(details, completions, strict=True)
        ]  # fmt: skip
        with self._lock:
            # one O_APPEND write: the ranks of a multi-process trainer append to one
            # file, and a line of one never lands inside a line of another
            data = "".join(line + "\n" for line in lines).encode("utf-8")
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            self.rows += len(lines)
            self.total += sum(d["reward"] for d in details)
            if self.curriculum is not None:
                for d in details:
                    self.curriculum.observe(d["task"], d["correct"])

    @property
    def mean_reward(self) -> float | None:
        return self.total / self.rows if self.rows else None

    def trl_reward(self, reward):
        """TRL's async reward function `reward` (make_trl_reward), recording each batch;
        its `with_details` records too, and returns `(rewards, details)`."""

        async def with_details(prompts, completions, **kwargs):
            rewards, details = await reward.with_details(prompts, completions, **kwargs)
            state, ahead = kwargs.get("trainer_state"), kwargs.get("rl_step")
            step = state.global_step + 1 if state is not None else None  # the step it trains
            step = ahead[0] if ahead else step  # verified a step early (rl.overlap_reward)
            self.record(step, details, completions)
            return rewards, details

        async def tritonrl_verifier(prompts, completions, **kwargs) -> list[float]:
            return (await with_details(prompts, completions, **kwargs))[0]

        tritonrl_verifier.scorer = reward.scorer
        tritonrl_verifier.with_details = with_details
        return tritonrl_verifier


def record_info(run: Run, config: Config, recorder: CompletionLog, curriculum, **info) -> None:
    """What every RL algorithm records in the stage's info, plus its own `info`."""
    run.set_info(
        STAGE,
        algo=config.rl.algo,
        base_model=run.stage("sft")["info"].get("base_model"),
        lora=run.has_artifact("sft", "adapter"),
        reward_scheme=config.rl_reward_scheme,
        completions=recorder.rows,
        mean_reward=recorder.mean_reward,
        curriculum=None
        if curriculum is None
        else {"share": curriculum.share, "transitions": curriculum.transitions},
        config={k: config_to_dict(config)[k] for k in RL_SECTIONS},
        **info,
    )
