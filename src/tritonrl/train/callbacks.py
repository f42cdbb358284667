"""Trainer callbacks shared by the training stages (SFT, and the RL trainers).

`ManifestCallback(run, stage)` records the global step at every log, and every
checkpoint the trainer has finished writing as the stage's `checkpoint` artifact (so a
resume finds it through the manifest, never by listing directories). `EvaluateAtEnd`
makes the last step evaluate (when evaluation is on), so the final validation loss is in
the log history and the logs, whatever the eval interval.

What it does NOT do: it does not write checkpoints (the trainer does, with rotation of
the old ones) or upload them (the store/sync issue).
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from tritonrl.runs import Run

log = logging.getLogger(__name__)


class ManifestCallback(TrainerCallback):
    def __init__(self, run: Run, stage: str):
        self.run = run
        self.stage = stage

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero:
            self.run.set_step(self.stage, state.global_step)

    def on_save(self, args, state, control, **kwargs):
        # Called after the checkpoint is complete and the old ones are rotated out.
        if not state.is_world_process_zero:
            return
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if not checkpoint.is_dir():
            log.warning("trainer reported a save but %s does not exist", checkpoint)
            return
        self.run.add_artifact(self.stage, "checkpoint", checkpoint)
        self.run.set_step(self.stage, state.global_step)


class EvaluateAtEnd(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if args.eval_strategy != "no" and state.max_steps and state.global_step >= state.max_steps:
            control.should_evaluate = True
        return control
