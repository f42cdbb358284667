"""The object store a run is kept in: the `Store` interface over one location (an fsspec
filesystem and a root there) and `open_store`, which opens one and checks it can be used.

    store = open_store("s3://bucket/runs")     # StoreError now if it cannot be reached
    url = store.run_url("demo")                # s3://bucket/runs/demo
    open_store(url, write=True)                # also writes, reads back and deletes an object

A store is any fsspec URL (`s3://`, `gs://`, `file:///abs/path`) or a local path. S3
credentials and the endpoint come from the standard AWS variables (AWS_ENDPOINT_URL
included), as boto3 reads them. A store that cannot be used is a `StoreError` naming the
URL and the variables or the package to check. `Store`'s methods are the only code that
touches the store (a subclass can watch them).

What it does NOT do: know what a run is: which files go up, in which order, and what a
pull checks are the transfers' (`transfer.py`: push, pull, list_runs); it does not
create buckets (`bucket.py`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from tritonrl.runs.atomic import atomic_write_bytes

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


def opened(url: str | Store) -> Store:
    """`url` opened (`open_store`), or the `Store` given as it is."""
    return url if isinstance(url, Store) else open_store(url)
