"""Data for training and evaluation: the shared prompt builder, the feedback turn on a
verdict (`feedback_message`), KernelBook preparation (`prepare`) and optional
distillation from a teacher endpoint (`distill`)."""

from tritonrl.data.distill import DistillError, DistillSummary, distill
from tritonrl.data.feedback import feedback_message
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
    "feedback_message",
    "load_prepared_tasks",
    "prepare",
    "sft_example",
]
