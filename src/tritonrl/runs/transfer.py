"""A run's transfers to and from its object store: push a run directory there, pull it
onto a fresh machine, list the runs a store holds.

    push("runs/demo", "s3://bucket/runs/demo")   # changed files only, manifest.json last
    pull("s3://bucket/runs/demo", "/scratch/demo")   # every file; bad checkpoints skipped
    list_runs("s3://bucket/runs")                # [{"name", "url", "stages", ...}]

Each takes a URL (opened with `store.open_store`) or an opened `Store`.

`push` uploads what changed since the last push to the same URL, by size and mtime, as
recorded in `RUN/.sync/state.json` (never uploaded). It leaves out the manifest lock,
`.sync/`, atomic writes' temp files, transformers' `tmp-checkpoint-*` and every checkpoint
folder whose seal does not match its files yet (still being written). Order: plain files,
then each checkpoint's files and its seal after them, then `manifest.json` (as it was
read before the scan, so it names only complete checkpoints) last; only then are the
files it uploaded earlier and that are gone here (rotated checkpoints) deleted there.

`pull` reads the store's manifest first, downloads every file, checks every checkpoint
(`checkpoint.check`, hashes on), removes and skips an incomplete or corrupt one with a
warning, points a stage's `checkpoint` artifact that named a skipped one at the newest
consistent one beside it (or drops it: the stage starts over) and writes the manifest
last. The pulled files are recorded as uploaded, so the next push sends only changes.

What it does NOT do: it does not run in the background (`sync.py` does), check the
store's copy against the local record (a file deleted in the store by hand is not sent
again until it changes here), merge two machines pushing one run, or create buckets.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tritonrl.runs import checkpoint as ck
from tritonrl.runs.atomic import atomic_write_json
from tritonrl.runs.manifest import LOCK, MANIFEST, RunError, shown_stages
from tritonrl.runs.store import Store, StoreError, opened
from tritonrl.runs.syncdir import PUSH_LOCK, STATE, SYNC_DIR

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- the run's files


def _skipped_name(name: str, is_dir: bool) -> bool:
    """Temp files and folders of atomic writes (`.x.tmp`) and transformers' checkpoints
    being written (`tmp-checkpoint-N`)."""
    return (name.startswith(".") and name.endswith(".tmp")) or (
        is_dir and name.startswith("tmp-checkpoint-")
    )


def is_checkpoint(folder: Path) -> bool:
    """Whether `folder` holds one checkpoint: `checkpoint-N` anywhere, `round-N` inside a
    `checkpoints` folder (best-of-n's `rl/rounds/round-N` holds samples), or any sealed
    folder of either name."""
    if ck.step_of(folder) is None:
        return False
    if folder.name.startswith("checkpoint-") or folder.parent.name == "checkpoints":
        return True
    return (folder / ck.SEAL).is_file()


def _walk(run_dir: Path) -> tuple[list[str], list[Path]]:
    """(the files outside checkpoint folders, run-relative and sorted, manifest and the
    sync's records left out; the checkpoint folders)."""
    plain: list[str] = []
    folders: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(run_dir):
        here = Path(dirpath)
        keep = []
        for name in sorted(dirnames):
            if _skipped_name(name, True) or (here == run_dir and name == SYNC_DIR):
                continue
            if is_checkpoint(here / name):
                folders.append(here / name)
            else:
                keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            if _skipped_name(name, False) or (here == run_dir and name in (LOCK, MANIFEST)):
                continue
            plain.append((here / name).relative_to(run_dir).as_posix())
    return sorted(plain), sorted(folders)


def _checkpoint_files(run_dir: Path, folder: Path) -> list[str]:
    """The checkpoint's files, run-relative, its seal last."""
    files = sorted(
        p.relative_to(run_dir).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != ck.SEAL and not _skipped_name(p.name, False)
    )
    return files + [(folder / ck.SEAL).relative_to(run_dir).as_posix()]


def _stat(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _load_state(run_dir: Path, url: str) -> dict:
    """What was uploaded to (or pulled from) `url`: {"url", "files": {rel: [size,
    mtime_ns]}}; empty for another URL or no record."""
    try:
        state = json.loads((run_dir / SYNC_DIR / STATE).read_text())
    except (OSError, ValueError):
        state = None
    if not isinstance(state, dict) or state.get("url") != url:
        return {"url": url, "files": {}}
    state.setdefault("files", {})
    return state


def _save_state(run_dir: Path, state: dict) -> None:
    (run_dir / SYNC_DIR).mkdir(exist_ok=True)
    atomic_write_json(run_dir / SYNC_DIR / STATE, state)


@contextlib.contextmanager
def _run_lock(run_dir: Path) -> Iterator[None]:
    """One push at a time per run directory, across processes."""
    (run_dir / SYNC_DIR).mkdir(exist_ok=True)
    with open(run_dir / SYNC_DIR / PUSH_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _named(manifest: dict) -> list[str]:
    """The run-relative paths the manifest's stages record as artifacts."""
    found = []
    for record in (manifest.get("stages") or {}).values():
        found += [p for p in (record.get("artifacts") or {}).values() if isinstance(p, str)]
    return found


def _under(rel: str, paths: list[str]) -> bool:
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in paths)


# ---------------------------------------------------------------------- push


@dataclass
class PushResult:
    files: int = 0  # uploaded
    bytes: int = 0
    deleted: int = 0  # from the store: gone here (rotated checkpoints)
    seconds: float = 0.0
    unsealed: list[str] = field(default_factory=list)  # checkpoint folders left for later


def push(run_dir: str | Path, url: str | Store) -> PushResult:
    """Upload `run_dir`'s changed files to the run URL `url`, manifest last, then delete
    there what is gone here (see the module docstring). Raises on a store error, having
    recorded what did go up."""
    started = time.monotonic()
    run_dir = Path(run_dir).expanduser().resolve()
    store = opened(url)
    with _run_lock(run_dir):
        result = _push(run_dir, store)
    result.seconds = time.monotonic() - started
    return result


def _push(run_dir: Path, store: Store) -> PushResult:
    manifest_stat = _stat(run_dir / MANIFEST)
    try:
        manifest_bytes = (run_dir / MANIFEST).read_bytes()  # before the scan: see above
        manifest = json.loads(manifest_bytes)
    except (OSError, ValueError) as e:
        raise RunError(f"{run_dir} has no readable {MANIFEST}: not a run to push ({e})") from e
    state = _load_state(run_dir, store.url)
    done: dict[str, list[int]] = state["files"]
    if not done:
        _refuse_another_run(store, manifest)
    result = PushResult()
    plain, folders = _walk(run_dir)

    def send(rel: str) -> bool:
        """Upload `rel` if changed; False when it vanished here meanwhile."""
        path = run_dir / rel
        stat = _stat(path)
        if stat is None:
            return False
        if done.get(rel) == stat:
            return True
        try:
            store.upload(path, rel)
        except FileNotFoundError:
            if path.exists():
                raise  # the store's side
            return False
        done[rel] = stat
        result.files += 1
        result.bytes += stat[0]
        return True

    try:
        for rel in plain:
            send(rel)
        for folder in folders:
            why = ck.check(folder, hashes=False)
            if why is not None:
                result.unsealed.append(folder.relative_to(run_dir).as_posix())
                log.debug("not uploading %s: %s", folder, why)
                continue
            # Files first, the seal after them; a file gone meanwhile (the folder is being
            # rotated away) leaves the seal here, so the store never holds a false seal.
            if all(send(rel) for rel in _checkpoint_files(run_dir, folder)):
                _save_state(run_dir, state)
        if done.get(MANIFEST) != manifest_stat:
            store.upload_bytes(manifest_bytes, MANIFEST)
            done[MANIFEST] = manifest_stat
            result.files += 1
            result.bytes += len(manifest_bytes)
        # Only now, with the manifest up: what this run uploaded and no longer has. What
        # the uploaded manifest still names stays (a checkpoint rotated before its successor
        # was recorded) until a later manifest no longer names it.
        named = _named(manifest)
        gone = sorted(
            rel for rel in done
            if rel != MANIFEST and not (run_dir / rel).exists() and not _under(rel, named)
        )  # fmt: skip
        store.delete(gone)
        for rel in gone:
            del done[rel]
        result.deleted = len(gone)
    finally:
        _save_state(run_dir, state)
    return result


def _refuse_another_run(store: Store, manifest: dict) -> None:
    """A first push to a URL that holds a different run (another created_at) would mix
    two runs' files: refuse it."""
    raw = store.read(MANIFEST)
    if raw is None:
        return
    try:
        there = json.loads(raw).get("created_at")
    except (ValueError, AttributeError):
        return
    if there and manifest.get("created_at") and there != manifest["created_at"]:
        raise StoreError(
            f"{store.url} holds another run (created {there}; this one was created "
            f"{manifest['created_at']}): give this run another directory name or store"
        )


# ---------------------------------------------------------------------- pull


@dataclass
class PullResult:
    files: int = 0  # downloaded
    bytes: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (checkpoint, why)
    repointed: dict[str, str | None] = field(default_factory=dict)  # stage -> checkpoint
    seconds: float = 0.0


def _check_target(run_dir: Path, url: str) -> None:
    """`run_dir` must be new, empty, or an unfinished pull of `url` (no manifest yet)."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a directory: pull {url} into a new directory")
    if (run_dir / MANIFEST).exists():
        raise RunError(f"{run_dir} already holds a run: pull {url} into a new directory")
    if any(run_dir.iterdir()) and not _load_state(run_dir, url)["files"]:
        raise RunError(f"{run_dir} is not empty: pull {url} into an empty or new directory")


def pull(url: str | Store, run_dir: str | Path) -> PullResult:
    """Fetch the run at `url` into `run_dir` (new, empty, or an unfinished pull of the
    same URL, which goes on); see the module docstring."""
    started = time.monotonic()
    store = opened(url)
    run_dir = Path(run_dir).expanduser().resolve()
    _check_target(run_dir, store.url)
    manifest = _store_manifest(store)
    run_dir.mkdir(parents=True, exist_ok=True)
    state = _load_state(run_dir, store.url)
    done: dict[str, list[int]] = state["files"]
    result = PullResult()
    there = store.files()
    try:
        for rel, size in sorted(there.items()):
            parts = rel.split("/")
            if rel in (MANIFEST, LOCK) or parts[0] == SYNC_DIR:
                continue
            if any(_skipped_name(p, i < len(parts) - 1) for i, p in enumerate(parts)):
                continue
            local = run_dir / rel
            stat = _stat(local)
            if stat is not None and done.get(rel) == stat and stat[0] == size:
                continue  # an unfinished pull fetched it already
            store.download(rel, local)
            done[rel] = _stat(local)
            result.files += 1
            result.bytes += size
        _save_state(run_dir, state)
        consistent = _check_checkpoints(run_dir, result, done)
        result.repointed = _repoint(manifest, run_dir, consistent)
        atomic_write_json(run_dir / MANIFEST, manifest)  # last: the run is complete now
        if not result.repointed:  # as the store has it; else the next push sends it
            done[MANIFEST] = _stat(run_dir / MANIFEST)
    finally:
        _save_state(run_dir, state)
    result.seconds = time.monotonic() - started
    log.info("pulled %d files (%d bytes) from %s into %s in %.1f s", result.files,
             result.bytes, store.url, run_dir, result.seconds)  # fmt: skip
    return result


def _store_manifest(store: Store) -> dict:
    raw = store.read(MANIFEST)
    if raw is None:
        parent_url = store.url.rsplit("/", 1)[0] if "/" in store.url.split("://")[-1] else ""
        try:
            runs = [r["url"] for r in list_runs(parent_url)] if parent_url else []
        except Exception:  # the parent may not be listable with this key
            runs = []
        listing = ", ".join(runs) or "none found"
        raise StoreError(f"no run at {store.url} (no {MANIFEST} there); runs there: {listing}")
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"{store.url}/{MANIFEST} is not JSON: {e}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), dict):
        raise StoreError(f"{store.url}/{MANIFEST} is not a tritonrl manifest (no 'stages')")
    return manifest


def _check_checkpoints(run_dir: Path, result: PullResult, done: dict) -> set[Path]:
    """Remove (and mark in the record as still in the store, so the next push deletes
    them there) the checkpoints that fail `checkpoint.check`; the consistent ones."""
    _, folders = _walk(run_dir)
    consistent = set()
    for folder in folders:
        why = ck.check(folder, hashes=True)
        if why is None:
            consistent.add(folder)
            continue
        rel = folder.relative_to(run_dir).as_posix()
        log.warning("skipping checkpoint %s from the store: %s", rel, why)
        result.skipped.append((rel, why))
        shutil.rmtree(folder)
        for name in list(done):
            if name.startswith(rel + "/"):
                done[name] = [-1, -1]  # in the store, not here: push deletes it there
    return consistent


def _repoint(manifest: dict, run_dir: Path, consistent: set[Path]) -> dict[str, str | None]:
    """Point each stage's `checkpoint` that is not here at the newest consistent one in its
    folder (and a stage not done at its step), or drop it; {stage: new checkpoint}."""
    changed: dict[str, str | None] = {}
    for stage, record in manifest["stages"].items():
        artifacts = record.get("artifacts") or {}
        rel = artifacts.get("checkpoint")
        if not isinstance(rel, str) or (run_dir / rel).exists():
            continue
        parent = (run_dir / rel).parent
        candidates = sorted((f for f in consistent if f.parent == parent), key=ck.step_of)
        if candidates:
            newest = candidates[-1]
            artifacts["checkpoint"] = newest.relative_to(run_dir).as_posix()
            if record.get("status") != "done":
                record["step"] = ck.step_of(newest)
            changed[stage] = artifacts["checkpoint"]
            log.warning("stage %s: checkpoint %s is not usable; it goes on from %s", stage,
                        rel, artifacts["checkpoint"])  # fmt: skip
        else:
            del artifacts["checkpoint"]
            if record.get("status") != "done":
                record["step"] = 0
            changed[stage] = None
            log.warning("stage %s: checkpoint %s is not usable and no other is: the stage "
                        "starts over", stage, rel)  # fmt: skip
    return changed


# ---------------------------------------------------------------------- list


def list_runs(url: str | Store) -> list[dict]:
    """The runs in the store at `url`: the URL itself when it holds a manifest, else each
    folder right below it that does; each {"name", "url", "created_at", "updated_at",
    "stages": {stage: {"status", "step"}}} (as `manifest.shown_stages` gives them), by name."""
    store = opened(url)
    itself = _describe(store, "", store.root.rstrip("/").rsplit("/", 1)[-1], store.url)
    if itself is not None:
        return [itself]
    found = []
    for name in store.children():
        if name == SYNC_DIR:
            continue
        described = _describe(store, f"{name}/", name, store.run_url(name))
        if described is not None:
            found.append(described)
    return found


def _describe(store: Store, prefix: str, name: str, url: str) -> dict | None:
    raw = store.read(prefix + MANIFEST)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data["stages"], dict):
            raise TypeError("its stages are not a mapping")
        stages = {  # as `tritonrl status` shows them: pending only while still to do
            stage: {"status": rec.get("status"), "step": rec.get("step")}
            for stage, rec in shown_stages(data).items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("%s/%s is not a readable manifest (%s): left out", url, MANIFEST, e)
        return None
    return {"name": name, "url": url, "created_at": data.get("created_at"),
            "updated_at": data.get("updated_at"), "stages": stages}  # fmt: skip
