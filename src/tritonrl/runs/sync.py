"""The background sync of a run to its object store, and its record for `tritonrl status`.

    with StoreSync(run.path, "s3://bucket/runs/demo", interval_s=600) as sync:
        train()                  # after each checkpoint: sync.request()
    # on the way out, also on an exception, Ctrl-C or `Interrupted`: a final sync_now()

A daemon thread pushes the run (`transfer.push`: changed files only, manifest last) every
`interval_s` seconds; with `interval_s == 0` it pushes only when asked, `request()` waking
it (with `interval_s > 0` a request is served by the next periodic push). `sync_now()`
pushes in the caller's thread (one push at a time: it waits for one in flight): the
emergency sync on a pre-emption and the final sync of a stage are this one.

A push that fails is logged as a warning naming the URL and the error, and retried by the
thread after 1 s, doubling to 60 s, until one goes through (which sends everything that
changed meanwhile); nothing raises into the training thread, which goes on with its local
checkpoints. The last successful sync (when, files, bytes) and the current error are
written to `RUN/.sync/status.json`; `syncdir.store_status(run_dir)` reads it.

What it does NOT do: it does not decide what to upload or in which order (`transfer.py`),
write checkpoints, or stop the training when the store stays unreachable.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from pathlib import Path

from tritonrl.runs.atomic import atomic_write_json
from tritonrl.runs.manifest import now
from tritonrl.runs.store import Store, open_store
from tritonrl.runs.syncdir import STATUS, SYNC_DIR, store_status
from tritonrl.runs.transfer import push

log = logging.getLogger(__name__)


class StoreSync:
    """Push `run_dir` to the run URL `url` (or an opened `Store` there) in the background;
    see the module docstring. `retry_s`: the first and the longest wait before a retry."""

    def __init__(
        self,
        run_dir: str | Path,
        url: str | Store,
        interval_s: float = 600.0,
        retry_s: tuple[float, float] = (1.0, 60.0),
    ):
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0 (0: only when asked), not {interval_s}")
        self.run_dir = Path(run_dir).expanduser().resolve()
        self._given = url if isinstance(url, Store) else None
        self.url = url.url if isinstance(url, Store) else url
        self.interval_s = float(interval_s)
        self.retry_s = retry_s
        self._store: Store | None = self._given
        self._push_lock = threading.Lock()  # one push at a time in this process
        self._cond = threading.Condition()  # guards the schedule below
        self._pending = False
        self._stopping = False
        self._failures = 0
        self._retry_at: float | None = None
        self._last_attempt = time.monotonic()
        self._thread: threading.Thread | None = None
        previous = store_status(self.run_dir) or {}
        self._status = {
            "url": self.url,
            "last_sync": previous.get("last_sync") if previous.get("url") == self.url else None,
            "last_error": None,
            "failures": 0,
        }

    # ------------------------------------------------------------------ the caller's side

    def start(self) -> StoreSync:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(
                target=self._loop, name=f"store-sync {self.url}", daemon=True
            )
            self._thread.start()
        return self

    def request(self) -> None:
        """Ask for a push soon (after a checkpoint); never blocks, never raises."""
        with self._cond:
            self._pending = True
            self._cond.notify_all()

    def sync_now(self, timeout_s: float | None = None) -> bool:
        """Push now and say whether it went through (a failure is logged and retried by
        the thread). With `timeout_s`, the push runs in a helper thread and False comes
        back when it is not through by then (it goes on in the background)."""
        if timeout_s is None:
            with self._push_lock:
                return self._attempt()
        result: list[bool] = []

        def work() -> None:
            with self._push_lock:
                result.append(self._attempt())

        helper = threading.Thread(target=work, name=f"store-sync-now {self.url}", daemon=True)
        helper.start()
        helper.join(timeout_s)
        if not result:
            log.warning("sync to %s is not through after %.0f s; it goes on in the background",
                        self.url, timeout_s)  # fmt: skip
        return bool(result and result[0])

    def stop(self) -> None:
        """Stop the thread (after the push it may be doing)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def status(self) -> dict:
        """The last successful sync and the current error, as in `store_status`."""
        with self._cond:
            return json.loads(json.dumps(self._status))

    def __enter__(self) -> StoreSync:
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.sync_now()  # also when the body raised: the emergency / final sync

    # ------------------------------------------------------------------ the thread

    def _due(self) -> float:
        """The monotonic time of the next push (inf: none until asked)."""
        if self._retry_at is not None:
            return self._retry_at
        if self._pending:
            return 0.0
        if self.interval_s > 0:
            return self._last_attempt + self.interval_s
        return math.inf

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    wait = self._due() - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(None if math.isinf(wait) else wait)
                if self._stopping:
                    return
            with self._push_lock:
                self._attempt()

    def _attempt(self) -> bool:
        """One push (the push lock held); records the outcome and the next retry."""
        with self._cond:
            self._pending = False
            self._last_attempt = time.monotonic()
        try:
            if self._store is None:
                self._store = open_store(self.url)
            result = push(self.run_dir, self._store)
        except Exception as e:
            self._store = self._given  # opened afresh next time (credentials, connections)
            self._failed(e)
            return False
        with self._cond:
            self._failures = 0
            self._retry_at = None
            self._status.update(
                last_sync={"at": now(), "files": result.files, "bytes": result.bytes,
                           "deleted": result.deleted, "seconds": round(result.seconds, 3)},
                last_error=None,
                failures=0,
            )  # fmt: skip
            self._write_status()  # under the lock: the file never lags what status() says
        level = logging.INFO if result.files or result.deleted else logging.DEBUG
        log.log(level, "synced %s to %s: %d files (%d bytes) up, %d deleted, %.1f s",
                self.run_dir, self.url, result.files, result.bytes, result.deleted,
                result.seconds)  # fmt: skip
        return True

    def _failed(self, error: Exception) -> None:
        text = f"{type(error).__name__}: {error}".strip()[:500]
        with self._cond:
            self._failures += 1
            first, longest = self.retry_s
            delay = min(first * 2 ** (self._failures - 1), longest)
            self._retry_at = time.monotonic() + delay
            self._status.update(last_error={"at": now(), "error": text},
                                failures=self._failures)  # fmt: skip
            self._write_status()  # under the lock: the file never lags what status() says
            self._cond.notify_all()
        log.warning("sync of %s to %s failed (%s); retrying in %.1f s, training goes on with "
                    "local checkpoints", self.run_dir, self.url, text, delay)  # fmt: skip

    def _write_status(self) -> None:
        try:
            (self.run_dir / SYNC_DIR).mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.run_dir / SYNC_DIR / STATUS, self.status())
        except OSError as e:
            log.warning("cannot write %s: %s", self.run_dir / SYNC_DIR / STATUS, e)
