"""One sandboxed worker process, driven command by command from the trusted side.

`WorkerSession` starts `python -m tritonrl.verify.worker` inside the sandbox of
`tritonrl.verify.sandbox` (`spawn_sandboxed`: the same mechanisms, limits and
process-tree kill as `run_sandboxed`), sends JSON commands on its stdin and reads one
JSON reply per command from its stdout, under one wall-clock deadline for the whole
session. Anything the worker says is untrusted: a reply that is not one bounded JSON
object, a worker that exits or is killed, or a deadline passed ends the session with a
`WorkerError` whose message says why (timeout, memory, a signal, the tail of its
stderr).

`findings()` reads the worker's findings log (`tritonrl.verify.findings`): what its
guards saw, written the moment they saw it, so it survives a worker that segfaults,
aborts, is OOM-killed or hangs before replying. Like the replies it is untrusted; only
known cheat flags are taken from it, which can only lower the verdict. The candidate can
delete or garble it: a worker that then dies gets a crash verdict without those flags,
never a correct one.

What it does NOT do: decide anything (see `funnel`).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

import tritonrl
from tritonrl.config import VerifyConfig
from tritonrl.verify import sandbox as sb
from tritonrl.verify.findings import read_findings

MAX_REPLY_BYTES = 4 << 20
STDERR_CAP = 64 << 10


class WorkerError(Exception):
    """The worker gave no usable reply; `timed_out` when the deadline passed."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


def died_error(code: int | None, stderr: str, oom_killed: bool = False) -> WorkerError:
    """Why a worker that gave no reply is gone (`code` as `SandboxedProcess.returncode`)."""
    why = sb.describe_exit(code, stderr, oom_killed=oom_killed) if code is not None else None
    tail = stderr.strip().splitlines()[-1][:300] if stderr.strip() else ""
    what = f"killed ({why})" if why else f"exited with status {code}"
    return WorkerError(f"the worker {what} before answering" + (f": {tail}" if tail else ""))


# On CUDA a worker's own CPU work is small (loading inputs, saving outputs), and idle
# OpenMP threads spin: on the H100 a worker's 16 threads and those of the process that
# verifies took 5.7 CPU seconds per correct candidate, 1.4 with one thread each
# (docs/benchmarks.md). On the CPU the interpreter runs the kernel: threads stay.
WORKER_ENV = {
    False: {"TRITON_INTERPRET": "1", "OMP_WAIT_POLICY": "PASSIVE"},
    True: {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}


def _connections(config: VerifyConfig, device: str) -> dict[str, str]:
    if device != "cuda" or not config.cuda_max_connections:
        return {}
    return {"CUDA_DEVICE_MAX_CONNECTIONS": str(config.cuda_max_connections)}


def sandbox_config(config: VerifyConfig, device: str, file_mb: int = 256) -> sb.SandboxConfig:
    """`file_mb`: the largest file the worker may write (outputs of full-size tasks)."""
    package_root = str(Path(tritonrl.__file__).resolve().parent.parent)
    return sb.SandboxConfig(
        max_file_mb=file_mb,
        timeout_s=config.timeout_s,
        memory_mb=config.memory_mb,
        max_procs=config.max_procs,
        strict=config.sandbox_strict,
        gpu=device == "cuda",
        env={**WORKER_ENV[device == "cuda"], **_connections(config, device)},
        extra_ro_paths=(package_root,),
    )


class WorkerSession:
    def __init__(self, workdir: Path, config: VerifyConfig, device: str, file_mb: int = 256):
        self.workdir = Path(workdir).resolve()
        self.config = sandbox_config(config, device, file_mb)
        self.enforced: list[str] = []
        self.missing: list[str] = []

    def __enter__(self) -> WorkerSession:
        argv = [sys.executable, "-m", "tritonrl.verify.worker"]
        # What is not enforced goes into the verdict (VerifyResult.sandbox), not the log.
        self.child = sb.spawn_sandboxed(argv, self.workdir, self.config, stdin=subprocess.PIPE)
        self.proc = self.child.proc
        self.enforced, self.missing = list(self.child.enforced), list(self.child.missing)
        self.deadline = self.child.started + self.config.timeout_s
        self.stderr = sb.Capture(STDERR_CAP)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = bytearray()
        return self

    def _drain_stderr(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr.feed(chunk)

    def call(self, cmd: dict) -> dict:
        """Send one command; return the worker's reply (a dict), or raise WorkerError."""
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        while b"\n" not in self.buffer:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerError(f"timed out after {self.config.timeout_s:.0f} s", timed_out=True)
            if not self.sel.select(timeout=min(remaining, 1.0)):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise self._died()
            self.buffer += chunk
            if len(self.buffer) > MAX_REPLY_BYTES:
                raise WorkerError("the worker sent an oversized reply (forged or corrupt)")
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerError("the worker sent garbage instead of a reply") from None
        if not isinstance(reply, dict):
            raise WorkerError("the worker sent a reply that is not an object")
        return reply

    def findings(self) -> dict[str, str]:
        """Cheat flag -> detail from the worker's findings log (bounded, defensive)."""
        return read_findings(self.workdir)

    def _died(self) -> WorkerError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        self._stderr_thread.join(timeout=1)
        return died_error(self.child.returncode, self.stderr.text(), self.child.oom_killed)

    def __exit__(self, *exc) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self.child.kill()
            self.proc.wait()
            self._stderr_thread.join(timeout=2)
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                stream.close()
            self.sel.close()
            self.child.close()
