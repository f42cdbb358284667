"""Runs: the run directory and its manifest (the single source of truth for stage, step
and artifact paths). Checkpoint stores, sync and pre-emption live beside it."""

from tritonrl.runs.atomic import atomic_write_bytes, atomic_write_json
from tritonrl.runs.manifest import (
    MANIFEST,
    PIPELINE,
    STATUSES,
    ArtifactNotFound,
    Run,
    RunError,
)

__all__ = [
    "MANIFEST",
    "PIPELINE",
    "STATUSES",
    "ArtifactNotFound",
    "Run",
    "RunError",
    "atomic_write_bytes",
    "atomic_write_json",
]
