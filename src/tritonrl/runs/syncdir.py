"""The run's `.sync/` folder: the records the store sync keeps beside a run and never
uploads (what was pushed, the push lock, the last sync's status), and `store_status`,
which reads that status for `tritonrl status`.

    store_status("runs/demo")    # {"url", "last_sync", "last_error", "failures"} or None

It sits below the manifest, the transfers and the sync so that all three read the same
names without importing each other.

What it does NOT do: write any of these files (`transfer.py` writes the push state,
`sync.py` the status) or talk to a store.
"""

from __future__ import annotations

import json
from pathlib import Path

SYNC_DIR = ".sync"  # in the run dir: the sync's own records, never uploaded
STATE = "state.json"  # what was pushed to (or pulled from) which URL: `transfer.py`
PUSH_LOCK = "push.lock"  # one push at a time per run directory, across processes
STATUS = "status.json"  # the last sync and the current error: `sync.py`


def store_status(run_dir: str | Path) -> dict | None:
    """`RUN/.sync/status.json`: {"url", "last_sync": None | {"at", "files", "bytes",
    "deleted", "seconds"}, "last_error": None | {"at", "error"}, "failures"}; None when
    the run was never synced."""
    try:
        found = json.loads((Path(run_dir) / SYNC_DIR / STATUS).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None
