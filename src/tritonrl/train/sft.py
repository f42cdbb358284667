"""Supervised fine-tuning (SFT): TRL `SFTTrainer`, PEFT LoRA by default, inside a run.

    tritonrl sft --config configs/tiny-cpu.yaml --run runs/demo [--sft.max_steps 10 ...]
    run_sft(load_config("qwen7b-1gpu"), "runs/qwen")           # the same from Python

Defaults (SPEC 4, `SftConfig`/`LoraConfig`): LoRA r=16, alpha=32, dropout 0.05 on the
q/k/v/o/gate/up/down projections, lr 1e-5, 1 epoch, batch 2 x accumulation 4, max length
8192, bf16; `lora.enabled: false` trains every parameter (the from-scratch tiny model
needs that). The loss covers the completion only (`sft.completion_only_loss`) of
conversational prompt/completion examples (`tritonrl.train.sft_data`), rendered with the
model's own chat template; a validation loss is computed every `sft.eval_steps`.

Everything goes through the run's manifest: the base model (a hub id, a directory, or the
tiny model built into the run as `tiny_model/model`), the examples, every checkpoint
(`RUN/sft/checkpoints/checkpoint-N`, the last `run.keep_last` kept, recorded as
`sft/checkpoint` once written), tensorboard logs (`sft/tensorboard`), the log history,
and the result: `sft/adapter` (LoRA) or `sft/model` (full), plus `sft/tokenizer`. A run
whose sft stage stopped part-way resumes from its recorded checkpoint. `load_sft_model`
is how later stages load the result.

What it does NOT do: no packing, no multi-GPU launch of its own (use `accelerate launch`),
no upload to an object store (the store/sync issue), no 8-bit without CUDA (refused).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tritonrl.config import TINY, Config, sft_device
from tritonrl.config_loader import config_to_dict, diff_configs
from tritonrl.runs import Run, RunError, atomic_write_json
from tritonrl.train.sft_data import load_datasets, sft_data_files

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


def open_run(run_dir: str | Path, config: Config) -> Run:
    """The run in `run_dir`, created with `config` when new; an existing run must have
    been created with the same resolved config (else a ValueError lists what differs)."""
    resolved = config_to_dict(config)
    try:
        run = Run.open(run_dir)
    except RunError:
        if (Path(run_dir) / "manifest.json").exists():
            raise
        return Run.create(run_dir, resolved)
    if not run.config:  # created by a stage without a config (prepare): adopt ours
        run.adopt_config(resolved)
        return run
    changes = diff_configs(run.config, resolved)
    if changes:
        raise ValueError(
            f"run {run.path} was created with a different config; differing: "
            + "; ".join(changes)
            + ". Use the same config and overrides, or a new run directory."
        )
    return run


def base_model(run: Run, config: Config) -> str:
    """The base model to fine-tune: a hub id or directory, or the run's tiny model (built
    into the run and recorded as `tiny_model/model` the first time)."""
    if not config.uses_tiny_model:
        return config.model.name_or_path
    if not run.has_artifact("tiny_model", "model"):
        from tritonrl.train.tiny_model import build_tiny_model

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
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        path, revision=config.model.revision, trust_remote_code=config.model.trust_remote_code
    )
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"the tokenizer of {path} has no chat template; SFT renders prompts with it. Use "
            "an instruct/chat model, or set one (tokenizer.chat_template) and save it"
        )
    return tokenizer


def load_model(path: str, config: Config, device: str):
    """The base model, in bf16 when `sft.bf16`, 8-bit (bitsandbytes) when asked."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {
        "revision": config.model.revision,
        "trust_remote_code": config.model.trust_remote_code,
        "dtype": torch.bfloat16 if config.sft.bf16 else torch.float32,
    }
    if config.sft.load_in_8bit:
        if device != "cuda":  # check_config refuses this; a direct caller may not have
            raise ValueError("sft.load_in_8bit needs CUDA: set --sft.load_in_8bit false")
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ImportError("sft.load_in_8bit needs bitsandbytes: pip install bitsandbytes")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


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
    """TRL's `SFTConfig` from ours."""
    import dataclasses

    from trl import SFTConfig

    sft = config.sft
    # transformers 5.x renamed gradient_checkpointing to activation_checkpointing (the
    # GPU image's 5.17 has the old name, 5.23 the new): pass whichever this one has.
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    ckpt = (
        "activation_checkpointing"
        if "activation_checkpointing" in fields
        else ("gradient_checkpointing")
    )
    return SFTConfig(
        **{ckpt: sft.gradient_checkpointing},
        output_dir=str(out_dir),
        learning_rate=sft.learning_rate,
        num_train_epochs=sft.epochs,
        max_steps=sft.max_steps,
        per_device_train_batch_size=sft.per_device_batch_size,
        per_device_eval_batch_size=sft.per_device_batch_size,
        gradient_accumulation_steps=sft.gradient_accumulation,
        max_length=sft.max_length,
        bf16=sft.bf16,
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
        report_to=_reporters(config) or "none",
        seed=config.run.seed,
        disable_tqdm=False,
    )


def _callbacks(run: Run, config: Config) -> list:
    from tritonrl.train.callbacks import EvaluateAtEnd, ManifestCallback

    callbacks = [ManifestCallback(run, STAGE), EvaluateAtEnd()]
    if "tensorboard" in config.run.report_to:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        tb_dir = run.stage_dir(STAGE) / "tensorboard"
        tb_dir.mkdir(exist_ok=True)
        callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(tb_dir))))
        run.add_artifact(STAGE, "tensorboard", tb_dir)
    return callbacks


def _save_final(run: Run, trainer, tokenizer, lora: bool) -> Path:
    """The adapter (or full model) and tokenizer into RUN/sft/final, renamed into place,
    then recorded: `sft/adapter` or `sft/model`, and `sft/tokenizer`."""
    stage_dir = run.stage_dir(STAGE)
    final, tmp = stage_dir / "final", stage_dir / f".final.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save_model(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(final, ignore_errors=True)  # not recorded yet: a leftover of a crash
    os.replace(tmp, final)
    run.add_artifact(STAGE, "adapter" if lora else "model", final)
    run.add_artifact(STAGE, "tokenizer", final)
    return final


def _losses(history: list[dict]) -> tuple[float | None, float | None, float | None]:
    train = [h["loss"] for h in history if "loss" in h]
    evals = [h["eval_loss"] for h in history if "eval_loss" in h]
    return (
        train[0] if train else None,
        train[-1] if train else None,
        evals[-1] if evals else None,
    )


def _train(run: Run, config: Config, device: str) -> SftResult:
    from trl import SFTTrainer

    started = time.monotonic()
    train_file, val_file, source = sft_data_files(run, config)  # fails fast, before models
    train_ds, val_ds = load_datasets(train_file, val_file, config)
    base = base_model(run, config)
    tokenizer = load_tokenizer(base, config)
    model = load_model(base, config, device)
    stage_dir = run.stage_dir(STAGE)
    trainer = SFTTrainer(
        model=model,
        args=trainer_args(config, stage_dir / "checkpoints", device, val_ds is not None),
        train_dataset=train_ds,
        eval_dataset=val_ds,
        processing_class=tokenizer,
        peft_config=peft_config(config),
        callbacks=_callbacks(run, config),
    )
    resume = (
        str(run.artifact(STAGE, "checkpoint")) if run.has_artifact(STAGE, "checkpoint") else None
    )
    if resume:
        log.info("resuming SFT from %s", resume)
        run.set_info(STAGE, resumed_from_checkpoint=run.relpath(resume))
    trainer.train(resume_from_checkpoint=resume)
    history = trainer.state.log_history
    atomic_write_json(stage_dir / "log_history.json", history)
    run.add_artifact(STAGE, "log_history", stage_dir / "log_history.json")
    final = _save_final(run, trainer, tokenizer, config.lora.enabled)
    first, last, eval_loss = _losses(history)
    run.set_step(STAGE, trainer.state.global_step)
    run.set_info(
        STAGE,
        base_model=config.model.name_or_path,
        lora=config.lora.enabled,
        data_source=source,
        train_examples=len(train_ds),
        validation_examples=len(val_ds) if val_ds is not None else 0,
        first_loss=first,
        last_loss=last,
        eval_loss=eval_loss,
        device=device,
    )
    return SftResult(
        run_dir=run.path,
        output=final,
        lora=config.lora.enabled,
        steps=trainer.state.global_step,
        first_loss=first,
        last_loss=last,
        eval_loss=eval_loss,
        seconds=time.monotonic() - started,
    )


def run_sft(config: Config, run_dir: str | Path) -> SftResult:
    """The SFT stage of the run in `run_dir` (created when new): start, train, record.

    A failure marks the stage failed in the manifest (with its error) and is re-raised;
    what was already recorded (checkpoints, data) stays for a resume.
    """
    device = sft_device(config)
    run = open_run(run_dir, config)
    run.start_stage(STAGE)
    try:
        result = _train(run, config, device)
    except BaseException as e:
        run.fail_stage(STAGE, f"{type(e).__name__}: {e}")
        raise
    run.finish_stage(STAGE)
    log.info(
        "SFT done in %.0fs: loss %s -> %s", result.seconds, result.first_loss, result.last_loss
    )
    return result


def load_sft_model(run: Run | str | Path, device: str = "cpu"):
    """(model, tokenizer) of a run's finished SFT stage, found through the manifest: the
    full model, or the base model (hub id or the run's tiny model) with the adapter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = run if isinstance(run, Run) else Run.open(run)
    tokenizer = AutoTokenizer.from_pretrained(run.artifact(STAGE, "tokenizer"))
    if run.has_artifact(STAGE, "model"):
        model = AutoModelForCausalLM.from_pretrained(run.artifact(STAGE, "model"))
        return model.to(device), tokenizer
    from peft import PeftModel

    name = run.stage(STAGE)["info"].get("base_model")
    if not name:
        raise RunError(f"run {run.path}: stage sft records an adapter but no base_model")
    base_path = run.artifact("tiny_model", "model") if name == TINY else name
    base = AutoModelForCausalLM.from_pretrained(base_path)
    model = PeftModel.from_pretrained(base, run.artifact(STAGE, "adapter"))
    return model.to(device), tokenizer
