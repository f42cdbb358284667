"""One lane of the worker pool: a sandboxed zygote, and the sessions it runs one by one.

`Lane` starts `python -m tritonrl.verify.inside.zygote` with `spawn_sandboxed` (the lane's
root as work dir, the pool's cache root writable too, on CUDA `CUDA_VISIBLE_DEVICES` =
the lane's GPU), waits for it to import torch and triton, and then serves the funnel
as its session factory (`session.SessionFactory`): `workdir()` makes a job dir beneath
the lane's root and `lane(workdir, config, device)` returns a `PooledSession`, a
`session.Session` as a fresh `WorkerSession` is, whose `gpu_gate` is the lane's per-GPU
gate (`tritonrl.verify.pool.gate`): the funnel holds its shared side while the job uses the
GPU, the timing phase its exclusive side while it measures.

A job's Triton cache is `<cache root>/<sha256 of candidate.py>`, reached through the
job's own `.triton/cache` (a link): only identical sources share compiled kernels, and
a job can write no other source's entry. On CUDA a pool's `LauncherStore` (read-only in
the sandbox, `TRITONRL_LAUNCHERS` in the job's environment) gives jobs Triton's C
modules pre-built, and takes the launchers a finished job asked for. The per-job
deadline is `config.timeout_s` from the job's start, plus the time its runs waited for
the GPU gate (other candidates' timing windows). A timeout, a worker that dies or
crashes, a zygote that dies, a reply that is not one bounded line, or a sweep that left
something alive kills the whole sandbox: the lane starts a fresh zygote for its next job
(it is "recycled"), as it does after `recycle_jobs` clean jobs. The verdict of such a
job is the failure text a fresh `WorkerSession` gives (`session.died_error`).

What it does NOT do: schedule (see `tritonrl.verify.pool.pool`), or trust the zygote: its
lines are only read as "ready", "done" and the framed replies of the job's worker,
which are as untrusted as a fresh worker's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from tritonrl.config import VerifyConfig
from tritonrl.verify import sandbox as sb
from tritonrl.verify.findings import read_findings
from tritonrl.verify.pool.gate import GpuGate
from tritonrl.verify.pool.launchers import LauncherStore
from tritonrl.verify.session import (
    STDERR_CAP,
    ReplyReader,
    WorkerError,
    died_error,
    hit_limit_error,
    limit_text,
    parse_reply,
    sandbox_config,
    timeout_error,
)

START_TIMEOUT_S = 120.0  # importing torch and triton on a busy machine
EXIT_GRACE_S = 5.0  # after {"op": "exit"}: the worker's exit and the zygote's sweep


class Lane:
    """A sandboxed zygote serving jobs one at a time. Not thread-safe: one thread drives
    it; `kill()` may be called from another (a pool closing)."""

    def __init__(
        self,
        index: int,
        root: Path,
        cache_root: Path,
        config: VerifyConfig,
        device: str,
        gpu: str | None = None,
        gpu_gate: GpuGate | None = None,
        recycle_jobs: int = 256,
        store: LauncherStore | None = None,
        capability: int | None = None,
    ) -> None:
        self.index, self.device, self.gpu = index, device, gpu
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.cache_root = Path(cache_root).resolve()
        self.cache_root.mkdir(parents=True, exist_ok=True)
        self.gpu_gate = gpu_gate
        self.recycle_jobs = max(1, recycle_jobs)
        self.store = store
        base = sandbox_config(config, device, pool_file_mb(config, device))
        env = {**base.env, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})}
        env["OMP_NUM_THREADS"] = "1"  # the lanes share the cores; one thread per job each
        if config.nice:  # the zygote lowers its priority; the jobs it forks inherit it
            env["TRITONRL_ZYGOTE_NICE"] = str(config.nice)
        if capability is not None:  # the zygote compiles once for it: zygote._warm_compiler
            env["TRITONRL_ZYGOTE_TARGET"] = str(capability)
        self.sandbox = dataclasses.replace(
            base,
            env=env,
            extra_rw_paths=(*base.extra_rw_paths, str(self.cache_root)),
            extra_ro_paths=(*base.extra_ro_paths, *([str(store.root)] if store else [])),
            # CUDA's start-up writes beneath /proc/<pid>: each job's own, allowed by its
            # nested domain, must not be refused by the zygote's.
            landlock_rw=("/proc",) if base.gpu else (),
        )
        self.child: sb.SandboxedProcess | None = None
        self.ready = threading.Event()  # set while a started zygote has said it is ready
        self.jobs = 0  # clean jobs since the zygote started
        self.starts = 0
        self.recycled = 0  # zygotes thrown away early
        self.recycles: deque[str] = deque(maxlen=64)  # why (the latest)

    # -- the zygote ---------------------------------------------------------------------
    def start(self) -> None:
        argv = [sys.executable, "-m", "tritonrl.verify.inside.zygote"]
        self.child = sb.spawn_sandboxed(argv, self.root, self.sandbox, stdin=subprocess.PIPE)
        self.starts += 1
        self.jobs = 0
        self.enforced, self.missing = list(self.child.enforced), list(self.child.missing)
        # Jobs may share a zygote only when a job can neither write outside its own
        # dirs (Landlock) nor leave a process behind (a pid namespace to sweep).
        self.reusable = {"landlock", "pidns"} <= set(self.enforced)
        self.stderr = sb.Capture(STDERR_CAP)
        proc = self.child.proc
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, args=(proc, self.stderr), daemon=True
        )
        self._stderr_thread.start()
        self.replies = ReplyReader(proc.stdout)
        try:
            line = self.read_line(time.monotonic() + START_TIMEOUT_S, START_TIMEOUT_S)
            if not line.startswith(b'Z{"zygote": "ready"'):
                raise WorkerError("the worker pool's zygote did not start")
        except BaseException:
            self.stop()
            raise
        self.ready.set()

    @staticmethod
    def _drain_stderr(proc: subprocess.Popen, capture: sb.Capture) -> None:
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: proc.stderr.read1(65536), b""):
                capture.feed(chunk)

    def kill(self) -> None:
        """SIGKILL the whole sandbox (safe from another thread); `stop()` cleans up."""
        child = self.child
        if child is not None:
            child.kill()

    def stop(self) -> None:
        self.ready.clear()
        child, self.child = self.child, None
        if child is None:
            return
        child.kill()
        child.proc.wait()
        self._stderr_thread.join(timeout=2)
        for stream in (child.proc.stdin, child.proc.stdout, child.proc.stderr):
            stream.close()
        self.replies.close()
        child.close()

    def recycle(self, why: str) -> None:
        self.recycled += 1
        self.recycles.append(why)
        self.stop()

    def ensure_started(self) -> None:
        """A live zygote: one that died between jobs (killed by a limit, say) is replaced
        before the next job, which must not pay for it."""
        if self.child is not None and self.child.proc.poll() is not None:
            self.recycle(f"the zygote died between jobs (status {self.child.returncode})")
        if self.child is None:
            self.start()

    def send(self, obj: dict) -> None:
        try:
            self.child.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.child.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self.zygote_died() from None

    def read_line(self, deadline: float, timeout_s: float, job: bool = False) -> bytes:
        """The zygote's next line, or WorkerError (timeout, oversized, zygote gone); `job`:
        the deadline is a job's (verify.timeout_s), and its message says so."""

        def timed_out() -> WorkerError:
            if job:
                return timeout_error(timeout_s, self.sandbox)
            return WorkerError(f"timed out after {timeout_s:.0f} s", timed_out=True)

        return self.replies.line(deadline, timed_out, self.zygote_died)

    def zygote_died(self) -> WorkerError:
        proc = self.child.proc
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        self._stderr_thread.join(timeout=1)
        child = self.child
        return died_error(
            child.returncode, self.stderr.text(), child.oom_killed, self.sandbox, pool=True
        )

    # -- the funnel's session factory -----------------------------------------------------
    def workdir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="job-", dir=self.root))

    def __call__(
        self, workdir: Path, config: VerifyConfig, device: str, file_mb: int | None = None
    ) -> PooledSession:
        file_mb = config.max_file_mb if file_mb is None else file_mb
        if file_mb > self.sandbox.max_file_mb:  # the zygote's limit binds its children
            raise WorkerError(
                f"outputs need files of {file_mb} MB, over "
                f"{limit_text('file_size', self.sandbox, pool=True)}",
                limit="file_size",
            )
        if config.memory_mb > self.sandbox.memory_mb:  # the zygote's cgroup binds them too
            raise WorkerError(
                f"this task's worker needs {config.memory_mb} MB of host memory; this pool's "
                f"lanes allow {self.sandbox.memory_mb} MB (verify.memory_mb: raise it with "
                f"--verify.memory_mb {config.memory_mb} or in the config's verify section)",
                limit="memory",
            )
        return PooledSession(self, workdir, config)

    def job_finished(self, clean: bool, why: str) -> None:
        if not clean:
            self.recycle(why)
            return
        self.jobs += 1
        if self.jobs >= self.recycle_jobs or not self.reusable:
            self.stop()

    def landlock_rules(self, workdir: Path, cache: Path) -> dict[str, Any] | None:
        if "landlock" not in self.enforced:
            return None
        rw = [str(workdir), str(cache), "/dev/null"]
        if self.sandbox.gpu:
            rw += [*sorted(glob.glob("/dev/nvidia*")), "/proc/self"]
        return {"rw": rw, "deny_tcp": not self.sandbox.network}


# The largest file a job may write is fixed when the lane's zygote starts (a child cannot
# raise its RLIMIT_FSIZE): full-size CUDA tasks write their outputs at full size.
POOL_CUDA_FILE_MB = 8192


def pool_file_mb(config: VerifyConfig, device: str) -> int:
    """A lane's file-size limit: `verify.max_file_mb`, at least POOL_CUDA_FILE_MB on CUDA."""
    return max(config.max_file_mb, POOL_CUDA_FILE_MB) if device == "cuda" else config.max_file_mb


class PooledSession:
    """One job in a lane's zygote: a `session.Session` (see the module docstring)."""

    def __init__(self, lane: Lane, workdir: Path, config: VerifyConfig) -> None:
        self.lane = lane
        self.workdir = Path(workdir).resolve()
        self.config = config
        self.gpu_gate = lane.gpu_gate
        self.enforced: list[str] = []
        self.missing: list[str] = []
        self.done: dict | None = None  # the zygote's "done" line, once the worker is gone
        self.broken: str | None = None  # why the lane must be thrown away

    def __enter__(self) -> PooledSession:
        lane = self.lane
        lane.ensure_started()
        try:
            self._begin()
        except BaseException as e:  # no __exit__ follows a failed __enter__
            lane.job_finished(False, f"job start failed: {e}")
            raise
        return self

    def _begin(self) -> None:
        lane = self.lane
        self.enforced, self.missing = list(lane.enforced), list(lane.missing)
        code = (self.workdir / "candidate.py").read_bytes()  # written by the trusted side
        cache = lane.cache_root / hashlib.sha256(code).hexdigest()
        cache.mkdir(exist_ok=True)
        (self.workdir / ".triton").mkdir()
        # The worker's TRITON_CACHE_DIR lies in its work dir, as a fresh worker's does
        # (the audit hook counts writes elsewhere as escapes); the link leads to the cache.
        (self.workdir / ".triton" / "cache").symlink_to(cache, target_is_directory=True)
        w = str(self.workdir)
        job = {
            "dir": w,
            "env": {
                "HOME": w,
                "TMPDIR": w,
                "TRITON_CACHE_DIR": f"{w}/.triton/cache",
                "XDG_CACHE_HOME": f"{w}/.cache",
                **({"TRITONRL_LAUNCHERS": str(lane.store.root)} if lane.store else {}),
            },
            "landlock": lane.landlock_rules(self.workdir, cache),
            "sweep": "pidns" in lane.enforced,
        }
        self.deadline = time.monotonic() + self.config.timeout_s
        lane.send(job)

    def call(self, cmd: dict) -> dict:
        """Send one command; return the worker's reply (a dict), or raise WorkerError."""
        if self.done is not None:
            raise self._died()
        try:
            self.lane.send(cmd)
            line = self._next_line(self.deadline)
        except WorkerError as e:
            self.broken = str(e)
            raise
        if line.startswith(b"Z"):
            died = self._died()
            self.broken = str(died)
            raise died
        try:
            return parse_reply(line[1:])
        except WorkerError:
            self.broken = "garbage"
            raise

    def extend_deadline(self, seconds: float) -> None:
        """The trusted side waited `seconds` for the GPU gate: not the candidate's time."""
        self.deadline += max(0.0, seconds)

    def _next_line(self, deadline: float) -> bytes:
        line = self.lane.read_line(deadline, self.config.timeout_s, job=True)
        if line.startswith(b"Z"):
            try:
                self.done = json.loads(line[1:])
            except ValueError:
                self.done = {}
            if not isinstance(self.done, dict) or self.done.get("zygote") != "done":
                raise WorkerError("the worker pool's zygote sent garbage")
        elif not line.startswith(b"R"):
            raise WorkerError("the worker pool's zygote sent garbage")
        return line

    def findings(self) -> dict[str, str]:
        """Cheat flag -> detail from the job's findings log (bounded, defensive)."""
        return read_findings(self.workdir)

    def limit_error(self, limit: str, error: str) -> WorkerError:
        """A call that failed because it hit `limit` (`session.reply_limit`), said as such."""
        return hit_limit_error(limit, error, self._sandbox(), pool=True)

    def _sandbox(self) -> sb.SandboxConfig:
        """The limits this job ran under: its lane's, with its own deadline."""
        return dataclasses.replace(self.lane.sandbox, timeout_s=self.config.timeout_s)

    def _died(self) -> WorkerError:
        done = self.done or {}
        code, stderr = done.get("status"), done.get("stderr")
        # Jobs after an OOM kill run in a fresh zygote (it is not clean): a kill is this job's.
        oom = self.lane.child is not None and self.lane.child.oom_killed
        return died_error(
            code if isinstance(code, int) else None,
            stderr if isinstance(stderr, str) else "",
            oom,
            self._sandbox(),
            pool=True,
        )

    def __exit__(self, *exc) -> None:
        lane = self.lane
        try:
            if self.done is None and not self.broken:
                lane.send({"op": "exit"})
                deadline = min(self.deadline, time.monotonic() + EXIT_GRACE_S)
                while self.done is None:  # replies the worker still sends are dropped
                    self._next_line(deadline)
        except WorkerError as e:
            self.broken = self.broken or str(e)
        finally:
            done = self.done or {}
            clean = not self.broken and done.get("status") == 0 and done.get("clean") is True
            why = self.broken or f"worker status {done.get('status')}, clean {done.get('clean')}"
            lane.job_finished(clean, why)
            if lane.store is not None:  # the launchers it had to build, for the next jobs
                lane.store.take(self.workdir)
