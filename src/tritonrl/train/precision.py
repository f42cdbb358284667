"""Mixed precision for every training stage: float32 trainable weights, bf16 autocast.

    dtype = load_dtype(config.sft.bf16, lora=config.lora.enabled)   # what to load in
    guard = nonfinite_guard(config, "sft", run)                      # the NaN stop

With `sft.bf16` / `rl.bf16` the trainer runs its forward and backward under bf16
autocast (TrainingArguments `bf16=True`), and the weights the optimizer updates stay in
float32 (the master copy), as do their gradients and AdamW's moments:

* full fine-tuning loads the model in float32, upcasting a bf16 checkpoint (a hub
  model stored in bf16, a `convert-gguf --dtype bfloat16` directory);
* LoRA loads the frozen base in bf16 (it is only read) and PEFT keeps the adapters,
  the only trained weights, in float32 (its `autocast_adapter_dtype`).

Why: loading the weights in bf16 and training them there (as `sft.bf16` did before) is
pure-bf16 training, with no float32 copy: an update smaller than half a bf16 step of the
weight (8 significant bits: about 1/256 of its size) is rounded away, and AdamW's
moments are kept at the same precision. Measured on the CPU (bench/bf16_probe.py, a
Qwen2-like model stored in bf16, full fine-tuning at lr 1e-5): each optimizer step left
85-90% of the weights exactly unchanged, against 0.003% with float32 master weights
under the same autocast. The same probe runs the variants on CUDA with a real model.

Memory, full fine-tuning: 16 bytes a parameter (float32 weight, gradient and two AdamW
moments) plus a bf16 copy of each weight while autocast holds it, against 8 for pure
bf16: 8 GB against 4 GB for a 0.5B model, 24 against 12 for 1.5B; a 7B model needs
LoRA (the product's default: 14 GB of frozen bf16 base plus small float32 adapters) or
several GPUs. What is written: checkpoints hold the float32 weights (an exact resume);
the final full model (`sft/model`, `rl/model`) is written in bf16 when bf16 was on
(`final_dtype`), float32 otherwise; adapters are written in float32.

`sft.tf32` / `rl.tf32` (on by default) let float32 matrix products use TF32 tensor cores
on CUDA GPUs that have them (Ampere and newer): float32 accumulation over inputs rounded
to 10 bits, several times the speed of exact float32, which is what a stage computes in
when bf16 is off. `tf32_arg` gives TrainingArguments' `tf32`: None (torch's own setting
left alone) on the CPU and on older GPUs, where TrainingArguments would refuse True.
`tf32_kept` keeps that choice across a colocated vLLM's start: vLLM's worker, which runs
in the trainer's process, sets float32 matrix products to exact IEEE
(`VLLM_FLOAT32_MATMUL_PRECISION`, default "highest"), which tripled GRPO's update.

What it does NOT do: no fp16 (no loss scaling here), no 8-bit optimizer states.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tritonrl.config import Config


def load_dtype(bf16: bool, lora: bool):
    """The dtype to load a model to train in: bf16 only for a frozen base under LoRA;
    float32 for weights the optimizer updates (and for everything without bf16)."""
    import torch

    return torch.bfloat16 if bf16 and lora else torch.float32


def tf32_arg(enabled: bool, device: str) -> bool | None:
    """TrainingArguments' `tf32` for a stage on `device`: True or False on a CUDA GPU
    with TF32 (compute capability 8 and up), None elsewhere."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return None
    return enabled if torch.cuda.get_device_capability()[0] >= 8 else None


@contextlib.contextmanager
def tf32_kept(tf32: bool | None) -> Iterator[None]:
    """Around building a trainer whose vLLM starts in this process (TRL's colocate mode):
    vLLM told to use the stage's TF32 choice for its own float32 products (unless
    `VLLM_FLOAT32_MATMUL_PRECISION` is set), and the choice set again for the trainer's
    afterwards, whatever vLLM set. `tf32` is TrainingArguments' (None: left alone)."""
    if tf32 is None:
        yield
        return
    os.environ.setdefault("VLLM_FLOAT32_MATMUL_PRECISION", "high" if tf32 else "highest")
    try:
        yield
    finally:
        import torch

        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"


def final_dtype(bf16: bool):
    """The dtype a finished full model is written in: bf16 when trained under bf16."""
    import torch

    return torch.bfloat16 if bf16 else torch.float32


def nonfinite_advice(config: Config, section: str) -> str:
    """What to try after a NaN or infinite loss, for the `section` that trained
    (sft, rl or best_of_n: the learning rate's home)."""
    lr = getattr(config, section).learning_rate
    bf16 = config.sft.bf16 if section == "sft" else config.rl.bf16
    flag = "sft.bf16" if section == "sft" else "rl.bf16"
    precision = (
        f"training runs under bf16 autocast with float32 weights; --{flag} false runs "
        "float32 throughout"
        if bf16
        else "training already runs in float32"
    )
    return (
        f"a lower --{section}.learning_rate (it is {lr:g}), in a new run directory (a run "
        f"keeps its config); {precision}."
    )


def nonfinite_guard(config: Config, section: str, run=None, stage: str | None = None):
    """The `NonFiniteGuard` callback of a stage trained by `section`'s settings."""
    from tritonrl.train.callbacks import NonFiniteGuard  # lazy: loads transformers

    return NonFiniteGuard(nonfinite_advice(config, section), run, stage)
