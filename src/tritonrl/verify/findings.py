"""The worker's findings log: guard findings written the moment they happen, so that a
worker that dies before it replies (a segfault from ctypes on a device pointer, an abort,
the OOM killer, the deadline) still leaves them behind for the trusted side.

    log = FindingsLog(FINDINGS_NAME)       # the worker, before the candidate is imported
    log.write("ctypes: native code or raw memory access (ctypes.string_at)")
    flags = read_findings(workdir)         # the trusted side: {"ctypes": "...", ...}

`FindingsLog` opens `FINDINGS_NAME` in the work dir append-only and close-on-exec, and
writes each new flag-prefixed finding as one line with a single unbuffered `os.write`.
`read_findings` is the trusted side's reader: it never follows a symlink nor blocks on a
FIFO, reads a bounded head and tail of a regular file, and keeps only lines that start
with a known flag name (`tritonrl.verify.result.CHEAT_FLAGS`), each detail cut short.

What it does NOT do: make the findings trustworthy. The file is written by the worker,
in the candidate's process: the candidate can write lines of its own (that only adds
cheating flags: reward 0), and it can truncate, delete or garble the file. That only
ever drops the flags of a worker that then dies or answers nothing: the verdict is a
crash (the partial credit of a compiled-but-wrong kernel), never a correct one, and a
worker that does answer still reports its findings in its replies. The file access it
needs is itself an `io` finding of the static checks. Stdlib only: no torch here.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from tritonrl.verify.result import CHEAT_FLAGS

FINDINGS_NAME = "findings.log"
MAX_LINE = 300  # characters per finding line (written and read)
MAX_LINES = 256  # findings a worker writes, and a reader keeps
READ_CAP = 32 << 10  # bytes read from each end of the file


class FindingsLog:
    """Append-only findings log of one worker: `write(problem)` appends a flag-prefixed
    problem ("ctypes: ...") once, flushed at once; never raises."""

    def __init__(self, path: str | os.PathLike) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self.fd = os.open(path, flags, 0o600)
        self.seen: set[str] = set()
        self._write = os.write  # bound now, before any candidate code runs

    def write(self, problem: str) -> None:
        try:
            line = " ".join(str(problem).split())[:MAX_LINE]
            if not line or line in self.seen or len(self.seen) >= MAX_LINES:
                return
            self.seen.add(line)
            self._write(self.fd, (line + "\n").encode("utf-8", "replace"))
        except Exception:  # a finding must never break the call that produced it
            pass

    def write_flags(self, flags: dict[str, str]) -> None:
        for name, detail in flags.items():
            self.write(f"{name}: {detail}")


def read_head(path: str | os.PathLike, cap: int) -> bytes:
    """At most `cap` bytes from the start of a file an untrusted process wrote: only a
    regular file, without following links or blocking on FIFOs (b"" otherwise)."""
    return _read_bounded(Path(path), cap, tail=False)


def _read_bounded(path: Path, cap: int = READ_CAP, tail: bool = True) -> bytes:
    """Head and tail of a regular file, without following links or blocking on FIFOs."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b""
        head = os.read(fd, cap)
        if info.st_size <= cap or not tail:
            return head
        os.lseek(fd, max(cap, info.st_size - cap), os.SEEK_SET)
        return head + b"\n" + os.read(fd, cap)
    except OSError:
        return b""
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def read_findings(workdir: str | os.PathLike) -> dict[str, str]:
    """Known cheat flags -> detail, from the findings log in `workdir` (written by an
    untrusted process: anything that is not a line "<known flag>: <detail>" is ignored).
    A missing or unreadable file gives {}."""
    found: dict[str, str] = {}
    data = _read_bounded(Path(workdir) / FINDINGS_NAME)
    for raw in data.decode("utf-8", "replace").splitlines()[: 2 * MAX_LINES]:
        name, sep, detail = raw.partition(": ")
        if not sep or name not in CHEAT_FLAGS:
            continue
        detail = " ".join(detail.split())[:MAX_LINE]
        found[name] = f"{found[name]}; {detail}"[:MAX_LINE] if name in found else detail
    return found
