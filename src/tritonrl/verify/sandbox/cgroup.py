"""The pids cgroup that caps a sandboxed run's process count and kills what is left.

`pids_cgroup_parent()` finds a cgroup directory (the cgroup v1 `pids` hierarchy, or v2
with the pids controller) in which this process may create children. `PidsCgroup` is
one created per run with `pids.max` set; the trampoline joins it before anything forks,
`kill_all` SIGKILLs every process in it at the end, and it is removed after the run
(empty ones left by runner processes that died are removed too).

What it does NOT do: limit memory or CPU (no other controller is used), or help where no
cgroup is writable: then, as root, nothing limits the process count (reported as
`nproc` missing).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

_CGROUP_PREFIX = "tritonrl-sbx-"
_COUNTER = itertools.count()


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


def _pids_cgroup_candidates() -> list[Path]:
    own = _own_cgroups()
    out: list[Path] = []
    for line in _read_text(Path("/proc/self/mounts")).splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mnt, fstype, opts = Path(parts[1].replace("\\040", " ")), parts[2], parts[3]
        if fstype == "cgroup" and "pids" in opts.split(","):
            out.append(mnt / own.get("pids", "/").lstrip("/"))
        elif fstype == "cgroup2":
            for base in (mnt / own.get("", "/").lstrip("/"), mnt):
                if "pids" in _read_text(base / "cgroup.subtree_control").split():
                    out.append(base)
    return out


def pids_cgroup_parent() -> Path | None:
    """A cgroup directory in which we may create pids-limited children, if any."""
    for base in _pids_cgroup_candidates():
        test = base / f"{_CGROUP_PREFIX}probe-{os.getpid()}"
        try:
            test.mkdir()
            ok = (test / "pids.max").exists()
            test.rmdir()
        except OSError:
            continue
        if ok:
            return base
    return None


class PidsCgroup:
    """A pids cgroup created for one run and removed after it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path, limit: int) -> PidsCgroup:
        _remove_stale_cgroups(parent)
        path = parent / f"{_CGROUP_PREFIX}{os.getpid()}-{next(_COUNTER)}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            path.rmdir()
            raise
        return cls(path)

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def pids(self) -> list[int]:
        return [int(p) for p in _read_text(self.path / "cgroup.procs").split()]

    def kill_all(self, timeout_s: float = 2.0) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")  # cgroup v2 only
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self, timeout_s: float = 2.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    log.warning("sandbox: cannot remove cgroup %s: %s", self.path, exc)
                    return
                self.kill_all(timeout_s=0.1)
                time.sleep(0.02)


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
