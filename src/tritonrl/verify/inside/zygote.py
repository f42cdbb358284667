"""The worker pool's fork server: runs INSIDE a lane's sandbox, forks one worker per job.

    python -m tritonrl.verify.inside.zygote        (started by `tritonrl.verify.pool.lane` through
                                             `spawn_sandboxed`, cwd = the lane's root)

It imports torch, triton and the worker's modules once (installing no guard and never
touching CUDA; given TRITONRL_ZYGOTE_TARGET, the GPU's compute capability, it
compiles one trusted kernel so that forked jobs start past Triton's
first-compile cost, see `_warm_compiler`; given TRITONRL_ZYGOTE_NICE, it first lowers
its CPU priority by that much, and every job it forks inherits it), says
`Z{"zygote": "ready"}` and then serves one job at a time. A job is one JSON line on
stdin, from the trusted side:

    {"dir": JOB_DIR, "env": {...}, "landlock": {"rw": [...], "deny_tcp": true} | null,
     "sweep": true}

The zygote forks; the child closes every inherited descriptor, takes fresh pipes as
stdin, stdout and stderr, chdirs to JOB_DIR, sets `env` (HOME, TMPDIR,
TRITON_CACHE_DIR, ...), applies a nested Landlock domain that allows writes only
beneath `landlock["rw"]` (the job dir, its cache dir, /dev/null), and runs the normal
`tritonrl.verify.inside.worker.main()`, which answers commands until `{"op": "exit"}`. The
zygote relays the trusted side's bytes to the child's stdin and every line the child
writes on its stdout back as `R<line>`, and keeps the head and tail of its stderr (64
KiB, as a fresh worker's session does); the child holds no descriptor of the zygote's
own pipes, so it cannot forge the zygote's lines. Once the child is gone the zygote
kills every process left in the sandbox's pid namespace (`kill(-1, SIGKILL)`, which
spares pid 1 and the caller; it is a child subreaper, so it reaps them itself), checks
through /proc that none is left, and writes

    Z{"zygote": "done", "status": <exit code, negative for a signal>, "clean": bool,
      "stderr": <the job's stderr, capped>}

Only then may the trusted side send the next job. `clean` is false when something
survived the sweep, or when no sweep was allowed (`"sweep": false`: no private pid
namespace, where `kill(-1)` would reach the caller's other processes): the trusted side
then throws the lane away.

What it does NOT do: decide or trust anything. It never reads a verdict, never looks at
what the child says, and runs no candidate code itself. It does not time jobs out (the
trusted side kills the whole sandbox at a job's deadline) and gives jobs no isolation
of their own beyond the fork (a fresh copy of the zygote's memory), the nested Landlock
domain and the sweep: the lane's sandbox limits (pids cgroup, rlimits, namespaces) are
shared by its jobs, one at a time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import selectors
import signal
import sys
import tempfile
import time

from tritonrl.verify.sandbox.run import Capture
from tritonrl.verify.sandbox.trampoline import _landlock_restrict, _prctl

_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_SETUP_FAILED = 125  # as the trampoline's SETUP_FAILED
_SWEEP_S = 2.0  # how long the sweep may take before the zygote gives up on the lane
_CHUNK = 1 << 16
_STDERR_CAP = 64 << 10  # as tritonrl.verify.session.STDERR_CAP


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Framer:
    """Prefixes every line the child writes with `R` (a partial last line is closed)."""

    def __init__(self, out: int) -> None:
        self.out = out
        self.at_start = True

    def feed(self, chunk: bytes) -> None:
        frame = bytearray()
        *lines, last = chunk.split(b"\n")
        for line in lines:
            frame += (b"R" if self.at_start else b"") + line + b"\n"
            self.at_start = True
        if last:
            frame += (b"R" if self.at_start else b"") + last
            self.at_start = False
        _write_all(self.out, bytes(frame))

    def close(self) -> None:
        if not self.at_start:
            _write_all(self.out, b"\n")
            self.at_start = True


def _own_pidns() -> bool:
    """We are the command of a pid namespace of our own: its init (bwrap's, the fallback's)
    is pid 1 and our parent, we are the second process. (The trusted side says so too,
    from the sandbox's plan; this is the second opinion before a `kill(-1)`.)"""
    return os.getpid() == 2 and os.getppid() == 1


def _others() -> list[int]:
    me = os.getpid()
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)]


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _sweep() -> bool:
    """Kill every process of the pid namespace but pid 1 and us; True when none is left."""
    end = time.monotonic() + _SWEEP_S
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        _reap()
        if not _others():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.005)


def _child(job: dict, stdin_r: int, stdout_w: int, stderr_w: int) -> None:
    """The forked worker: fresh descriptors, the job's dir and env, Landlock, then the
    worker's own loop. Never returns."""
    try:
        _prctl(_PR_SET_DUMPABLE, 1)  # its own /proc/self is writable again (CUDA needs it)
        for fd, target in ((stdin_r, 0), (stdout_w, 1), (stderr_w, 2)):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(job["dir"])
        os.environ.update(job["env"])
        os.environ["PWD"] = job["dir"]
        sys.path.insert(0, job["dir"])  # as `python -m` puts a fresh worker's cwd first
        tempfile.tempdir = None  # cached by the zygote's imports: TMPDIR is read again
        random.seed()
        if job["landlock"]:
            _landlock_restrict(job["landlock"]["rw"], job["landlock"]["deny_tcp"])
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
    except BaseException as exc:  # noqa: BLE001 - any set-up failure ends the child
        with contextlib.suppress(OSError):
            os.write(2, f"tritonrl-sandbox: setup failed: job: {exc!r}\n".encode())
        os._exit(_SETUP_FAILED)
    status = 1
    try:
        from tritonrl.verify.inside.worker import main  # lazy: preloaded; the fork runs it

        main()
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker's own crash: its exit status says so
        with contextlib.suppress(BaseException):
            import traceback

            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(status)


class _Zygote:
    def __init__(self, ctl: int) -> None:
        self.ctl = ctl  # the trusted side's end; fd 1 is stderr
        self.inbuf = bytearray()

    def say(self, **msg) -> None:
        _write_all(self.ctl, b"Z" + json.dumps(msg).encode() + b"\n")

    def read_job(self) -> dict | None:
        while b"\n" not in self.inbuf:
            data = os.read(0, _CHUNK)
            if not data:
                return None
            self.inbuf += data
        line, _, rest = bytes(self.inbuf).partition(b"\n")
        self.inbuf = bytearray(rest)  # anything after the job line is the child's
        return json.loads(line)

    def run(self, job: dict) -> None:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(job, stdin_r, stdout_w, stderr_w)
        for fd in (stdin_r, stdout_w, stderr_w):
            os.close(fd)
        stderr = Capture(_STDERR_CAP)
        status = None
        try:
            status = self.relay(pid, stdin_w, stdout_r, stderr_r, stderr)
        finally:
            clean = _sweep() if job.get("sweep") and _own_pidns() else False
            framer = _Framer(self.ctl)
            _drain(stdout_r, framer.feed, clean)
            _drain(stderr_r, stderr.feed, clean)
            framer.close()
            for fd in (stdin_w, stdout_r, stderr_r):
                os.close(fd)
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        self.say(zygote="done", status=code, clean=clean, stderr=stderr.text())

    def relay(self, pid: int, stdin_w: int, stdout_r: int, stderr_r: int, stderr) -> int:
        """Trusted side -> child's stdin, child's stdout -> framed lines, its stderr ->
        `stderr` (a Capture), until it exits."""
        framer = _Framer(self.ctl)
        pending, self.inbuf = self.inbuf, bytearray()  # bytes sent with the job line
        os.set_blocking(stdin_w, False)
        pidfd = os.pidfd_open(pid)
        sel = selectors.DefaultSelector()
        sel.register(0, selectors.EVENT_READ, "in")
        sel.register(stdout_r, selectors.EVENT_READ, "out")
        sel.register(stderr_r, selectors.EVENT_READ, "err")
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        stdin_open = True
        try:
            while True:
                if pending and stdin_open and stdin_w not in sel.get_map():
                    sel.register(stdin_w, selectors.EVENT_WRITE, "write")
                for key, _ in sel.select():
                    if key.data == "exit":
                        return os.waitpid(pid, 0)[1]
                    if key.data == "in":
                        data = os.read(0, _CHUNK)
                        if not data:  # the trusted side is gone: so are we (and with
                            os.kill(pid, signal.SIGKILL)  # us, the pid namespace)
                            os._exit(0)
                        pending += data if stdin_open else b""
                    elif key.data == "write":
                        try:
                            del pending[: os.write(stdin_w, pending)]
                        except BlockingIOError:
                            continue
                        except OSError:  # the child closed its stdin
                            stdin_open = False
                            pending.clear()
                        if not pending:
                            sel.unregister(stdin_w)
                    elif chunk := os.read(key.fd, _CHUNK):
                        (framer.feed if key.data == "out" else stderr.feed)(chunk)
                    else:
                        sel.unregister(key.fd)
        finally:
            sel.close()
            os.close(pidfd)
            framer.close()


def _drain(fd: int, feed, clean: bool) -> None:
    """What the child wrote just before it exited (bounded: a survivor may still write)."""
    os.set_blocking(fd, False)
    for _ in range(64 if clean else 4):
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            return
        feed(chunk)


def _preload() -> None:
    """What every worker imports, once: torch, triton and our worker-side modules."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - the worker bans its entry points
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import tritonrl.tasks.runtime  # noqa: F401 - lazy: the preload itself
    import tritonrl.verify.inside.guards  # noqa: F401 - lazy: the preload itself
    import tritonrl.verify.inside.timing  # noqa: F401 - lazy: the preload itself
    import tritonrl.verify.inside.worker  # noqa: F401 - lazy: the preload itself

    if os.environ.get("TRITONRL_ZYGOTE_TARGET"):
        _warm_compiler(int(os.environ["TRITONRL_ZYGOTE_TARGET"]))


def _warm_compiler(capability: int) -> bool:
    """Compile one trusted kernel for the lane's GPU (`capability`, e.g. 90) without a
    GPU: the first compile in a process pays for Triton's and LLVM's start-up, and every
    forked job then starts past it (on the CPU a new kernel compiled in 0.37 s cold and
    in 0.045 s in a child forked after this). It leaves no thread behind, so the fork
    stays safe; failures are said on stderr and every job pays, as before."""
    try:
        import triton
        import triton.language as tl
        from triton.backends.compiler import GPUTarget

        @triton.jit
        def _warm(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

        signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
        src = triton.compiler.ASTSource(_warm, signature, constexprs={"BLOCK": 128})
        with tempfile.TemporaryDirectory(prefix=".zygote-warm-", dir=os.getcwd()) as cache:
            previous = os.environ.get("TRITON_CACHE_DIR")
            os.environ["TRITON_CACHE_DIR"] = cache
            try:
                triton.compile(src, target=GPUTarget("cuda", capability, 32))
            finally:
                if previous is None:
                    os.environ.pop("TRITON_CACHE_DIR", None)
                else:
                    os.environ["TRITON_CACHE_DIR"] = previous
        return True
    except Exception as exc:  # noqa: BLE001 - every job then pays for the first compile
        sys.stderr.write(f"tritonrl-zygote: no warm compiler: {exc!r}\n")
        return False


def main() -> None:
    ctl = os.dup(1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never to the channel
    sys.stdout = sys.stderr
    # `python -m` put the lane's root on sys.path; nothing is imported from there.
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # orphaned grandchildren come back to us
    _prctl(_PR_SET_DUMPABLE, 0)  # a child cannot open our /proc/<pid>/fd or mem
    if os.environ.get("TRITONRL_ZYGOTE_NICE"):  # verify.nice: the host's cores to others first
        os.nice(int(os.environ["TRITONRL_ZYGOTE_NICE"]))
    _preload()
    zygote = _Zygote(ctl)
    zygote.say(zygote="ready", pid=os.getpid())
    while (job := zygote.read_job()) is not None:
        zygote.run(job)


if __name__ == "__main__":
    main()
