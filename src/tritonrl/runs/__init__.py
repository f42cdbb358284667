"""Runs: the run directory and its manifest (the single source of truth for stage, step
and artifact paths), sealed checkpoints (`checkpoint.py`), pre-emption by signal or spot
notice (`preemption.py`, `spot.py`), and the object store the run is synced to
(`store.py`, `sync.py`; `lifecycle.py` puts them around every stage)."""

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
