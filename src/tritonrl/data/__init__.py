"""Data for training and evaluation: the shared prompt builder (and, beside it, the
KernelBook loader and optional distillation)."""

from tritonrl.data.prompts import build_messages, build_prompt, sft_example

__all__ = ["build_messages", "build_prompt", "sft_example"]
