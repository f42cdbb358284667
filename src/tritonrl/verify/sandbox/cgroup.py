"""The per-run cgroup of a sandboxed child: caps its process count and its memory, and
kills what is left of it.

`cgroup_parent(controller)` finds a cgroup directory in which this process may create
children with that controller ("pids" or "memory"): the controller's cgroup v1
hierarchy, or cgroup v2 where the controller is in the directory's
`cgroup.subtree_control` (it is enabled there when it is only listed in
`cgroup.controllers` and the kernel permits it: the root cgroup, or one with no
processes of its own). `memory_cgroup_parent(pids_parent)` is the memory one, kept on
the pids cgroup's directory on v2 (a process is in one cgroup per hierarchy).

`RunCgroup` is created per run. `add_pids(parent, limit)` sets `pids.max`;
`add_memory(parent, limit_bytes)` sets `memory.max` with `memory.swap.max` = 0 and
`memory.oom.group` = 1 where present (v2), or `memory.limit_in_bytes` with
`memory.memsw.limit_in_bytes` equal to it where present (v1): no swap, the OOM killer
ends the run. On v2 both limits live in one directory, on v1 each hierarchy gets its
own. The trampoline joins every directory (`procs_files`) before anything forks;
`oom_kills()` counts the OOM killer's kills in the run (v2 `memory.events`, v1
`memory.oom_control`); `kill_all` SIGKILLs every process in it at the end; `remove`
deletes it after the run (empty ones left by runner processes that died are removed
too).

What it does NOT do: limit CPU, I/O or GPU memory, or help where no cgroup is writable:
then, as root, nothing limits the process count (`nproc` missing) and, with `gpu=True`
(no RLIMIT_AS), nothing limits host memory (`memory-cgroup` missing). The memory limit
counts the page cache and tmpfs files the run charges, not just its heap.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

_CGROUP_PREFIX = "tritonrl-sbx-"
_COUNTER = itertools.count()
# A file that exists in a child cgroup only when the controller is active there.
_LIMIT_FILES = {"pids": ("pids.max",), "memory": ("memory.max", "memory.limit_in_bytes")}


def _own_cgroups() -> dict[str, str]:
    """Controller name ("" for cgroup v2) -> this process's cgroup path."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    return own


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def is_v2(path: Path) -> bool:
    return (path / "cgroup.controllers").exists()


def _enabled_v2(base: Path, controller: str) -> bool:
    """Is `controller` on for `base`'s children? Enable it if it is offered and we may."""
    subtree = base / "cgroup.subtree_control"
    if controller in _read_text(subtree).split():
        return True
    if controller not in _read_text(base / "cgroup.controllers").split():
        return False
    try:
        subtree.write_text(f"+{controller}")
    except OSError as exc:  # EBUSY: the cgroup has processes of its own; EACCES, EROFS
        log.debug("sandbox: cannot enable %s in %s: %s", controller, subtree, exc)
        return False
    return controller in _read_text(subtree).split()


def _candidates(controller: str) -> list[Path]:
    own = _own_cgroups()
    out: list[Path] = []
    for line in _read_text(Path("/proc/self/mounts")).splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mnt, fstype, opts = Path(parts[1].replace("\\040", " ")), parts[2], parts[3]
        if fstype == "cgroup" and controller in opts.split(","):
            out.append(mnt / own.get(controller, "/").lstrip("/"))
        elif fstype == "cgroup2":
            for base in dict.fromkeys((mnt / own.get("", "/").lstrip("/"), mnt)):
                if _enabled_v2(base, controller):
                    out.append(base)
    return out


def _usable(base: Path, controller: str) -> bool:
    # unique per call: threads of one process probe at once (a pool's lanes starting)
    test = base / f"{_CGROUP_PREFIX}probe-{os.getpid()}-{controller}-{uuid.uuid4().hex[:12]}"
    try:
        test.mkdir()
        ok = any((test / name).exists() for name in _LIMIT_FILES[controller])
        test.rmdir()
    except OSError:
        return False
    return ok


def cgroup_parent(controller: str) -> Path | None:
    """A cgroup directory in which we may create `controller`-limited children, if any."""
    return next((b for b in _candidates(controller) if _usable(b, controller)), None)


def pids_cgroup_parent() -> Path | None:
    return cgroup_parent("pids")


def memory_cgroup_parent(pids_parent: Path | None = None) -> Path | None:
    """Where memory-limited children may go; on cgroup v2 the pids parent itself, when
    that is on v2 too (both limits must sit on the one cgroup the run joins there)."""
    shared = pids_parent is not None and is_v2(pids_parent)
    for base in _candidates("memory"):
        if shared and is_v2(base) and base != pids_parent:
            continue
        if _usable(base, "memory"):
            return base
    return None


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text(value)


def _count(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


class RunCgroup:
    """The cgroup directories of one run (one per hierarchy), removed after it."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.memory_path: Path | None = None

    def _dir(self, parent: Path) -> tuple[Path, bool]:
        """This run's directory under `parent` (created now: True)."""
        for path in self.paths:
            if path.parent == parent:
                return path, False
        _remove_stale_cgroups(parent)
        path = parent / f"{_CGROUP_PREFIX}{os.getpid()}-{next(_COUNTER)}"
        path.mkdir()
        self.paths.append(path)
        return path, True

    def _undo(self, path: Path, created: bool) -> None:
        if created:
            self.paths.remove(path)
            with contextlib.suppress(OSError):
                path.rmdir()

    def add_pids(self, parent: Path, limit: int) -> None:
        path, created = self._dir(parent)
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            self._undo(path, created)
            raise

    def add_memory(self, parent: Path, limit_bytes: int) -> None:
        path, created = self._dir(parent)
        try:
            if (path / "memory.max").exists():  # v2
                (path / "memory.max").write_text(str(limit_bytes))
                _write_if_present(path / "memory.swap.max", "0")
                _write_if_present(path / "memory.oom.group", "1")
            else:  # v1: memory+swap capped at the memory limit, i.e. no swap
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                _write_if_present(path / "memory.memsw.limit_in_bytes", str(limit_bytes))
        except OSError:
            self._undo(path, created)
            raise
        self.memory_path = path

    @property
    def procs_files(self) -> list[str]:
        return [str(path / "cgroup.procs") for path in self.paths]

    def pids(self) -> list[int]:
        found = {int(p) for path in self.paths for p in _read_text(path / "cgroup.procs").split()}
        return sorted(found)

    def oom_kills(self) -> int:
        """Processes of this run the OOM killer killed (0 without a memory limit)."""
        if self.memory_path is None:
            return 0
        events = _read_text(self.memory_path / "memory.events")  # v2
        return _count(events or _read_text(self.memory_path / "memory.oom_control"), "oom_kill")

    def kill_all(self, timeout_s: float = 2.0) -> None:
        for path in self.paths:
            with contextlib.suppress(OSError):
                (path / "cgroup.kill").write_text("1")  # cgroup v2 only
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self, timeout_s: float = 2.0) -> None:
        deadline = time.monotonic() + timeout_s
        for path in list(self.paths):
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        log.warning("sandbox: cannot remove cgroup %s: %s", path, exc)
                        break
                    self.kill_all(timeout_s=0.1)
                    time.sleep(0.02)
        self.paths, self.memory_path = [], None


def _remove_stale_cgroups(parent: Path) -> None:
    """Remove empty cgroups left behind by runner processes that died."""
    for path in parent.glob(f"{_CGROUP_PREFIX}*"):
        try:
            pid = int(path.name[len(_CGROUP_PREFIX) :].split("-")[0])
            os.kill(pid, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                path.rmdir()
        except PermissionError:
            continue
