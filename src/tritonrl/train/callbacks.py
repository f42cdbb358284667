"""Trainer callbacks shared by the training stages (SFT, and the RL trainers).

`ManifestCallback(run, stage)` records the global step at every log, and every checkpoint
the trainer has finished writing, sealed, as the stage's `checkpoint` artifact (so a
resume finds it through the manifest, never by listing directories; it must come after
every callback that writes into the checkpoint), which wakes the store sync; with several
ranks, rank 0 records it once every rank has written its part. `EvaluateAtEnd` makes the
last step evaluate (when evaluation is on), so the final validation loss is in the log
history and the logs, whatever the eval interval. `StopOnSignal(stop)` turns a
SIGTERM/SIGINT (`tritonrl.runs.StopSignals`) into a checkpoint at the next step boundary
and a stop; with several ranks the stop is agreed at every step end (`Ranks.agree_stop`),
so a signal to any rank stops them all at the same step. `TrainingBar` is the one
progress bar of a training stage: steps, with the latest loss and eval loss beside it (it
replaces transformers' bar, its nested eval bar and its printed log dicts).
`ModelCardCallback(card)` writes our model card into every checkpoint (in place of PEFT's
template). `NonFiniteGuard(advice, run, stage)` stops training with a `NonFiniteError`
(naming the step, what went non-finite, the last good checkpoint and what to try) at the
first NaN or infinite gradient, trainable weight, logged loss, grad norm or eval loss,
before that step can be saved: a checkpoint never holds non-finite weights. Stages set
the trainer's `logging_nan_inf_filter` off, so a NaN loss is logged as NaN (the filter
logs the window's running mean, often 0, instead). `TiedWeightsLoad`, a trainer mixin,
drops from a checkpoint load's missing keys those of weights tied to a loaded one
(`untied_missing_keys`: a tied output embedding is saved once, no warning about a key
that was never apart).

What it does NOT do: it does not write checkpoints (the trainer does, with rotation of
the old ones) or upload them (`runs/sync.py`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from tritonrl.runs import Run, StopSignals
from tritonrl.runs.lifecycle import record_checkpoint
from tritonrl.train.ranks import Ranks

log = logging.getLogger(__name__)


def untied_missing_keys(model, missing: list[str]) -> list[str]:
    """`missing` without the names of weights that share their tensor with a weight
    whose name is not missing (Qwen2's `lm_head.weight` is `model.embed_tokens.weight`)."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    twins = {n: names for names in groups.values() if len(names) > 1 for n in names}
    gone = set(missing)
    return [k for k in missing if not any(t not in gone for t in twins.get(k, ()))]


class TiedWeightsLoad:
    """Mixin for a transformers Trainer: no "missing keys" warning for tied weights."""

    def _issue_warnings_after_load(self, load_result) -> None:
        missing = untied_missing_keys(self.model, load_result.missing_keys)
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))


def _checkpoint(args, state) -> Path:
    return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"


class ManifestCallback(TrainerCallback):
    def __init__(self, run: Run, stage: str, ranks: Ranks | None = None):
        self.run = run
        self.stage = stage
        self.ranks = ranks or Ranks.from_env()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero:
            self.run.set_step(self.stage, state.global_step)

    def on_save(self, args, state, control, **kwargs):
        # Called after the checkpoint is complete and the old ones are rotated out, on
        # every rank: the seal covers every rank's files (RNG states, shards) once all
        # are written.
        if self.ranks.many:
            self.ranks.barrier(args.device.type)
        if not state.is_world_process_zero:
            return
        checkpoint = _checkpoint(args, state)
        if not checkpoint.is_dir():
            log.warning("trainer reported a save but %s does not exist", checkpoint)
            return
        record_checkpoint(self.run, self.stage, checkpoint, state.global_step)


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinite loss, gradient or weight (`NonFiniteGuard`)."""


LOGGED = ("loss", "grad_norm", "eval_loss")  # logged values that must stay finite


def _first_nonfinite(named: Iterable[tuple[str, object]]) -> str | None:
    """The name of the first tensor that holds a NaN or infinity, or None. One norm per
    tensor (no copy of it): NaN or inf anywhere makes the norm so."""
    import torch

    for name, tensor in named:
        if tensor is not None and not torch.isfinite(torch.linalg.vector_norm(tensor)):
            return name
    return None


class NonFiniteGuard(TrainerCallback):
    """Stop at the first non-finite gradient (before the optimizer step), trainable
    weight (after it, before any save), or logged loss, grad norm or eval loss (before
    that step's save), with a `NonFiniteError` naming the step. `advice` says what to
    try; with `run` and `stage` the message names the last good checkpoint (recorded).
    Costs one norm per trainable tensor twice a step (memory reads, no copies)."""

    def __init__(self, advice: str, run: Run | None = None, stage: str | None = None):
        self.advice, self.run, self.stage = advice, run, stage

    def _stop(self, state, what: str, step: int):
        total = f" of {state.max_steps}" if state.max_steps and state.max_steps > 0 else ""
        kept = "no checkpoint was written before it"
        if self.run is not None and self.run.has_artifact(self.stage, "checkpoint"):
            recorded = self.run.stage(self.stage)["artifacts"]["checkpoint"]
            kept = f"the last good checkpoint, {recorded}, is kept"
        raise NonFiniteError(
            f"{what} at step {step}{total}: training stopped before that step was saved; "
            f"{kept}. Try {self.advice}"
        )

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        grads = ((n, p.grad) for n, p in model.named_parameters() if p.requires_grad)
        bad = _first_nonfinite(grads)
        if bad is not None:
            self._stop(state, f"the gradient is not finite (first in {bad}): the loss or "
                       "its backward pass overflowed", state.global_step + 1)  # fmt: skip

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        weights = ((n, p.detach()) for n, p in model.named_parameters() if p.requires_grad)
        bad = _first_nonfinite(weights)
        if bad is not None:
            self._stop(state, f"the weights are not finite after the update (first: {bad})",
                       state.global_step)  # fmt: skip

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in LOGGED:
            value = (logs or {}).get(key)
            if isinstance(value, float) and not math.isfinite(value):
                self._stop(state, f"{key} is {value}", state.global_step)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        value = (metrics or {}).get("eval_loss")
        if isinstance(value, float) and not math.isfinite(value):
            self._stop(state, f"eval_loss is {value}", state.global_step)


class EvaluateAtEnd(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if args.eval_strategy != "no" and state.max_steps and state.global_step >= state.max_steps:
            control.should_evaluate = True
        return control


class StopOnSignal(TrainerCallback):
    """Checkpoint and stop at the first step boundary after `stop` caught a signal (on
    any rank: the ranks agree at every step end, and a rank stopped by another's signal
    records that one as its own `stop.signal`)."""

    def __init__(self, stop: StopSignals, ranks: Ranks | None = None):
        self.stop = stop
        self.ranks = ranks or Ranks.from_env()

    def on_step_end(self, args, state, control, **kwargs):
        # Decided on `agreed` alone: a signal landing after the all-reduce waits for the
        # next step, on this rank as on the others.
        agreed = self.ranks.agree_stop(self.stop.signal, args.device if self.ranks.many else None)
        if agreed and not self.stop.signal:
            log.warning("rank %d stops at step %d with the others (%s on another rank)",
                        self.ranks.rank, state.global_step, agreed)  # fmt: skip
            self.stop.signal = agreed
        if agreed:
            control.should_save = True
            control.should_training_stop = True
        return control


class ModelCardCallback(TrainerCallback):
    """Our card (`card(steps)` -> Markdown) as README.md of every checkpoint."""

    def __init__(self, card: Callable[[int], str]):
        self.card = card

    def on_save(self, args, state, control, **kwargs):
        checkpoint = _checkpoint(args, state)
        if state.is_world_process_zero and checkpoint.is_dir():
            (checkpoint / "README.md").write_text(self.card(state.global_step))


class TrainingBar(TrainerCallback):
    """One tqdm bar over the training steps; losses as its postfix, nothing printed."""

    def __init__(self) -> None:
        self.bar = None
        self.shown: dict[str, str] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=state.max_steps, initial=state.global_step, desc="training", unit="step"
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs:
            return
        for key in ("loss", "eval_loss"):
            if isinstance(logs.get(key), (int, float)):
                self.shown[key] = f"{logs[key]:.4g}"
        self.bar.set_postfix(self.shown, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def tensorboard(run: Run, stage: str) -> TrainerCallback:
    """TensorBoard's callback writing into RUN/<stage>/tensorboard (recorded), not the
    trainer's default folder under the checkpoints."""
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    tb_dir = run.stage_dir(stage) / "tensorboard"
    tb_dir.mkdir(exist_ok=True)
    run.add_artifact(stage, "tensorboard", tb_dir)
    return TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(tb_dir)))
