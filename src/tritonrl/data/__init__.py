"""Data for training and evaluation: the shared prompt builder, KernelBook preparation
(`prepare`) and optional distillation from a teacher endpoint (`distill`)."""

from tritonrl.data.distill import DistillError, DistillSummary, distill
from tritonrl.data.kernelbook import KernelBookError, PrepareSummary, load_prepared_tasks, prepare
from tritonrl.data.prompts import build_messages, build_prompt, sft_example

__all__ = [
    "DistillError",
    "DistillSummary",
    "KernelBookError",
    "PrepareSummary",
    "build_messages",
    "build_prompt",
    "distill",
    "load_prepared_tasks",
    "prepare",
    "sft_example",
]
