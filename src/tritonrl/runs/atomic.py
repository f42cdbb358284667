"""Atomic file writes: readers see the old file or the new one, never a part.

`atomic_write_bytes` writes a temp file in the same directory, fsyncs it, `os.replace`s
it over the target and fsyncs the directory, so the rename survives a power cut too.
The run manifest, the SFT data files and the log histories are written this way; a
directory (a checkpoint, a saved model) is written under a temp name and renamed.
`atomic_write_json` writes strict JSON: a float that is NaN or infinite (a diverged
loss in a log history) is written as the string "nan", "inf" or "-inf" (`finite_json`;
Python's `float()` reads each back), so every reader's `json.loads` still parses it.

What it does NOT do: it does not lock (the manifest takes its own `flock`) and cannot make
a write atomic across file systems (the temp file always sits beside the target).
"""

from __future__ import annotations

import contextlib
import json
import math
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


def finite_json(obj: Any) -> Any:
    """`obj` with every NaN or infinite float (in dicts, lists and tuples, at any depth)
    replaced by the string "nan", "inf" or "-inf": what strict JSON can hold."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """`atomic_write_bytes` of `obj` as indented strict JSON, non-finite floats written
    as strings (`finite_json`); serialised before the file opens, so a value that cannot
    be serialised touches nothing."""
    text = json.dumps(finite_json(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"
    atomic_write_bytes(path, text.encode())
