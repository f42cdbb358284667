"""One sandboxed run to completion: `run_sandboxed`.

`run_sandboxed` starts the child with `spawn_sandboxed`, logs a WARNING for each
mechanism not enforced, feeds it its stdin, captures its stdout and stderr (each capped
at `output_cap_bytes`: head and tail kept, the cut noted, see `Capture`), kills the
whole tree at the timeout or once the child has exited and closed its pipes (or after
a short grace), and returns a `SandboxRun`.

What it does NOT do: time precisely (the timeout is checked by polling, about every
50 ms), or trust anything it captured: a `SandboxRun` is untrusted output.
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tritonrl.verify.sandbox.config import SandboxConfig, SandboxRun
from tritonrl.verify.sandbox.spawn import (
    SandboxedProcess,
    describe_exit,
    exit_code,
    spawn_sandboxed,
)

log = logging.getLogger(__name__)

_POLL_S = 0.05
_EXIT_GRACE_S = 1.0  # after the child exits, how long to wait for its pipes to close
_READ_CHUNK = 1 << 16


class Capture:
    """Keeps the first and last halves of a stream, counting what it drops."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[: -self.tail_cap]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - min(len(self.tail), self.tail_cap)

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_cap :]) if self.tail else b""
        note = b""
        if self.dropped:
            note = f"\n[... tritonrl sandbox: {self.dropped} bytes truncated ...]\n".encode()
        return (bytes(self.head) + note + tail).decode(errors="replace")


def _has_exited(pid: int) -> bool:
    """True once `pid` has exited, without reaping it (its pgid stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _read_available(fd: int, capture: Capture, max_chunks: int = 64) -> bool | None:
    """Read what is there: False at end of file, None when the pipe is empty for now."""
    for _ in range(max_chunks):
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return None
        except OSError:
            return False
        if not data:
            return False
        capture.feed(data)
    return True


def _write_some(fd: int, pending: memoryview) -> memoryview | None:
    """Write part of stdin; None when done or the child closed its end."""
    try:
        n = os.write(fd, pending[:_READ_CHUNK])
    except BlockingIOError:
        return pending
    except OSError:
        return None
    rest = pending[n:]
    return rest if len(rest) else None


class _Pump:
    """Moves stdin in and stdout/stderr out of the child until it is done or time is up."""

    def __init__(self, proc: subprocess.Popen, stdin: bytes | None, cap: int) -> None:
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.out, self.err = Capture(cap), Capture(cap)
        self.captures = {proc.stdout.fileno(): self.out, proc.stderr.fileno(): self.err}
        for fd in self.captures:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
        self.pending = memoryview(stdin) if stdin else None
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            if self.pending is None:
                proc.stdin.close()
            else:
                self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)

    def reading(self) -> bool:
        return any(key.events & selectors.EVENT_READ for key in self.sel.get_map().values())

    def step(self, timeout: float) -> None:
        if not self.sel.get_map():
            time.sleep(timeout)
            return
        for key, events in self.sel.select(timeout):
            if events & selectors.EVENT_WRITE:
                self.pending = _write_some(key.fd, self.pending)
                if self.pending is None:
                    self.sel.unregister(key.fd)
                    self.proc.stdin.close()
            elif _read_available(key.fd, self.captures[key.fd]) is False:
                self.sel.unregister(key.fd)

    def run_until(self, deadline: float) -> bool:
        """Pump until the child exited and closed its pipes; True if the deadline hit."""
        exited_at = None
        while True:
            now = time.monotonic()
            if now >= deadline:
                return True
            if exited_at is None and _has_exited(self.proc.pid):
                exited_at = now
            if exited_at is not None and (not self.reading() or now - exited_at > _EXIT_GRACE_S):
                return False
            self.step(min(_POLL_S, deadline - now))

    def drain(self) -> None:
        """After the kill: collect what is left in the pipes, without waiting for more."""
        for key in list(self.sel.get_map().values()):
            if key.events & selectors.EVENT_READ:
                for _ in range(16):  # bounded: a writer that escaped could write forever
                    if _read_available(key.fd, self.captures[key.fd]) is not True:
                        break
        self.sel.close()


def run_sandboxed(
    argv: Sequence[str],
    workdir: Path | str,
    config: SandboxConfig | None = None,
    stdin: bytes | None = None,
) -> SandboxRun:
    """Run `argv` in the sandbox with `workdir` as cwd, HOME and TMPDIR.

    Raises SandboxUnavailable (strict mode, a required mechanism missing) and ValueError
    or OSError for bad arguments; never for anything the child does.
    """
    config = config or SandboxConfig()
    pipe = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
    child = spawn_sandboxed(argv, workdir, config, stdin=pipe)
    for item in child.missing:
        log.warning("sandbox: NOT enforced: %s", item)
    try:
        return _run(child, config, stdin)
    finally:
        child.close()


def _run(child: SandboxedProcess, config: SandboxConfig, stdin: bytes | None) -> SandboxRun:
    proc = child.proc
    pump = _Pump(proc, stdin, config.output_cap_bytes)
    try:
        timed_out = pump.run_until(child.started + config.timeout_s)
    finally:
        child.kill()
        raw = proc.wait()
        pump.drain()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    wall = time.monotonic() - child.started
    return _result(child, pump, raw, timed_out, wall)


def _result(
    child: SandboxedProcess, pump: _Pump, raw: int, timed_out: bool, wall: float
) -> SandboxRun:
    out, err = pump.out, pump.err
    stderr = err.text()
    returncode = exit_code(raw)
    return SandboxRun(
        returncode=returncode,
        stdout=out.text(),
        stderr=stderr,
        timed_out=timed_out,
        killed=describe_exit(returncode, stderr, timed_out, child.oom_killed),
        wall_s=wall,
        enforced=list(child.enforced),
        missing=list(child.missing),
        truncated=[n for n, c in (("stdout", out), ("stderr", err)) if c.dropped],
    )
