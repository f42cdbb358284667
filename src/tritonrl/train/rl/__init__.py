"""The `rl` stage: the checks before it, and the dispatch to each algorithm (`ALGORITHMS`).

    tritonrl rl --run runs/demo --algo grpo|rloo|best-of-n|rwsft [--rl.max_steps 2 ...]
    run_rl(config, "runs/demo")                               # the same from Python

The start is what the run's manifest names for its finished `sft` stage: the full model
(`sft/model`), or the base model with the SFT adapter (`sft/adapter`), whose LoRA
weights RL goes on training (`load_policy`; see grpo.py's "Departures"). The prompts are
the SFT training prompts with their task ids (`tritonrl.train.rl.data`), drawn by the
adaptive curriculum (`tritonrl.train.rl.curriculum`) when `curriculum.enabled`; the reward
is the verifier through the warm worker pool (`tritonrl.reward.adapters`).

Every verified completion is appended to `RUN/rl/completions.jsonl` (`CompletionLog`),
one line each: `{"step", "task", "level", "reward", "stage", "correct", "flags", "error",
"speedup", "completion"}`, `step` being the optimizer step (GRPO, RLOO) or round
(best-of-n, rwsft) it was generated for, counted from 1 as the trainer's log counts. The
manifest's stage `rl` records its step, checkpoints, the final model or adapter
(`rl/model` or `rl/adapter`, and `rl/tokenizer`), the completions file, and the
algorithm's settings in its info (`config`: the RL sections it trained with).
SIGTERM/SIGINT stop at the next step boundary with a checkpoint and mark the stage
interrupted; the same command resumes it.

A resume keeps the settings the stage trained with: the CLI's base config is the run's
with the stage's recorded RL sections on top (`tritonrl.runs.resume.recorded_config`,
which `tritonrl resume` reads too), so `--rl.max_steps 50` alone raises the budget and
changes nothing else. An override that does change a setting is taken, as RL may change
its own sections, and named in a warning (`goes on from step N with other settings than
it trained with: ...`), the budget aside.

The algorithms: `grpo` and `rloo` (TRL's trainers, `tritonrl.train.rl.grpo`), `best-of-n`
and `rwsft` (sample, verify, fine-tune: `tritonrl.train.rl.best_of_n`).

GRPO and RLOO generate through vLLM where `rl.vllm` allows (`tritonrl.train.generation`);
best-of-n and rwsft sample with transformers.

GRPO and RLOO also train in several processes (`accelerate launch --num_processes N -m
tritonrl rl ...`): rank 0 checks and writes the run, the others open it read-only
(`tritonrl.train.ranks`); best-of-n and rwsft refuse several (`check_ranks`).

The package: `common` (what every algorithm shares: the stage record, the completion
log, the policy), `grpo` (GRPO, RLOO), `best_of_n` and `rounds` (best-of-n, rwsft),
`hierarchical`, `curriculum`, `data` (the prompts), `multiturn` and `returns`
(`rl.turns` > 1: conversations with the verifier's feedback, each answer trained on
with its discounted return).

With `verify.endpoint` (or $TRITONRL_VERIFY_ENDPOINT) the reward is a `tritonrl serve`'s:
rank 0 asks its /health with the configured token before the stage starts
(`tritonrl.verify.client.preflight`), and a service that is not there, or refuses the
token, stops RL in one line before the model loads and before the run is written.

What it does NOT do: `run.report_to`, `run.seed` and `data.decontaminate_*`, which RL
may change too, are not among the recorded sections: a resume takes them from the run's
(SFT's) config unless given again.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path

from tritonrl.config import RL_FREE_KEYS, RL_SECTIONS, Config, rl_device
from tritonrl.config_loader import config_to_dict, diff_configs
from tritonrl.models.adapters import relocate_adapters
from tritonrl.runs import Run, RunError, StopSignals
from tritonrl.runs.lifecycle import consistent_checkpoint, stage, stage_services
from tritonrl.train.ranks import Ranks
from tritonrl.train.rl import best_of_n, grpo
from tritonrl.train.rl.common import STAGE, RlResult
from tritonrl.train.sft import quiet_progress
from tritonrl.verify.client import preflight

log = logging.getLogger(__name__)

# --algo -> the function that trains it: train(run, config, device, stop) -> RlResult
ALGORITHMS: dict[str, Callable[[Run, Config, str, StopSignals], RlResult]] = {
    "grpo": grpo.train,
    "rloo": grpo.train,
    "best-of-n": best_of_n.train,
    "rwsft": best_of_n.train,
}


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
            "run.report_to, run.seed, data.decontaminate_against, data.decontaminate_form): "
            "drop --config to start from the run's own config"
        )


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


def settings_line(config: Config) -> str:
    """The RL settings a user checks first, in one log line: the algorithm and budget, the
    reward's scheme, wall clock and timing, the curriculum (with its retirement), RL's own
    generator tasks and the pass-rate filter."""
    rl, cur, verify = config.rl, config.curriculum, config.rl_verify
    own = " (rl.verify_timeout_s)" if rl.verify_timeout_s is not None else " (verify.timeout_s)"
    rounds = rl.algo not in ("grpo", "rloo")
    budget = f"{config.best_of_n.rounds} rounds" if rounds else f"{rl.max_steps} steps"
    if config.verify.endpoint:  # the service verifies under its own settings
        reward = (
            f"reward {config.rl_reward_scheme}, verified by the service at "
            f"{config.verify.endpoint} (verify.endpoint) under its own verify settings"
        )
    else:
        reward = (
            f"reward {config.rl_reward_scheme} with a {verify.timeout_s:g}s wall clock per "
            f"candidate{own}, timed in {verify.trials}-{verify.max_trials} trials to an RSE "
            f"of {verify.target_rse:g} within {verify.timing_max_seconds:g}s"
        )
    parts = [f"--algo {rl.algo}, {budget}, lr {rl.learning_rate:g}", reward]
    if not cur.enabled:
        parts.append("curriculum off")
    else:
        retire = [f"retire_after {cur.retire_after}"] if cur.retire_after else []
        retire += [f"retire_unsolved_after {cur.retire_unsolved_after}"] * bool(
            cur.retire_unsolved_after
        )
        parts.append(f"curriculum on ({', '.join(retire) or 'no retirement'})")
    if rl.generated_tasks:
        if rl.fresh_source == "generator":
            parts.append(f"{rl.generated_tasks} fresh generator tasks (rl.generated_tasks)")
        else:
            parts.append(f"{rl.generated_tasks} fresh task-family tasks (rl.generated_tasks, "
                         f"rl.fresh_source {rl.fresh_source})")  # fmt: skip
    if rl.pass_rates:
        parts.append(f"pass-rate filter {rl.pass_rates} "
                     f"[{rl.pass_rate_min:g}, {rl.pass_rate_max:g}]")  # fmt: skip
    else:
        parts.append("no pass-rate filter")
    return "; ".join(parts)


def check_ranks(config: Config, ranks: Ranks) -> None:
    """A ValueError for what several processes cannot train: best-of-n and rwsft (rounds
    of generation and fine-tuning in one process)."""
    if not ranks.many:
        return
    if config.rl.algo not in ("grpo", "rloo"):
        raise ValueError(
            f"rl --algo {config.rl.algo} runs in one process, not {ranks.world}: launch it "
            "without `accelerate launch`/torchrun (only grpo and rloo train on several GPUs)"
        )


def run_rl(config: Config, run_dir: str | Path) -> RlResult:
    """The RL stage of the run in `run_dir`, which must hold a finished `sft` stage.

    A failure marks the stage failed (with its error) and is re-raised; SIGTERM/SIGINT
    mark it interrupted and raise `Interrupted`; an interrupted stage resumes from its
    recorded checkpoint. A config that changes more than the RL sections of the run's
    is refused (the CLI starts from the run's own config)."""
    if importlib.util.find_spec("trl") is None:
        raise ImportError("the rl stage needs TRL: pip install trl")
    ranks = Ranks.from_env()
    check_ranks(config, ranks)
    device = rl_device(config)

    def opened() -> tuple[Run, bool]:
        run = Run.open(run_dir)
        require_sft(run)
        check_against_run(run, config)
        check_algo(run, config)  # before anything is written: a refusal changes nothing
        extend = budget_raised(run, config)
        # the reward's service answers, with this token, before the model loads
        preflight(config.rl_verify)
        relocate_adapters(run)  # here, before the other ranks read the adapters
        return run, extend

    # the other ranks open the run read-only once rank 0 has checked it
    opened_here = ranks.from_leader(opened, device=device, share=False)
    run, extend = opened_here or (Run.open(run_dir, readonly=True), False)
    # the stage starts after the store answered; its last sync sees the outcome
    with (
        StopSignals() as stop,
        quiet_progress(),
        stage_services(run, config, stop),
        stage(run, STAGE, reopen=extend),
    ):
        # RL's own sections, from the start: what `tritonrl resume` goes on with.
        ran = {k: config_to_dict(config)[k] for k in RL_SECTIONS}
        record = run.stage(STAGE)
        before = (record.get("info") or {}).get("config") if record.get("step") else None
        budget = ("rl.max_steps:", "best_of_n.rounds:")  # raised on purpose: said above
        changed = (
            [c for c in diff_configs(before, ran) if not c.startswith(budget)] if before else []
        )
        if changed:
            log.warning("the rl stage goes on from step %d with other settings than it "
                        "trained with: %s", record["step"], "; ".join(changed))  # fmt: skip
        run.set_info(STAGE, config=ran)
        log.info("RL settings: %s", settings_line(config))
        result = ALGORITHMS[config.rl.algo](run, config, device, stop)
    log.info(
        "RL (%s) done in %.0fs: %d steps, mean reward %s",
        config.rl.algo,
        result.seconds,
        result.steps,
        result.mean_reward,
    )
    return result
