"""Checkpoint seals: what makes a checkpoint directory a checkpoint, here and in a store.

A trainer writes `checkpoint-N` file by file; a kill part-way leaves a folder that looks
like a checkpoint and is not. So a checkpoint counts only once it is sealed: when it is
complete, `seal(dir)` writes `tritonrl-checkpoint.json` into it (atomically, last) with
every file's size and SHA-256, and only then does the manifest name it (the manifest is
written last of all). `check(dir)` says why a folder is not a consistent checkpoint (no
seal, a file missing, a size or hash that differs) or returns None. The store sync
uploads a checkpoint's seal after its files and a resume skips a checkpoint that fails
`check`, for the previous consistent one.

Files above `HASH_LIMIT` (1 GiB: a full 7B model's shards) are checked by size only, so
that sealing stays well inside a spot notice's two minutes.

What it does NOT do: it does not write the checkpoint's files (the trainer does), choose
which checkpoint to resume from (`Run` and the stages do), or delete old ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tritonrl.runs.atomic import atomic_write_json

SEAL = "tritonrl-checkpoint.json"
HASH_LIMIT = 1 << 30
# Folders that hold one checkpoint: the trainers' checkpoint-N and best-of-n's round-N.
CHECKPOINT_DIR = re.compile(r"^(checkpoint|round)-(\d+)$")


def step_of(path: str | Path) -> int | None:
    """The step (or round) a checkpoint folder's name carries, or None if it is not one."""
    found = CHECKPOINT_DIR.match(Path(path).name)
    return int(found.group(2)) if found else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != SEAL)


def describe(folder: str | Path) -> dict:
    """The seal's content for `folder` as it is now."""
    folder = Path(folder)
    files = {}
    for path in _files(folder):
        size = path.stat().st_size
        files[path.relative_to(folder).as_posix()] = {
            "size": size,
            "sha256": _sha256(path) if size <= HASH_LIMIT else None,
        }
    return {"format": 1, "step": step_of(folder), "files": files}


def seal(folder: str | Path) -> dict:
    """Write `folder`'s seal (call it once the checkpoint is complete); the seal."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot seal {folder}: it is not a directory")
    record = describe(folder)
    atomic_write_json(folder / SEAL, record)
    return record


def read_seal(folder: str | Path) -> dict | None:
    try:
        record = json.loads((Path(folder) / SEAL).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else None


def check(folder: str | Path, hashes: bool = True) -> str | None:
    """None when `folder` is a consistent checkpoint; otherwise why it is not.
    `hashes=False` checks sizes only (a quick look)."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder.name} does not exist"
    record = read_seal(folder)
    if record is None:
        return f"{folder.name} has no readable {SEAL} (it was not finished)"
    for name, expected in record["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{folder.name}/{name} is missing"
        size = path.stat().st_size
        if size != expected.get("size"):
            return f"{folder.name}/{name} has {size} bytes, sealed with {expected.get('size')}"
        if hashes and expected.get("sha256") and _sha256(path) != expected["sha256"]:
            return f"{folder.name}/{name} does not match its SHA-256 (corrupt)"
    return None
