"""Fine-tuning on weighted (prompt, completion) pairs: TRL's SFTTrainer, weighted loss.

    history = fine_tune(model, tokenizer, [{"prompt": messages, "completion": text,
                                            "weight": 1.0}, ...], config, "cpu", scratch, seed)

The fine-tuning step of best-of-n and rwsft (`tritonrl.train.rl.best_of_n`), in place on
`model` (a full model or a trainable PEFT adapter). The pairs become a conversational
prompt/completion dataset (the prompt rendered with the tokenizer's chat template as
SFT renders it, the completion as the assistant's turn) with a `weight` column that the
collator hands to the loss. Settings (`trainer_args`): `best_of_n.epochs` epochs at
`best_of_n.learning_rate`, constant, a fresh AdamW each call (no weight decay: TRL's
default); batch `sft.per_device_batch_size` x `sft.gradient_accumulation` and
`sft.max_length` (what fits this model in training), `rl.bf16` (autocast over the
policy's float32 trainable weights: `rl.load_policy`), `rl.gradient_checkpointing`;
nothing saved, nothing reported (the caller checkpoints and reports); a NaN or infinite
loss stops it (`NonFiniteGuard`), before the round is checkpointed.

The loss (`WeightedSFTTrainer.compute_loss`): completion tokens only; for a batch,
sum over its samples of weight x (the sample's summed token negative log-likelihood),
divided by the completion tokens of the batch (of the whole accumulated batch when the
trainer counts them, as TRL does). With every weight 1 it is TRL's SFT loss; a weight of
0 removes the sample. It uses TRL's fused LM head (per-token log-probabilities without
the full logits), which `SFTTrainer` installs on the model.

What it does NOT do: no packing, no evaluation, no checkpoints of its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonrl.config import Config
from tritonrl.train.precision import nonfinite_guard, tf32_arg
from tritonrl.train.trl_args import trl_config


def trainer_args(config: Config, out_dir: Path, device: str, seed: int):
    """TRL's `SFTConfig` of one round's fine-tuning (see the module docstring)."""
    from trl import SFTConfig

    bon, sft = config.best_of_n, config.sft
    wanted = dict(
        output_dir=str(out_dir),
        learning_rate=bon.learning_rate,
        num_train_epochs=bon.epochs,
        lr_scheduler_type="constant",
        per_device_train_batch_size=sft.per_device_batch_size,
        gradient_accumulation_steps=sft.gradient_accumulation,
        max_length=sft.max_length,
        completion_only_loss=True,
        bf16=config.rl.bf16,
        tf32=tf32_arg(config.rl.tf32, device),
        use_cpu=device == "cpu",
        save_strategy="no",  # the round's checkpoint is ours
        eval_strategy="no",
        logging_steps=1,
        logging_nan_inf_filter=False,  # a NaN loss is logged as NaN (NonFiniteGuard stops)
        report_to="none",  # a round's steps restart at 0: rounds are reported instead
        seed=seed,
        disable_tqdm=True,
    )
    return trl_config(SFTConfig, wanted, checkpointing=config.rl.gradient_checkpointing)


class WithWeights:
    """TRL's collator, plus the batch's `weight` column as a float tensor [batch]."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, examples: list[dict]) -> dict:
        import torch

        batch = self.collate([{k: v for k, v in e.items() if k != "weight"} for e in examples])
        batch["weight"] = torch.tensor([float(e["weight"]) for e in examples])
        return batch


def weighted_trainer_class():
    """TRL's SFTTrainer with a per-sample weight on the loss, without its model card."""
    import torch
    from transformers import ProgressCallback
    from trl import SFTTrainer

    class WeightedSFTTrainer(SFTTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.remove_callback(ProgressCallback)
            self.data_collator = WithWeights(self.data_collator)

        def create_model_card(self, *args, **kwargs) -> None:
            return None

        def _set_signature_columns_if_needed(self):
            super()._set_signature_columns_if_needed()
            if "weight" not in self._signature_columns:
                self._signature_columns = [*self._signature_columns, "weight"]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            weight = inputs.pop("weight")
            # Per-token log-probabilities of the labels (TRL's fused LM head; 0 off the
            # completion), summed per sample: [batch].
            outputs = model(**inputs, use_cache=False, fused_lm_head=True)
            per_sample = -outputs.log_probs.float().sum(dim=1)
            tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
            loss = (per_sample * weight.float()).sum() / torch.as_tensor(tokens).clamp(min=1)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes  # as TRL: DDP averages
            return (loss, outputs) if return_outputs else loss

    return WeightedSFTTrainer


def pair_dataset(pairs: list[dict]):
    """A conversational prompt/completion `datasets.Dataset` with a `weight` column."""
    import datasets

    rows = [{"prompt": p["prompt"], "weight": float(p["weight"]),
             "completion": [{"role": "assistant", "content": p["completion"]}]}
            for p in pairs]  # fmt: skip
    return datasets.Dataset.from_list(rows)


def fine_tune(model, tokenizer, pairs: list[dict], config: Config, device: str, out_dir: Path,
              seed: int, run=None, stage: str | None = None) -> list[dict]:  # fmt: skip
    """Train `model` in place on `pairs` ({"prompt": messages, "completion": text,
    "weight"}); the trainer's log history. `out_dir` is the trainer's scratch directory,
    removed after. A NaN or infinite loss, gradient or weight raises `NonFiniteError`
    (naming `run`'s recorded `stage` checkpoint as the last good one when given)."""
    from tritonrl.train.callbacks import TrainingBar  # lazy: loads transformers

    trainer = weighted_trainer_class()(
        model=model,
        args=trainer_args(config, out_dir, device, seed),
        train_dataset=pair_dataset(pairs),
        processing_class=tokenizer,
        callbacks=[nonfinite_guard(config, "best_of_n", run, stage), TrainingBar()],
    )
    trainer.train()
    history = list(trainer.state.log_history)
    del trainer  # its optimizer's state
    shutil.rmtree(out_dir, ignore_errors=True)
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
    return history
