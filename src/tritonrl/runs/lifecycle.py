"""What every stage process does around its work so that a kill loses at most one
checkpoint interval: sealed checkpoints, the object-store sync, the spot watcher; and the
stage's record in the manifest: started, then done, failed or interrupted.

    with StopSignals() as stop, stage_services(run, config, stop), stage(run, "sft"):
        resume = resume_point(run, "sft")    # the checkpoint to go on from, or None
        ...train...                      # each checkpoint: record_checkpoint(run, stage, dir)

`stage` starts the stage (reopening a done one with `reopen`), and marks it done when
its block ends, interrupted (with the signal) on `Interrupted` or a KeyboardInterrupt
(SIGINT), failed (with `Type: message`) on anything else, re-raising. `resume_point`
is the consistent checkpoint an earlier attempt left (logged, and recorded in the stage
info as `resumed_from_checkpoint`).

`stage_services` opens the run's store (an unreachable one is an error naming the URL and
the credential variables, before any work), starts the background sync
(`run.sync_interval_s`; 0 syncs after every checkpoint) and the AWS spot watcher
(`run.spot_watch`: a notice asks `stop` for the same stop a SIGTERM gives: checkpoint at
the next step boundary, then out), and always ends with a final sync, also when the stage
fails or is interrupted, so the emergency sync of a pre-emption is this one. On a
read-only run (a training rank other than 0) it starts the spot watcher only: rank 0
alone syncs.

`record_checkpoint` seals a finished checkpoint (`runs/checkpoint.py`), records it in the
manifest (written last), and wakes the sync. The run's URL in the store is
`run.store/<run directory name>`, recorded in the manifest at the first sync so that a run
restored into another directory goes on syncing to the same place.

What it does NOT do: it does not write checkpoints (the trainers do), decide whether
to resume (the stages and `tritonrl resume` do), or talk to the store itself (`store.py`,
`sync.py`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from tritonrl.runs.checkpoint import check, read_seal, seal, step_of
from tritonrl.runs.manifest import RESUMED, Run
from tritonrl.runs.preemption import Interrupted
from tritonrl.runs.spot import watch_spot
from tritonrl.runs.store import open_store
from tritonrl.runs.sync import StoreSync

log = logging.getLogger(__name__)

_active: dict[Path, object] = {}  # run path -> its StoreSync in this process
_lock = threading.Lock()


def record_checkpoint(run: Run, stage: str, path: str | Path, step: int | None = None) -> None:
    """Seal the finished checkpoint `path` (unless a matching seal is already there),
    record it as `stage`'s checkpoint (and its step), and wake the run's sync."""
    path = Path(path)
    if check(path, hashes=False) is not None:
        seal(path)
    run.add_artifact(stage, "checkpoint", path)
    if step is not None:
        run.set_step(stage, step)
    with _lock:
        sync = _active.get(run.path)
    if sync is not None:
        sync.request()


def run_store_url(run: Run, root: str | None) -> str | None:
    """The run's URL in the store rooted at `root` (None: no store): the URL the manifest
    recorded when it lies under `root`, else `root/<run directory name>`."""
    if not root:
        return None
    if "://" not in root:  # a local path: the same folder whichever process asks
        root = Path(root).expanduser().resolve().as_uri()
    recorded = run.store
    base = root.rstrip("/")
    if recorded and (recorded == base or recorded.startswith(base + "/")):
        return recorded
    return f"{base}/{run.path.name}"


@contextlib.contextmanager
def stage_services(run: Run, config, stop=None) -> Iterator[object | None]:
    """The store sync and the spot watcher for one stage (see the module docstring);
    yields the StoreSync, or None when the run has no store or is read-only."""
    url = None if run.readonly else run_store_url(run, config.run.store)
    with contextlib.ExitStack() as stack:
        sync = None
        if url:
            open_store(url, write=True)  # unreachable or read-only: StoreError naming why
            if run.store != url:
                run.set_fields(store=url)
            sync = stack.enter_context(StoreSync(run.path, url, config.run.sync_interval_s))
            with _lock:
                _active[run.path] = sync
            stack.callback(_forget, run.path)
        if stop is not None and config.run.spot_watch:
            stack.enter_context(watch_spot(stop))
        yield sync


def _forget(path: Path) -> None:
    with _lock:
        _active.pop(path, None)


def consistent_checkpoint(run: Run, stage: str) -> Path | None:
    """The checkpoint to resume `stage` from: the recorded one when its seal matches, else
    (with a warning) the newest consistent checkpoint beside it, else None (start over)."""
    if not run.has_artifact(stage, "checkpoint"):
        return None
    recorded = run.path / run.stage(stage)["artifacts"]["checkpoint"]
    if recorded.is_dir() and read_seal(recorded) is None:
        return recorded  # recorded (so complete) by a tritonrl that did not seal yet
    problem = check(recorded)
    if problem is None:
        return recorded
    older = sorted(
        (p for p in recorded.parent.iterdir() if p != recorded and step_of(p) is not None),
        key=step_of,
        reverse=True,
    ) if recorded.parent.is_dir() else []  # fmt: skip
    for candidate in older:
        if check(candidate) is None:
            log.warning("checkpoint %s is not usable (%s): resuming from %s instead",
                        run.relpath(recorded), problem, run.relpath(candidate))  # fmt: skip
            run.add_artifact(stage, "checkpoint", candidate)
            run.set_step(stage, step_of(candidate))
            return candidate
    log.warning("checkpoint %s is not usable (%s) and no older one is: %s starts over",
                run.relpath(recorded), problem, stage)  # fmt: skip
    return None


@contextlib.contextmanager
def stage(run: Run, name: str, reopen: bool = False) -> Iterator[None]:
    """Stage `name` of `run` started, and marked done when the block ends; interrupted
    (with the signal's name) on `Interrupted` or a KeyboardInterrupt (a SIGINT outside
    our handler, another thread's), failed (with `Type: message`) on anything else; the
    exception is re-raised. `reopen` starts a done stage again (a raised budget)."""
    run.start_stage(name, reopen=reopen)
    try:
        yield
    except Interrupted as e:
        run.interrupt_stage(name, e.signal_name)
        raise
    except KeyboardInterrupt:
        run.interrupt_stage(name, "SIGINT")
        raise
    except BaseException as e:
        run.fail_stage(name, f"{type(e).__name__}: {e}")
        raise
    run.finish_stage(name)


def resume_point(run: Run, name: str, logger: logging.Logger = log) -> str | None:
    """The checkpoint an earlier attempt of stage `name` recorded (sealed and whole, else
    an older one: `consistent_checkpoint`), logged to `logger` (the stage's own, which its
    command shows) and noted in the stage info as resumed_from; None to start afresh."""
    checkpoint = consistent_checkpoint(run, name)
    if checkpoint is None:
        return None
    relative = run.relpath(checkpoint)
    logger.info("resuming %s of %s from %s (step %s)", name.upper(), run.path, relative,
                run.stage(name)["step"])  # fmt: skip
    run.set_info(name, **{RESUMED: relative})
    return str(checkpoint)
