"""Starting a sandboxed child (the one way), killing it, and saying why it died.

`spawn_sandboxed(argv, workdir, config, ...)` checks its arguments, plans the run,
creates the run's cgroup (pids and memory limits) and starts the trampoline in a new
session (it joins the cgroup, then execs bwrap or unshares namespaces itself, and execs
the command); it returns at once a `SandboxedProcess`. `kill()` SIGKILLs the whole tree
(the process group, the pid namespace, every process in the cgroup); `oom_killed` says
whether the OOM killer struck inside the run's memory cgroup; `close()` removes the
cgroup. `describe_exit(returncode, stderr, timed_out, oom_killed)` names the reason a
child died: "timeout", "memory" (the OOM killer, or its stderr says so), or the signal.

What it does NOT do: watch the child. Deadlines, output caps and reaping are the
caller's: `run.run_sandboxed` for a one-shot run, `tritonrl.verify.session` for a
long-lived worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tritonrl.verify.sandbox.cgroup import RunCgroup
from tritonrl.verify.sandbox.command import (
    bwrap_argv,
    child_env,
    fallback_spec,
    inner_spec,
    trampoline_cmd,
)
from tritonrl.verify.sandbox.config import SandboxConfig, SandboxUnavailable
from tritonrl.verify.sandbox.plan import Plan, make_plan
from tritonrl.verify.sandbox.probe import probe

_EXTRA_PIDS = 2  # bwrap and bwrap's init (or: the fallback's trampoline and init)
_MEMORY_MARKS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")


def _kill_tree(proc: subprocess.Popen, cgroup: RunCgroup | None) -> None:
    if proc.returncode is None:  # not reaped: its process group id cannot be reused yet
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()


def exit_code(raw: int) -> int:
    """bwrap and the fallback init report "killed by signal N" as exit status 128 + N."""
    if 128 < raw <= 128 + 64:
        return -(raw - 128)
    return raw


def _signal_text(sig: int) -> str:
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = "unknown"
    why = {signal.SIGXCPU: ": cpu limit", signal.SIGXFSZ: ": file size limit"}.get(sig, "")
    return f"signal {sig} ({name}{why})"


def describe_exit(
    returncode: int, stderr: str, timed_out: bool = False, oom_killed: bool = False
) -> str | None:
    """Why a child died: "timeout", "memory" (killed by the OOM killer of its memory
    cgroup, or its stderr says so), "signal N (NAME)", or None when it exited by itself.
    `returncode` as `SandboxedProcess.returncode`, `oom_killed` as its `oom_killed`."""
    if timed_out:
        return "timeout"
    if returncode != 0 and (oom_killed or any(mark in stderr for mark in _MEMORY_MARKS)):
        return "memory"
    if returncode < 0:
        return _signal_text(-returncode)
    return None


def _start_cgroup(plan: Plan, config: SandboxConfig) -> RunCgroup | None:
    cgroup = RunCgroup()
    if plan.cgroup_parent is not None:
        try:
            cgroup.add_pids(plan.cgroup_parent, config.max_procs + _EXTRA_PIDS)
        except OSError as exc:
            plan.enforced.remove("pids-cgroup")
            if not plan.nproc_rlimit:
                if config.strict:
                    cgroup.remove()
                    raise SandboxUnavailable(f"cannot create a pids cgroup: {exc}") from exc
                plan.missing.append(f"nproc: cannot create a pids cgroup: {exc}")
    if plan.memory_cgroup is not None:
        try:
            cgroup.add_memory(plan.memory_cgroup, config.memory_mb << 20)
        except OSError as exc:
            plan.enforced.remove("memory-cgroup")
            plan.missing.append(f"memory-cgroup: cannot create a memory cgroup: {exc}")
    return cgroup if cgroup.paths else None


class SandboxedProcess:
    """A child started by `spawn_sandboxed`. `proc` is its `subprocess.Popen` (with the
    pipes asked for), `enforced` and `missing` the mechanisms in force and not,
    `started` the `time.monotonic()` taken just before it started. End it with `kill()`,
    reap `proc`, then `close()`."""

    def __init__(
        self,
        proc: subprocess.Popen,
        cgroup: RunCgroup | None,
        enforced: list[str],
        missing: list[str],
        started: float,
    ) -> None:
        self.proc = proc
        self.cgroup = cgroup
        self.enforced = enforced
        self.missing = missing
        self.started = started

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal), else None."""
        raw = self.proc.returncode
        return None if raw is None else exit_code(raw)

    def kill(self) -> None:
        """SIGKILL the process group, the pid namespace and the cgroup."""
        _kill_tree(self.proc, self.cgroup)

    @property
    def oom_killed(self) -> bool:
        """Whether the OOM killer killed a process of this run (read before `close()`)."""
        return self.cgroup is not None and self.cgroup.oom_kills() > 0

    def close(self) -> None:
        """Remove the cgroup (killing anything still in it); idempotent."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


def spawn_sandboxed(
    argv: Sequence[str],
    workdir: Path | str,
    config: SandboxConfig | None = None,
    *,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    stdout: int | IO[Any] | None = subprocess.PIPE,
    stderr: int | IO[Any] | None = subprocess.PIPE,
) -> SandboxedProcess:
    """Start `argv` in the sandbox with `workdir` as cwd, HOME and TMPDIR; return at once.

    `stdin`, `stdout` and `stderr` are passed to `subprocess.Popen`. Nothing is logged:
    the caller reports `missing` (`run_sandboxed` logs a WARNING for each). Raises
    SandboxUnavailable (strict mode, a required mechanism missing) and ValueError or
    OSError for bad arguments; never for anything the child does.
    """
    config = config or SandboxConfig()
    if not argv:
        raise ValueError("argv is empty")
    workdir = Path(workdir).resolve(strict=True)
    if not workdir.is_dir():
        raise NotADirectoryError(str(workdir))
    for path in (*config.extra_ro_paths, *config.extra_rw_paths):
        if not os.path.exists(path):
            raise FileNotFoundError(f"sandbox path does not exist: {path}")
    plan = make_plan(config, probe())
    argv = list(argv)
    cgroup = _start_cgroup(plan, config)
    try:
        inner = inner_spec(plan, config, workdir, argv)
        outer = {"cgroup_procs": cgroup.procs_files if cgroup else [], "inner": inner}
        if plan.bwrap:
            outer["bwrap"] = bwrap_argv(plan, config, workdir, argv, trampoline_cmd("inner", inner))
        else:
            outer["fallback"] = fallback_spec(plan)
        started = time.monotonic()
        proc = subprocess.Popen(
            trampoline_cmd("outer", outer),
            cwd=workdir,
            env=child_env(config, workdir),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    return SandboxedProcess(proc, cgroup, list(plan.enforced), list(plan.missing), started)
