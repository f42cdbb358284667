"""One sandboxed worker process, driven command by command from the trusted side.

`WorkerSession` starts `python -m tritonrl.verify.inside.worker` inside the sandbox of
`tritonrl.verify.sandbox` (`spawn_sandboxed`: the same mechanisms, limits and process-
tree kill as `run_sandboxed`), sends JSON commands on its stdin and reads one JSON reply
per command from its stdout, under one wall-clock deadline for the whole session, moved
on by the time the trusted side waits for the GPU gate with the worker idle
(`extend_deadline`: the limit bounds the candidate, not the verifier's queue). Anything
the worker says is untrusted: a reply that is not one bounded JSON object, a worker that
exits or is killed, or a deadline passed ends the session with a `WorkerError` whose
message says why (timeout, memory, a signal, the tail of its stderr). A sandbox limit
that ended the worker is named in `WorkerError.limit` (one of `result.LIMITS`), and its
message says which setting it is and how to raise it (`limit_text`). `reply_limit` names
the limit a failed reply's error says was hit (an allocation refused under RLIMIT_AS is
a MemoryError, not a kill); that text is untrusted too, and can only lower the verdict.

`findings()` reads the worker's findings log (`tritonrl.verify.findings`): what its
guards saw, written the moment they saw it, so it survives a worker that segfaults,
aborts, is OOM-killed or hangs before replying. Like the replies it is untrusted; only
known cheat flags are taken from it, which can only lower the verdict. The candidate can
delete or garble it: a worker that then dies gets a crash verdict without those flags,
never a correct one.

`Session` is what the funnel and the timing phase drive (a `WorkerSession`, or a pool
lane's `PooledSession`), and `SessionFactory` where they get one (`FreshSessions`, or a
pool's `Lane`); `gpu_gate` is the one attribute through which either shares a GPU (None
on the CPU). `ReplyReader` reads the bounded lines of an untrusted worker, for both
kinds of session; `parse_reply` makes one a reply.

What it does NOT do: decide anything (see `funnel`), or schedule sessions (see `pool`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

import tritonrl
from tritonrl.config import VerifyConfig
from tritonrl.verify import sandbox as sb
from tritonrl.verify.findings import read_findings
from tritonrl.verify.pool.gate import GpuGate, current_gate

MAX_REPLY_BYTES = 4 << 20
STDERR_CAP = 64 << 10


class WorkerError(Exception):
    """The worker gave no usable reply; `timed_out` when the deadline passed, `limit`
    the sandbox limit that ended it (`result.LIMITS`; "timeout" with `timed_out`)."""

    def __init__(self, message: str, timed_out: bool = False, limit: str | None = None):
        super().__init__(message)
        self.limit = limit or ("timeout" if timed_out else None)
        self.timed_out = timed_out or self.limit == "timeout"


@runtime_checkable
class Session(Protocol):
    """One candidate's worker, as the funnel and the timing phase drive it: a context
    manager that starts and ends it, `call` (one command, one reply, or WorkerError),
    `findings` (its findings log), `limit_error` (a reply that hit a sandbox limit, as a
    WorkerError), its `workdir` and the sandbox mechanisms `enforced` and `missing`.
    `gpu_gate`: this process's gate of its GPU (`tritonrl.verify.pool.gate`), whose shared
    side its GPU work holds and whose exclusive side its timing holds; None on the CPU.
    `extend_deadline(s)`: the trusted side waited `s` seconds for that gate with the
    worker idle; the wall-clock limit bounds the candidate's time, not that queue."""

    workdir: Path
    enforced: list[str]
    missing: list[str]
    gpu_gate: GpuGate | None

    def __enter__(self) -> Session: ...

    def __exit__(self, *exc: object) -> None: ...

    def call(self, cmd: dict) -> dict: ...

    def findings(self) -> dict[str, str]: ...

    def limit_error(self, limit: str, error: str) -> WorkerError: ...

    def extend_deadline(self, seconds: float) -> None: ...


@runtime_checkable
class SessionFactory(Protocol):
    """Where a candidate's session comes from: `workdir()` makes its job dir, then
    `factory(workdir, config, device, file_mb)` its `Session` (`file_mb`: the largest
    file it may write; None: `config.max_file_mb`). `gpu_gate` as `Session`'s: the
    trusted side's reference passes hold its shared side too."""

    gpu_gate: GpuGate | None

    def workdir(self) -> Path: ...

    def __call__(
        self, workdir: Path, config: VerifyConfig, device: str, file_mb: int | None = None
    ) -> Session: ...


class ReplyReader:
    """The lines a worker writes to its stdout, read one at a time under a deadline.
    Untrusted: more than `limit` bytes buffered (a line that long, or lines sent ahead of
    their commands) is an error, never a bigger buffer."""

    def __init__(self, stream: IO[bytes], limit: int = MAX_REPLY_BYTES) -> None:
        self.fd, self.limit = stream.fileno(), limit
        self.selector = selectors.DefaultSelector()
        self.selector.register(stream, selectors.EVENT_READ)
        self.buffer = bytearray()

    def line(
        self,
        deadline: float,
        timed_out: Callable[[], Exception],
        ended: Callable[[], Exception],
    ) -> bytes:
        """The next line, without its newline. Raises `timed_out()` once `deadline`
        (`time.monotonic`) passes, `ended()` when the stream ends first, and WorkerError
        when more than `limit` bytes are buffered."""
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise timed_out()
            if not self.selector.select(timeout=min(remaining, 1.0)):
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise ended()
            self.buffer += chunk
            if len(self.buffer) > self.limit:
                raise WorkerError("the worker sent an oversized reply (forged or corrupt)")
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line

    def close(self) -> None:
        self.selector.close()


def parse_reply(line: bytes) -> dict:
    """A worker's reply line as the JSON object it must be, or WorkerError."""
    try:
        reply = json.loads(line)
    except ValueError:
        raise WorkerError("the worker sent garbage instead of a reply") from None
    if not isinstance(reply, dict):
        raise WorkerError("the worker sent a reply that is not an object")
    return reply


def limit_text(limit: str, sandbox: sb.SandboxConfig | None = None, pool: bool = False) -> str:
    """Which limit `limit` is, its value in `sandbox` (the worker's) and how to raise it.
    `pool`: the worker ran in a pool's lane, whose file-size limit is the pool's own."""
    box = sandbox or sb.SandboxConfig()
    if limit == "file_size":
        if pool:
            return (
                f"the file-size limit of the pool's lanes ({box.max_file_mb} MB a file: "
                "verify.max_file_mb, at least POOL_CUDA_FILE_MB on CUDA; raise it with "
                "--verify.max_file_mb or in the config's verify section)"
            )
        return f"the file-size limit ({box.max_file_mb} MB a file, sized from the task's outputs)"
    if limit == "gpu_memory":
        return (
            "the GPU's memory (no sandbox limit: the device had no room for an allocation;"
            " other processes on this GPU use it too)"
        )
    if limit == "disk":
        return (
            "the disk the job's files are on (no sandbox limit: the input sets and outputs "
            "are written in TMPDIR; point TMPDIR at a larger disk)"
        )
    name, key, value = {
        "timeout": ("wall-clock limit", "timeout_s", f"{box.timeout_s:g} s"),
        "memory": ("memory limit", "memory_mb", f"{box.memory_mb} MB"),
        "processes": ("process limit", "max_procs", f"{box.max_procs} processes and threads"),
        "cpu_time": (
            f"CPU-time limit of {box.effective_cpu_s} s",
            "timeout_s",
            f"{box.timeout_s:g} s, times the cores",
        ),
    }.get(limit, (f"{limit} limit", None, None))
    if key is None:
        return f"the {name}"
    how = f"raise it with --verify.{key} or in the config's verify section"
    return f"the {name} (verify.{key} = {value}; {how})"


def timeout_error(timeout_s: float, sandbox: sb.SandboxConfig | None = None) -> WorkerError:
    """The deadline of `timeout_s` passed (`sandbox` for the message: the worker's)."""
    sandbox = dataclasses.replace(sandbox or sb.SandboxConfig(), timeout_s=timeout_s)
    text = limit_text("timeout", sandbox)
    return WorkerError(f"timed out after {timeout_s:.0f} s: killed by {text}", timed_out=True)


# What a message or the tail of stderr says when a limit was hit without a kill: a CUDA
# allocation refused, an allocation refused under RLIMIT_AS, a write past RLIMIT_FSIZE
# (SIGXFSZ is ignored by Python: the write fails with EFBIG), a full disk (ENOSPC: the
# worker writes its outputs beside its input sets), a thread or process the pids limit
# refused.
_LIMIT_MARKS = {
    # first: a CUDA allocation refused is the GPU's memory, not the sandbox's host limit
    "gpu_memory": ("CUDA out of memory", "OutOfMemoryError"),
    "memory": ("MemoryError", "can't allocate memory", "Cannot allocate memory", "bad_alloc"),
    "file_size": ("File too large",),
    "disk": ("No space left on device",),
    "processes": ("can't start new thread", "Resource temporarily unavailable"),
}


def _marked_limit(text: str) -> str | None:
    return next((k for k, marks in _LIMIT_MARKS.items() if any(m in text for m in marks)), None)


def reply_limit(reply: dict) -> str | None:
    """The limit a failed reply's error says was hit, or None (untrusted text: it can
    only lower the verdict of a candidate whose call failed anyway)."""
    error = reply.get("error")
    if reply.get("ok") or not isinstance(error, str):
        return None
    return _marked_limit(error)


def exit_limit(code: int | None, stderr: str, oom_killed: bool = False) -> str | None:
    """The limit that ended a worker gone with `code` (`SandboxedProcess.returncode`)."""
    if code is None or code == 0:
        return None
    if sb.describe_exit(code, stderr, oom_killed=oom_killed) == "memory":
        return "memory"
    if code == -signal.SIGXCPU:
        return "cpu_time"
    if code == -signal.SIGXFSZ:
        return "file_size"
    return _marked_limit(stderr.strip().splitlines()[-1] if stderr.strip() else "")


def died_error(
    code: int | None,
    stderr: str,
    oom_killed: bool = False,
    sandbox: sb.SandboxConfig | None = None,
    pool: bool = False,
) -> WorkerError:
    """Why a worker that gave no reply is gone (`code` as `SandboxedProcess.returncode`);
    a limit says which and how to raise it (`sandbox`: the worker's, `pool` as in
    `limit_text`)."""
    why = sb.describe_exit(code, stderr, oom_killed=oom_killed) if code is not None else None
    tail = stderr.strip().splitlines()[-1][:300] if stderr.strip() else ""
    limit = exit_limit(code, stderr, oom_killed)
    if limit:
        what = f"was killed by {limit_text(limit, sandbox, pool)}"
    else:
        what = f"killed ({why})" if why else f"exited with status {code}"
    message = f"the worker {what} before answering" + (f": {tail}" if tail else "")
    return WorkerError(message, limit=limit)


def hit_limit_error(
    limit: str, error: str, sandbox: sb.SandboxConfig | None = None, pool: bool = False
) -> WorkerError:
    """A call that failed because it hit `limit` (`reply_limit`), as a WorkerError."""
    return WorkerError(f"the worker hit {limit_text(limit, sandbox, pool)}: {error}", limit=limit)


# On CUDA a worker's own CPU work is small (loading inputs, saving outputs), and idle
# OpenMP threads spin: on the H100 a worker's 16 threads and those of the process that
# verifies took 5.7 CPU seconds per correct candidate, 1.4 with one thread each
# (docs/benchmarks.md). On the CPU the interpreter runs the kernel: threads stay.
# THP_MEM_ALLOC_ENABLE: torch's host allocations in transparent huge pages where the
# kernel allows them (`madvise`): a full-size output's host buffers fault in 2 MB at a
# time; on the H100 machine a 6.4 GB device-to-host copy took 2.4 s instead of 5.4 s.
WORKER_ENV = {
    False: {"TRITON_INTERPRET": "1", "OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"},
    True: {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"},
}


def _connections(config: VerifyConfig, device: str) -> dict[str, str]:
    if device != "cuda" or not config.cuda_max_connections:
        return {}
    return {"CUDA_DEVICE_MAX_CONNECTIONS": str(config.cuda_max_connections)}


def sandbox_config(
    config: VerifyConfig, device: str, file_mb: int | None = None
) -> sb.SandboxConfig:
    """The worker's sandbox: `config`'s limits; `file_mb` the largest file it may write
    (outputs of full-size tasks; None: `config.max_file_mb`)."""
    package_root = str(Path(tritonrl.__file__).resolve().parent.parent)
    return sb.SandboxConfig(
        max_file_mb=config.max_file_mb if file_mb is None else file_mb,
        timeout_s=config.timeout_s,
        memory_mb=config.memory_mb,
        max_procs=config.max_procs,
        strict=config.sandbox_strict,
        gpu=device == "cuda",
        env={**WORKER_ENV[device == "cuda"], **_connections(config, device)},
        extra_ro_paths=(package_root,),
    )


class WorkerSession:
    """A fresh sandboxed worker for one candidate (a `Session`)."""

    gpu_gate: GpuGate | None = None  # on CUDA: this process's gate of the GPU it uses

    def __init__(
        self, workdir: Path, config: VerifyConfig, device: str, file_mb: int | None = None
    ):
        if device == "cuda":  # beside other threads' verifies and pools: timed alone
            self.gpu_gate = current_gate()
        self.workdir = Path(workdir).resolve()
        self.config = sandbox_config(config, device, file_mb)
        self.enforced: list[str] = []
        self.missing: list[str] = []

    def __enter__(self) -> WorkerSession:
        argv = [sys.executable, "-m", "tritonrl.verify.inside.worker"]
        # What is not enforced goes into the verdict (VerifyResult.sandbox), not the log.
        self.child = sb.spawn_sandboxed(argv, self.workdir, self.config, stdin=subprocess.PIPE)
        self.proc = self.child.proc
        self.enforced, self.missing = list(self.child.enforced), list(self.child.missing)
        self.deadline = self.child.started + self.config.timeout_s
        self.stderr = sb.Capture(STDERR_CAP)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        self.replies = ReplyReader(self.proc.stdout)
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
        line = self.replies.line(self.deadline, self._timed_out, self._died)
        return parse_reply(line)

    def _timed_out(self) -> WorkerError:
        return timeout_error(self.config.timeout_s, self.config)

    def extend_deadline(self, seconds: float) -> None:
        self.deadline += max(0.0, seconds)

    def findings(self) -> dict[str, str]:
        """Cheat flag -> detail from the worker's findings log (bounded, defensive)."""
        return read_findings(self.workdir)

    def limit_error(self, limit: str, error: str) -> WorkerError:
        """A call that failed because it hit `limit` (`reply_limit`), said as such."""
        return hit_limit_error(limit, error, self.config)

    def _died(self) -> WorkerError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        self._stderr_thread.join(timeout=1)
        code, oom = self.child.returncode, self.child.oom_killed
        return died_error(code, self.stderr.text(), oom, self.config)

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
            self.replies.close()
            self.child.close()


class FreshSessions:
    """The default `SessionFactory`: each candidate's job dir a new temp dir (named
    `prefix`...), its session a fresh `WorkerSession`."""

    gpu_gate: GpuGate | None = None

    def __init__(self, prefix: str = "tritonrl-verify-") -> None:
        self.prefix = prefix

    def workdir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=self.prefix))

    def __call__(
        self, workdir: Path, config: VerifyConfig, device: str, file_mb: int | None = None
    ) -> WorkerSession:
        return WorkerSession(workdir, config, device, file_mb)
