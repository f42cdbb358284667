"""Runs: the run directory and its manifest (the single source of truth for stage, step
and artifact paths), sealed checkpoints (`checkpoint.py`), pre-emption by signal or spot
notice (`preemption.py`, `spot.py`), the object store the run is synced to (`store.py`:
the store; `transfer.py`: push, pull, list; `sync.py`: in the background; `syncdir.py`:
the sync's records; `lifecycle.py` puts them around every stage), resuming a run from
its store (`resume.py`) and the commands over runs (`commands.py`, `bucket.py`)."""

from tritonrl.runs.atomic import atomic_write_bytes, atomic_write_json
from tritonrl.runs.manifest import (
    MANIFEST,
    NOT_RUN,
    PIPELINE,
    RESUMED,
    STATUSES,
    ArtifactNotFound,
    Run,
    RunError,
    shown_stages,
)
from tritonrl.runs.preemption import Interrupted, StopSignals

__all__ = [
    "MANIFEST",
    "NOT_RUN",
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
    "shown_stages",
]
