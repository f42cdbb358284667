"""The run's copy in an object store: push a run directory there, pull it onto a fresh
machine, list the runs a store holds.

    store = open_store("s3://bucket/runs")     # StoreError now if it cannot be reached
    url = store.run_url("demo")                # s3://bucket/runs/demo
    push("runs/demo", url)                     # changed files only, manifest.json last
    pull(url, "/scratch/demo")                 # every file; bad checkpoints skipped
    list_runs("s3://bucket/runs")              # [{"name", "url", "stages", ...}]

A store is any fsspec URL (`s3://`, `gs://`, `file:///abs/path`) or a local path. S3
credentials and the endpoint come from the standard AWS variables (AWS_ENDPOINT_URL
included), as boto3 reads them.

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
from tritonrl.runs.atomic import atomic_write_bytes, atomic_write_json
from tritonrl.runs.manifest import LOCK, MANIFEST, RunError

log = logging.getLogger(__name__)

SYNC_DIR = ".sync"  # in the run dir: the sync's own records, never uploaded
STATE = "state.json"
PUSH_LOCK = "push.lock"
PROBE = ".tritonrl-write-probe"  # the object `Store.probe_write` writes and deletes
CREDENTIALS = {  # what to check when a store cannot be reached, by protocol
    "s3": "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, "
    "AWS_ENDPOINT_URL (a non-AWS S3 server), AWS_DEFAULT_REGION",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS",
}
BACKENDS = {"s3": 'pip install "tritonrl[s3]" (s3fs and boto3)', "gs": "pip install gcsfs",
            "az": "pip install adlfs"}  # fmt: skip
_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "local": "file"}


class StoreError(ValueError):
    """A store that cannot be used: the message names the URL and what to check."""


def _normal(url: str) -> str:
    """`url` without a trailing '/'; a plain local path made absolute."""
    url = str(url).strip()
    if "://" not in url:
        return os.path.abspath(os.path.expanduser(url))
    return url.rstrip("/") if not url.endswith("://") else url


def _protocol(url: str) -> str:
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    return _ALIASES.get(protocol, protocol)


def _hint(url: str) -> str:
    protocol = _protocol(url)
    if protocol == "file":
        return "check that the path exists or can be created, and is writable"
    names = CREDENTIALS.get(protocol, f"the credentials of the {protocol}:// backend")
    return f"check the credentials and endpoint in the environment: {names}"


class Store:
    """An opened store location: `url` (as given; a local path made absolute), `fs` its
    fsspec filesystem and `root` its path there. Relative paths below are '/'-separated.
    Its methods are the only code that touches the store (a subclass can watch them)."""

    def __init__(self, url: str, fs, root: str):
        self.url = url
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        self.local = "file" in protocols

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def run_url(self, name: str) -> str:
        """The URL of run `name` (a run directory's name) in this store."""
        return f"{self.url}/{name}"

    def path(self, rel: str = "") -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def upload(self, local: Path, rel: str) -> None:
        """Copy the local file `local` to `rel` (atomically on a local store)."""
        if self.local:
            with _beside(Path(self.path(rel))) as tmp:
                shutil.copyfile(local, tmp)
        else:
            self.fs.put_file(str(local), self.path(rel))

    def upload_bytes(self, data: bytes, rel: str) -> None:
        target = self.path(rel)
        if self.local:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, data)
        else:
            self.fs.pipe_file(target, data)

    def read(self, rel: str) -> bytes | None:
        """The content of `rel`, or None when there is no such file."""
        try:
            return self.fs.cat_file(self.path(rel))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def download(self, rel: str, local: Path) -> None:
        """Copy `rel` to the local file `local` (through a temp file beside it)."""
        with _beside(local) as tmp:
            self.fs.get_file(self.path(rel), str(tmp))

    def delete(self, rels: list[str]) -> None:
        """Delete files `rels` (a missing one is no error); a local store's emptied
        folders go too."""
        if not rels:
            return
        if not self.local:
            self.fs.rm([self.path(rel) for rel in rels])
            return
        root = Path(self.root)
        for rel in rels:
            target = root / rel
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            with contextlib.suppress(OSError):  # stops at the first folder not empty
                for parent in target.relative_to(root).parents[:-1]:
                    (root / parent).rmdir()

    def files(self) -> dict[str, int]:
        """Every file below the root: relative path -> size."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root, withdirs=False, detail=True)
        except FileNotFoundError:
            return {}
        prefix = self.root.rstrip("/") + "/"
        return {
            name[len(prefix):]: int(info.get("size") or 0)
            for name, info in found.items()
            if name.startswith(prefix) and info.get("type") != "directory"
        }  # fmt: skip

    def children(self) -> list[str]:
        """The names of the folders (prefixes) right below the root."""
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory"
        )

    def probe(self) -> None:
        """Raise (any exception) unless the store can be reached and used: a local root is
        created; a remote prefix is listed, or when it holds nothing yet, its bucket."""
        if self.local:
            os.makedirs(self.root, exist_ok=True)
            if not os.access(self.root, os.W_OK | os.X_OK):
                raise PermissionError(f"{self.root} is not writable")
            return
        try:
            self.fs.ls(self.root, refresh=True)
            return
        except FileNotFoundError:
            pass  # nothing under the prefix yet: its bucket must exist
        bucket = self.root.split("/", 1)[0]
        try:
            self.fs.ls(bucket, refresh=True)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"bucket {bucket!r} does not exist: create it with `tritonrl bucket create "
                f"{bucket}` (versioned, encrypted, private), or name another"
            ) from None
        except PermissionError:
            pass  # a key scoped to the prefix may not list the bucket; the write probe tells

    def probe_write(self) -> None:
        """Raise (any exception) unless an object can be written under the root, read
        back and deleted: a store that lists but refuses writes (a read-only key, a
        bucket encryption the server cannot serve) would otherwise take no checkpoint."""
        path = self.path(f"{PROBE}-{os.getpid()}-{time.time_ns()}")
        body = b"tritonrl write probe\n"
        self.fs.pipe_file(path, body)
        try:
            if self.fs.cat_file(path) != body:
                raise OSError(f"{path} read back other bytes than were written")
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)


@contextlib.contextmanager
def _beside(path: Path) -> Iterator[Path]:
    """A temp path beside `path` to write; renamed over `path` if the body succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def open_store(url: str, write: bool = False) -> Store:
    """The store at `url` (an fsspec URL or a local path), checked to be reachable, and
    with `write` to take an object (`Store.probe_write`); a `StoreError` naming the URL
    and the variables or package to check if not."""
    import fsspec.core

    url = _normal(url)
    if not url or url.endswith("://"):
        raise StoreError(f"store URL {url!r} names no location (e.g. s3://bucket/prefix)")
    try:
        fs, root = fsspec.core.url_to_fs(url, skip_instance_cache=True)
    except ImportError as e:
        install = BACKENDS.get(_protocol(url), f"install the fsspec backend of {_protocol(url)}")
        raise StoreError(f"cannot open the store {url}: {e}; install it: {install}") from None
    except ValueError as e:
        raise StoreError(f"cannot open the store {url}: {e} (use s3://, gs://, file://, "
                         "or a local path)") from None  # fmt: skip
    store = Store(url, fs, root)
    try:
        store.probe()
    except Exception as e:
        raise StoreError(f"cannot reach the store {url}: {_short(e)}; {_hint(url)}") from None
    if write:
        try:
            store.probe_write()
        except Exception as e:
            raise StoreError(
                f"the store {url} can be read but not written: {_short(e)}; {_hint(url)}, "
                "that they may write there (s3:PutObject, s3:DeleteObject), and that the "
                "bucket's default encryption is one the server supports"
            ) from None
    return store


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:500]


def _opened(url: str | Store) -> Store:
    return url if isinstance(url, Store) else open_store(url)


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
    store = _opened(url)
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
    store = _opened(url)
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
    "stages": {stage: {"status", "step"}}}, by name."""
    store = _opened(url)
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
        stages = {
            stage: {"status": rec.get("status"), "step": rec.get("step")}
            for stage, rec in data["stages"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("%s/%s is not a readable manifest (%s): left out", url, MANIFEST, e)
        return None
    return {"name": name, "url": url, "created_at": data.get("created_at"),
            "updated_at": data.get("updated_at"), "stages": stages}  # fmt: skip
