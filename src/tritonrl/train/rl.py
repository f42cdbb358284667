"""The `rl` stage: what every RL algorithm shares, and the dispatch to each.

    tritonrl rl --run runs/demo --algo grpo|rloo|best-of-n|rwsft [--rl.max_steps 2 ...]
    run_rl(config, "runs/demo")                               # the same from Python

The start is what the run's manifest names for its finished `sft` stage: the full model
(`sft/model`), or the base model with the SFT adapter (`sft/adapter`), whose LoRA
weights RL goes on training (`load_policy`; see grpo.py's "Departures"). The prompts are
the SFT training prompts with their task ids (`tritonrl.train.rl_data`), drawn by the
adaptive curriculum (`tritonrl.train.curriculum`) when `curriculum.enabled`; the reward
is the verifier through the warm worker pool (`tritonrl.reward.adapters`).

Every verified completion is appended to `RUN/rl/completions.jsonl` (`CompletionLog`),
one line each: `{"step", "task", "level", "reward", "stage", "correct", "flags", "error",
"speedup", "completion"}`, `step` being the optimizer step (GRPO, RLOO) or round
(best-of-n, rwsft) it was generated for, counted from 1 as the trainer's log counts. The
manifest's stage `rl` records its step, checkpoints, the final model or adapter
(`rl/model` or `rl/adapter`, and `rl/tokenizer`), the completions file, and the
algorithm's settings in its info.
SIGTERM/SIGINT stop at the next step boundary with a checkpoint and mark the stage
interrupted; the same command resumes it.

The algorithms: `grpo` and `rloo` (TRL's trainers, `tritonrl.train.grpo`), `best-of-n`
and `rwsft` (sample, verify, fine-tune: `tritonrl.train.best_of_n`).

GRPO and RLOO generate through vLLM where `rl.vllm` allows (`tritonrl.train.generation`);
best-of-n and rwsft sample with transformers.

What it does NOT do: RL settings changed between an interrupted attempt and its resume
are not detected (the stage info records each attempt's).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from tritonrl.config import STORE_KEYS, TINY, Config, rl_device
from tritonrl.config_loader import config_to_dict, diff_configs
from tritonrl.runs import RESUMED, Interrupted, Run, RunError, StopSignals
from tritonrl.runs.lifecycle import consistent_checkpoint, stage_services

log = logging.getLogger(__name__)

STAGE = "rl"
# Sections an RL attempt may set differently from the run's recorded (SFT) config.
RL_SECTIONS = ("rl", "best_of_n", "curriculum", "pipeline", "verify")
# ... and keys of other sections that do not change what SFT trained.
RL_FREE_KEYS = {"run": ("report_to", "seed", *STORE_KEYS)}
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


def require_sft(run: Run) -> None:
    """A RunError naming the missing stage unless `run`'s `sft` stage is done."""
    status = run.status("sft")
    if status != "done" or not (
        run.has_artifact("sft", "model") or run.has_artifact("sft", "adapter")
    ):
        raise RunError(
            f"run {run.path}: stage sft is {status}, not done; RL starts from the SFT model: "
            f"run `tritonrl sft --run {run.path}` first"
        )


def check_against_run(run: Run, config: Config) -> None:
    """A ValueError listing what differs when `config` changes more than the RL sections
    (`RL_SECTIONS`, `RL_FREE_KEYS`) of the config the run recorded: the model, LoRA and
    data are SFT's."""

    def kept(config: dict) -> dict:
        return {
            section: {k: v for k, v in (values or {}).items()
                      if k not in RL_FREE_KEYS.get(section, ())}
            for section, values in config.items()
            if section not in RL_SECTIONS
        }  # fmt: skip

    changes = diff_configs(kept(run.config), kept(config_to_dict(config)))
    if changes:
        raise ValueError(
            f"run {run.path} was trained with a different config; differing: "
            + "; ".join(changes)
            + f". RL may change only the {', '.join(RL_SECTIONS)} sections (and "
            "run.report_to, run.seed): drop --config to start from the run's own config"
        )


def load_policy(run: Run, config: Config, device: str):
    """(model to train, tokenizer) from the run's SFT stage, found through its manifest:
    a full model in float32 (its weights are trained; `rl.bf16` autocasts), or the base
    in bf16 under `rl.bf16` with the SFT adapter trainable in float32 (PEFT upcasts it):
    `tritonrl.train.precision`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tritonrl.models.adapters import relocate_adapters
    from tritonrl.models.load import load_causal_lm
    from tritonrl.train.precision import load_dtype

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
        from tritonrl.reward.adapters import completion_text

        lines = [
            json.dumps(
                {"step": step, "task": d["task"], "level": self.levels.get(d["task"]), **d,
                 "completion": completion_text(c)},
                ensure_ascii=False,
            )
            for d, c in zip(details, completions, strict=True)
        ]  # fmt: skip
        with self._lock:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
            self.rows += len(lines)
            self.total += sum(d["reward"] for d in details)
            if self.curriculum is not None:
                for d in details:
                    self.curriculum.observe(d["task"], d["correct"])

    @property
    def mean_reward(self) -> float | None:
        return self.total / self.rows if self.rows else None

    def trl_reward(self, reward):
        """TRL's async reward function `reward` (make_trl_reward), recording each batch."""

        async def tritonrl_verifier(prompts, completions, **kwargs) -> list[float]:
            rewards = await reward(prompts, completions, **kwargs)
            state = kwargs.get("trainer_state")
            self.record(
                state.global_step + 1 if state is not None else None,  # the step it trains
                reward.scorer.last_details,
                completions,
            )
            return rewards

        tritonrl_verifier.scorer = reward.scorer
        return tritonrl_verifier


def record_info(run: Run, config: Config, recorder: CompletionLog, curriculum, **info) -> None:
    """What every RL algorithm records in the stage's info, plus its own `info`."""
    run.set_info(
        STAGE,
        algo=config.rl.algo,
        base_model=run.stage("sft")["info"].get("base_model"),
        lora=run.has_artifact("sft", "adapter"),
        reward_scheme=config.rl.reward_scheme or config.verify.reward_scheme,
        completions=recorder.rows,
        mean_reward=recorder.mean_reward,
        curriculum=None
        if curriculum is None
        else {"share": curriculum.share, "transitions": curriculum.transitions},
        config={k: config_to_dict(config)[k] for k in RL_SECTIONS},
        **info,
    )


def resume_point(run: Run) -> str | None:
    """The checkpoint an interrupted `rl` stage recorded (noted as resumed_from), or None."""
    checkpoint = consistent_checkpoint(run, STAGE)  # sealed and whole, else an older one
    if checkpoint is None:
        return None
    relative = run.relpath(checkpoint)
    log.info("resuming RL of %s from %s (step %s)", run.path, relative, run.stage(STAGE)["step"])
    run.set_info(STAGE, **{RESUMED: relative})
    return str(checkpoint)


def check_algo(run: Run, config: Config) -> None:
    """A RunError when the run's rl stage has trained with another algorithm and has
    something to go on from (it is done, or holds a checkpoint): its checkpoints are that
    algorithm's. Checked before the stage is touched, so the refusal writes nothing."""
    if run.status(STAGE) == "pending":
        return
    recorded = run.stage(STAGE)["info"].get("algo")
    if recorded in (None, config.rl.algo):
        return
    done = run.status(STAGE) == "done"
    if not done and consistent_checkpoint(run, STAGE) is None:
        return  # nothing to go on from: the new algorithm starts afresh
    state = "is done" if done else f"stopped ({run.status(STAGE)})"
    raise RunError(
        f"stage 'rl' of run {run.path} {state} at step {run.stage(STAGE)['step']}, trained "
        f"with --algo {recorded}, whose checkpoints --algo {config.rl.algo} cannot go on "
        f"from; go on with --algo {recorded}, or train --algo {config.rl.algo} in a new "
        "run directory (`tritonrl sft --run NEW ...`, then `tritonrl rl --run NEW`)"
    )


def budget_raised(run: Run, config: Config) -> bool:
    """Whether a done `rl` stage is to go on: its budget (`rl.max_steps`, or
    `best_of_n.rounds` for best-of-n and rwsft) is above the steps it did, and it has a
    consistent checkpoint to go on from. False for a stage not done; a RunError that
    says what to do for a done stage whose budget was not raised."""
    if run.status(STAGE) != "done":
        return False
    done = run.stage(STAGE)["step"]
    rounds = config.rl.algo not in ("grpo", "rloo")
    budget, name = ((config.best_of_n.rounds, "best_of_n.rounds") if rounds
                    else (config.rl.max_steps, "rl.max_steps"))  # fmt: skip
    if budget <= done:
        raise RunError(
            f"stage 'rl' of run {run.path} is done ({done} steps, --algo {config.rl.algo}); "
            f"raise --{name} above {done} to train on from its last checkpoint, or start a "
            "new run directory"
        )
    if consistent_checkpoint(run, STAGE) is None:
        raise RunError(
            f"stage 'rl' of run {run.path} is done but holds no consistent checkpoint to "
            "train on from; start a new run directory"
        )
    log.info("raising the RL budget of %s: %s %d -> %d", run.path, name, done, budget)
    return True


def _train(run: Run, config: Config, device: str, stop: StopSignals) -> RlResult:
    if config.rl.algo in ("grpo", "rloo"):
        from tritonrl.train.grpo import train
    else:
        from tritonrl.train.best_of_n import train
    return train(run, config, device, stop)


def run_rl(config: Config, run_dir: str | Path) -> RlResult:
    """The RL stage of the run in `run_dir`, which must hold a finished `sft` stage.

    A failure marks the stage failed (with its error) and is re-raised; SIGTERM/SIGINT
    mark it interrupted and raise `Interrupted`; an interrupted stage resumes from its
    recorded checkpoint. A config that changes more than the RL sections of the run's
    is refused (the CLI starts from the run's own config)."""
    from tritonrl.train.sft import quiet_progress

    if importlib.util.find_spec("trl") is None:
        raise ImportError("the rl stage needs TRL: pip install trl")
    run = Run.open(run_dir)
    require_sft(run)
    check_against_run(run, config)
    check_algo(run, config)  # before anything is written: a refusal changes nothing
    extend = budget_raised(run, config)
    device = rl_device(config)
    with StopSignals() as stop, quiet_progress(), stage_services(run, config, stop):
        # after the store answered; its last sync sees the outcome
        run.start_stage(STAGE, reopen=extend)
        # RL's own sections, from the start: what `tritonrl resume` goes on with.
        run.set_info(STAGE, config={k: config_to_dict(config)[k] for k in RL_SECTIONS})
        try:
            result = _train(run, config, device, stop)
        except Interrupted as e:
            run.interrupt_stage(STAGE, e.signal_name)
            raise
        except KeyboardInterrupt:
            run.interrupt_stage(STAGE, "SIGINT")
            raise
        except BaseException as e:
            run.fail_stage(STAGE, f"{type(e).__name__}: {e}")
            raise
        run.finish_stage(STAGE)
    log.info(
        "RL (%s) done in %.0fs: %d steps, mean reward %s",
        config.rl.algo,
        result.seconds,
        result.steps,
        result.mean_reward,
    )
    return result
