"""Atomic file writes: readers see the old file or the new one, never a part.

`atomic_write_bytes` writes a temp file in the same directory, fsyncs it, `os.replace`s
it over the target and fsyncs the directory, so the rename survives a power cut too.
The run manifest, the SFT data files and the log histories are written this way; a
directory (a checkpoint, a saved model) is written under a temp name and renamed.

What it does NOT do: it does not lock (the manifest takes its own `flock`) and cannot make
a write atomic across file systems (the temp file always sits beside the target).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a
    part: a temp file in the same directory, fsync, `os.replace`, fsync of the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """`atomic_write_bytes` of `obj` as indented JSON (serialised before the file opens,
    so a value that cannot be serialised touches nothing)."""
    text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
    atomic_write_bytes(path, text.encode())
