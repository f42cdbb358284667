"""Supervised fine-tuning (SFT): TRL `SFTTrainer`, PEFT LoRA by default, inside a run.

    tritonrl sft --config configs/tiny-cpu.yaml --run runs/demo [--sft.max_steps 10 ...]
    run_sft(load_config("qwen7b-1gpu"), "runs/qwen")           # the same from Python

Defaults (SPEC 4, `SftConfig`/`LoraConfig`): LoRA r=16, alpha=32, dropout 0.05 on the
q/k/v/o/gate/up/down projections, lr 1e-5, 1 epoch, batch 2 x accumulation 4, max length
8192, bf16 (autocast; the trained weights stay float32: `tritonrl.train.precision`);
`lora.enabled: false` trains every parameter (the from-scratch tiny model needs that).
The loss covers the completion only (`sft.completion_only_loss`) of conversational
prompt/completion examples (`tritonrl.train.sft.data`), rendered with the model's own
chat template; a validation loss is computed every `sft.eval_steps`.

Everything goes through the run's manifest: the base model (a hub id, a directory, or the
tiny model built into the run as `tiny_model/model`), the examples, every checkpoint
(`RUN/sft/checkpoints/checkpoint-N`, the last `run.keep_last` kept, recorded as
`sft/checkpoint` once written), tensorboard logs (`sft/tensorboard`), the log history,
and the result: `sft/adapter` (LoRA) or `sft/model` (full), plus `sft/tokenizer`, each
with our model card (README.md). A run whose sft stage stopped part-way resumes from its
recorded checkpoint and says so (logged, `SftResult.resumed_from`, the stage info's
`resumed_from_checkpoint`, which `tritonrl status` shows). A done stage continues from its
last checkpoint when only its budget was raised (`sft.max_steps`, `sft.epochs`:
`tritonrl.train.sft.run_dir`). SIGTERM or SIGINT checkpoints at the next step boundary,
marks the stage interrupted (with the signal) and raises `Interrupted`; the same command
resumes. A NaN or infinite loss, gradient or weight stops the stage before that step
is saved (`NonFiniteGuard`): the stage fails naming the step and what to try, its last
good checkpoint stays, and the log history is written (strict JSON, a NaN as "nan").
One progress bar shows training; the datasets/transformers bars are off while the stage
runs. `load_sft_model` is how later stages load the result.

The package: this module (the stage), `data` (its examples), `run_dir` (which config
it may run under, where its base is) and `weighted` (the weighted fine-tuning step of
best-of-n and rwsft).

Several processes (`accelerate launch --num_processes N -m tritonrl sft ...`, docs/scaling.md)
train one model: rank 0 alone writes the run (manifest, data, card, log history, the final
directory) and syncs it; every rank saves its part of each checkpoint, resumes from the
one rank 0 chose, and stops at the same step as the others (`tritonrl.train.ranks`).

What it does NOT do: no packing, no multi-GPU launch of its own (use `accelerate launch`),
no 8-bit without CUDA (refused).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tritonrl.config import TINY, Config, sft_device
from tritonrl.config_loader import config_to_dict
from tritonrl.models.adapters import relocate_adapters
from tritonrl.models.load import load_causal_lm
from tritonrl.models.load import load_tokenizer as load_any_tokenizer
from tritonrl.models.tiny import build_tiny_model
from tritonrl.runs import Interrupted, Run, RunError, StopSignals, atomic_write_json
from tritonrl.runs.lifecycle import resume_point, stage, stage_services
from tritonrl.train.model_card import sft_card
from tritonrl.train.precision import final_dtype, load_dtype, nonfinite_guard, tf32_arg
from tritonrl.train.ranks import Ranks
from tritonrl.train.sft.data import load_datasets, long_examples, sft_data_files
from tritonrl.train.sft.run_dir import open_run, resolve_base
from tritonrl.train.trl_args import trl_config

log = logging.getLogger(__name__)

STAGE = "sft"


@dataclass
class SftResult:
    run_dir: Path
    output: Path  # the adapter or full-model directory
    lora: bool
    steps: int
    first_loss: float | None
    last_loss: float | None
    eval_loss: float | None
    seconds: float
    resumed_from: str | None = None  # the checkpoint (run-relative) it continued from


def base_model(run: Run, config: Config) -> str:
    """The base model to fine-tune: a hub id or directory, or the run's tiny model (built
    into the run and recorded as `tiny_model/model` the first time)."""
    if not config.uses_tiny_model:
        return config.model.name_or_path
    if not run.has_artifact("tiny_model", "model"):
        run.start_stage("tiny_model")
        try:
            out = build_tiny_model(run.stage_dir("tiny_model") / "model", config.tiny_model)
        except BaseException as e:
            run.fail_stage("tiny_model", f"{type(e).__name__}: {e}")
            raise
        run.add_artifact("tiny_model", "model", out)
        run.finish_stage("tiny_model")
    return str(run.artifact("tiny_model", "model"))


def load_tokenizer(path: str, config: Config):
    tokenizer = load_any_tokenizer(
        path, revision=config.model.revision, trust_remote_code=config.model.trust_remote_code
    )
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"the tokenizer of {path} has no chat template; SFT renders prompts with it. Use "
            "an instruct/chat model, or set one (tokenizer.chat_template) and save it"
        )
    return tokenizer


def load_model(path: str, config: Config, device: str):
    """The base model: float32 when its weights are trained (full fine-tuning, even under
    `sft.bf16`, which autocasts), bf16 as LoRA's frozen base under `sft.bf16`
    (`tritonrl.train.precision`); 8-bit (bitsandbytes) when asked."""
    import torch

    kwargs = {
        "revision": config.model.revision,
        "trust_remote_code": config.model.trust_remote_code,
        "dtype": load_dtype(config.sft.bf16, lora=config.lora.enabled),
    }
    if config.sft.load_in_8bit:
        if device != "cuda":  # check_config refuses this; a direct caller may not have
            raise ValueError("sft.load_in_8bit needs CUDA: set --sft.load_in_8bit false")
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ImportError("sft.load_in_8bit needs bitsandbytes: pip install bitsandbytes")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    return load_causal_lm(path, **kwargs)


def peft_config(config: Config):
    """A `peft.LoraConfig` from the `lora` section, or None for full-parameter training."""
    if not config.lora.enabled:
        return None
    from peft import LoraConfig

    lora = config.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def _reporters(config: Config) -> list[str]:
    """The trainer's report_to, less tensorboard (added as a callback with a fixed dir)."""
    wanted = [r for r in config.run.report_to if r not in ("none", "tensorboard")]
    if "wandb" in wanted and importlib.util.find_spec("wandb") is None:
        raise ImportError("run.report_to lists wandb but it is not installed: pip install wandb")
    return wanted


def trainer_args(config: Config, out_dir: Path, device: str, has_validation: bool):
    """TRL's `SFTConfig` from ours (fields the class lacks are left out, with a warning:
    `trl_config`)."""
    from trl import SFTConfig  # lazy: loads torch and transformers

    sft = config.sft
    wanted = dict(
        output_dir=str(out_dir),
        learning_rate=sft.learning_rate,
        num_train_epochs=sft.epochs,
        max_steps=sft.max_steps,
        per_device_train_batch_size=sft.per_device_batch_size,
        per_device_eval_batch_size=sft.per_device_batch_size,
        gradient_accumulation_steps=sft.gradient_accumulation,
        max_length=sft.max_length,
        bf16=sft.bf16,
        tf32=tf32_arg(sft.tf32, device),
        use_cpu=device == "cpu",
        completion_only_loss=sft.completion_only_loss,
        lr_scheduler_type=sft.lr_scheduler,
        warmup_steps=sft.warmup_steps,
        save_strategy="steps",
        save_steps=sft.save_steps,
        save_total_limit=config.run.keep_last,
        eval_strategy="steps" if has_validation else "no",
        eval_steps=sft.eval_steps,
        logging_steps=sft.logging_steps,
        logging_first_step=True,
        logging_nan_inf_filter=False,  # a NaN loss is logged as NaN (and stops: NonFiniteGuard)
        report_to=_reporters(config) or "none",
        seed=config.run.seed,
        disable_tqdm=False,
        # every trained weight takes part in each forward pass: DDP need not search for
        # unused ones (an extra pass over the autograd graph every step)
        ddp_find_unused_parameters=False,
    )
    # transformers 5.x renamed gradient_checkpointing to activation_checkpointing (the
    # GPU image's 5.17 has the old name, 5.23 the new): trl_config passes whichever it has.
    return trl_config(SFTConfig, wanted, checkpointing=sft.gradient_checkpointing)


def _callbacks(run: Run, config: Config, stop: StopSignals, card, ranks: Ranks) -> list:
    from tritonrl.train.callbacks import (
        EvaluateAtEnd,
        ManifestCallback,
        ModelCardCallback,
        StopOnSignal,
        TrainingBar,
        tensorboard,
    )  # lazy: loads transformers

    # The guard first: a non-finite step stops before anything records or saves it. The
    # card is written before the manifest records the checkpoint.
    callbacks = [nonfinite_guard(config, "sft", run, STAGE), ModelCardCallback(card),
                 ManifestCallback(run, STAGE, ranks), EvaluateAtEnd()]  # fmt: skip
    callbacks += [StopOnSignal(stop, ranks), TrainingBar()]
    if "tensorboard" in config.run.report_to and ranks.main:
        callbacks.append(tensorboard(run, STAGE))
    return callbacks


def save_final(
    run: Run,
    trainer,
    tokenizer,
    lora: bool,
    card: str,
    stage: str = STAGE,
    dtype=None,
    ranks: Ranks | None = None,
) -> Path:
    """The adapter (or full model), tokenizer and model card into RUN/<stage>/final,
    renamed into place, then recorded: `<stage>/adapter` or `<stage>/model`, and
    `<stage>/tokenizer` (the SFT stage's, and RL's). A full model is first cast, in
    place, to `dtype` when given (`precision.final_dtype`: bf16 after bf16 training;
    not under DeepSpeed or FSDP, whose wrapped weights stay as trained). Every rank
    calls it (DeepSpeed and FSDP gather the weights in `save_model`); rank 0 writes."""
    ranks = ranks or Ranks.from_env()
    stage_dir = run.stage_dir(stage)
    # one name on every rank (the processes of one training share the directory)
    final, tmp = stage_dir / "final", stage_dir / f".final.tmp-{ranks.broadcast(os.getpid())}"
    if ranks.main:
        shutil.rmtree(tmp, ignore_errors=True)
    ranks.barrier(trainer.args.device.type if ranks.many else None)
    sharded = getattr(trainer, "is_deepspeed_enabled", False) or getattr(
        trainer, "is_fsdp_enabled", False)  # fmt: skip
    if dtype is not None and not lora and not sharded:
        trainer.model.to(dtype)  # the training is over: no float32 copy is kept
    trainer.save_model(str(tmp))
    if ranks.many:
        ranks.barrier(trainer.args.device.type)
    if not ranks.main:
        return final
    tokenizer.save_pretrained(str(tmp))
    (tmp / "README.md").write_text(card)  # ours, over PEFT's template
    (tmp / "training_args.bin").unlink(missing_ok=True)  # a pickle of absolute paths
    shutil.rmtree(final, ignore_errors=True)  # not recorded yet: a leftover of a crash
    os.replace(tmp, final)
    run.add_artifact(stage, "adapter" if lora else "model", final)
    run.add_artifact(stage, "tokenizer", final)
    return final


def _losses(history: list[dict]) -> tuple[float | None, float | None, float | None]:
    train = [h["loss"] for h in history if "loss" in h]
    evals = [h["eval_loss"] for h in history if "eval_loss" in h]
    return (
        train[0] if train else None,
        train[-1] if train else None,
        evals[-1] if evals else None,
    )


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """No progress bars from datasets (map, filter) or transformers (loading and writing
    weights) while a stage runs, so its own bar is the one shown; restored after."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets_on = datasets.is_progress_bar_enabled()
    transformers_on = hf_logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            # TRL asks the deprecated name on transformers 5.x; nothing for a user to do.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            yield
    finally:
        if datasets_on:
            datasets.enable_progress_bars()
        if transformers_on:
            hf_logging.enable_progress_bar()


def _trainer_class():
    """TRL's SFTTrainer without its model card (ours is written instead)."""
    from transformers import ProgressCallback
    from trl import SFTTrainer

    from tritonrl.train.callbacks import TiedWeightsLoad  # lazy: loads transformers

    class Trainer(TiedWeightsLoad, SFTTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.remove_callback(ProgressCallback)  # TrainingBar is the one bar

        def create_model_card(self, *args, **kwargs) -> None:
            return None

    return Trainer


def _inputs(run: Run, config: Config) -> tuple[Path, Path | None, str, str]:
    """(train file, validation file, source, base model), built and recorded when new."""
    train_file, val_file, source = sft_data_files(run, config)  # fails fast, before models
    base = base_model(run, config)
    relocate_adapters(run)  # a moved run's checkpoints point at the base where it is now
    return train_file, val_file, source, base


def _train(run: Run, config: Config, device: str, stop: StopSignals, ranks: Ranks) -> SftResult:
    started = time.monotonic()
    # rank 0 builds and records them; the others wait for its answer
    train_file, val_file, source, base = ranks.from_leader(lambda: _inputs(run, config), run,
                                                           device)  # fmt: skip
    train_ds, val_ds = load_datasets(train_file, val_file, config)
    tokenizer = load_tokenizer(base, config)
    # rank 0 alone warns and records it
    long, longest = (
        long_examples(train_ds, tokenizer, config.sft.max_length) if ranks.main else (0, 0)
    )
    if long:
        log.warning(
            "SFT: %d of %d training examples are longer than sft.max_length (%d tokens; "
            "the longest %d): the trainer cuts them there, and a kernel cut short teaches "
            "answers that do not end; --sft.max_length %d keeps them whole",
            long, len(train_ds), config.sft.max_length, longest, longest,
        )  # fmt: skip
    model = load_model(base, config, device)
    stage_dir = run.stage_dir(STAGE)
    n_val = len(val_ds) if val_ds is not None else 0
    card = sft_card(run, config, source, len(train_ds), n_val)
    trainer = _trainer_class()(
        model=model,
        args=trainer_args(config, stage_dir / "checkpoints", device, val_ds is not None),
        train_dataset=train_ds,
        eval_dataset=val_ds,
        processing_class=tokenizer,
        peft_config=peft_config(config),
        callbacks=_callbacks(run, config, stop, card, ranks),
    )
    resume = ranks.from_leader(lambda: resume_point(run, STAGE, log), run, device)
    try:
        with stop.graceful():
            trainer.train(resume_from_checkpoint=resume)
        # a signal after the last step's agreement: every rank stops, or none
        stop.signal = ranks.agree_stop(stop.signal, trainer.args.device) or stop.signal
    finally:  # a failed stage's history too (a NaN is written "nan": strict JSON)
        if ranks.main:
            history = trainer.state.log_history
            atomic_write_json(stage_dir / "log_history.json", history)
            run.add_artifact(STAGE, "log_history", stage_dir / "log_history.json")
    if stop.signal:  # the trainer saved a checkpoint at this step and stopped
        raise Interrupted(stop.signal)
    steps = trainer.state.global_step
    history = trainer.state.log_history
    final = save_final(run, trainer, tokenizer, config.lora.enabled, card(steps),
                       dtype=final_dtype(config.sft.bf16), ranks=ranks)  # fmt: skip
    first, last, eval_loss = _losses(history)
    run.set_step(STAGE, steps)
    run.set_info(
        STAGE,
        base_model=config.model.name_or_path,
        lora=config.lora.enabled,
        data_source=source,
        train_examples=len(train_ds),
        validation_examples=n_val,
        longer_than_max_length=long,
        first_loss=first,
        last_loss=last,
        eval_loss=eval_loss,
        device=device,
    )
    return SftResult(
        run_dir=run.path,
        output=final,
        lora=config.lora.enabled,
        steps=steps,
        first_loss=first,
        last_loss=last,
        eval_loss=eval_loss,
        seconds=time.monotonic() - started,
        resumed_from=run.relpath(resume) if resume else None,
    )


def run_sft(config: Config, run_dir: str | Path) -> SftResult:
    """The SFT stage of the run in `run_dir` (created when new): start, train, record.

    A failure marks the stage failed in the manifest (with its error) and is re-raised;
    SIGTERM/SIGINT mark it interrupted (with the signal) and raise `Interrupted`; what was
    already recorded (checkpoints, data) stays for a resume. A done stage whose budget
    was raised (see `open_run`) is reopened and continues from its last checkpoint.
    """
    device = sft_device(config)
    ranks = Ranks.from_env()
    config = resolve_base(config)  # a relative local base, made absolute once

    def opened() -> tuple[Run, bool]:
        run, extend = open_run(run_dir, config)
        resolved = config_to_dict(config)
        if run.config != resolved:  # a raised budget or another store, checked by open_run
            run.replace_config(resolved)
        return run, extend

    # the other ranks open the run read-only once rank 0 has checked or created it
    opened_here = ranks.from_leader(opened, device=device, share=False)
    run, extend = opened_here or (Run.open(run_dir, readonly=True), False)
    # the stage starts after the store answered; its last sync sees all
    with (
        StopSignals() as stop,
        quiet_progress(),
        stage_services(run, config, stop),
        stage(run, STAGE, reopen=extend),
    ):
        result = _train(run, config, device, stop, ranks)
    log.info(
        "SFT done in %.0fs: loss %s -> %s",
        result.seconds,
        loss_text(result.first_loss),
        loss_text(result.last_loss),
    )
    return result


def load_sft_model(run: Run | str | Path, device: str = "cpu"):
    """(model, tokenizer) of a run's finished SFT stage, found through the manifest: the
    full model, or the base model (hub id or the run's tiny model) with the adapter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = run if isinstance(run, Run) else Run.open(run)
    relocate_adapters(run)  # so that plain PEFT loaders work on a moved run afterwards
    tokenizer = AutoTokenizer.from_pretrained(run.artifact(STAGE, "tokenizer"))
    if run.has_artifact(STAGE, "model"):
        model = AutoModelForCausalLM.from_pretrained(run.artifact(STAGE, "model"))
        return model.to(device), tokenizer
    from peft import PeftModel

    name = run.stage(STAGE)["info"].get("base_model")
    if not name:
        raise RunError(f"run {run.path}: stage sft records an adapter but no base_model")
    base_path = run.artifact("tiny_model", "model") if name == TINY else name
    base = load_causal_lm(base_path)
    model = PeftModel.from_pretrained(base, run.artifact(STAGE, "adapter"))
    return model.to(device), tokenizer


def loss_text(x: float | None) -> str:
    """A loss as a person reads it: four significant digits; n/a when none was logged."""
    return "n/a" if x is None else f"{x:.4g}"
