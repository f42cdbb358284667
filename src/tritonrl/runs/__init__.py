"""Runs: the run directory and its manifest (the single source of truth for stage, step
and artifact paths), and pre-emption by signal (`preemption.py`). Checkpoint stores and
sync will live beside them."""

from tritonrl.runs.atomic import atomic_write_bytes, atomic_write_json
from tritonrl.runs.manifest import (
    MANIFEST,
    PIPELINE,
    RESUMED,
    STATUSES,
    ArtifactNotFound,
    Run,
    RunError,
)
from tritonrl.runs.preemption import Interrupted, StopSignals

__all__ = [
    "MANIFEST",
    "PIPELINE",
    "RESUMED",
    "STATUSES",
    "ArtifactNotFound",
    "Interrupted",
    "Run",
    "RunError",
    "StopSignals",
    "atomic_write_bytes",
    "atomic_write_json",
]
