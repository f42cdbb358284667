"""What a sandboxed run is asked for, and what it reports.

`SandboxConfig` holds the limits and policy of one run (checked on construction; the
limits' defaults are the verifier's, `tritonrl.config.VerifyConfig`, their one source),
`SandboxRun` what happened to one child (all of it untrusted output),
`SandboxUnavailable` is strict mode refusing to run, and `REQUIRED` / `DISABLEABLE`
name the mechanisms (see the package docstring for what each one does).

What it does NOT do: probe the host or run anything, or hold limits of its own: a run
made with the defaults gets a candidate's default limits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonrl.config import VerifyConfig

_VERIFY = VerifyConfig()  # the limits' defaults

# Mechanisms without which strict mode refuses to run (names accepted by `disable`).
REQUIRED = ("bwrap", "landlock", "netns", "pidns", "rlimits", "nproc")
DISABLEABLE = (*REQUIRED, "pids-cgroup", "memory-cgroup")
DEFAULT_ENV_PASSTHROUGH = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "TRITON_INTERPRET",
    "TRITON_PTXAS_PATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "LC_ALL",
)


class SandboxUnavailable(RuntimeError):
    """A mechanism required by a strict `SandboxConfig` is not available on this host."""


@dataclass
class SandboxConfig:
    """Limits and policy for one sandboxed run (the limits' defaults: `VerifyConfig`'s)."""

    timeout_s: float = _VERIFY.timeout_s
    # RLIMIT_AS per process (skipped when gpu=True) and the memory cgroup's limit on the
    # whole run (always: with gpu=True it is the only memory limit)
    memory_mb: int = _VERIFY.memory_mb
    max_procs: int = _VERIFY.max_procs  # processes AND threads (pids cgroup / RLIMIT_NPROC)
    max_file_mb: int = _VERIFY.max_file_mb  # RLIMIT_FSIZE, and the size of the private /tmp
    cpu_s: int | None = None  # RLIMIT_CPU per process; None: timeout_s x cpu count + 1
    network: bool = False
    strict: bool = _VERIFY.sandbox_strict
    gpu: bool = False  # expose /dev/nvidia*, skip RLIMIT_AS (the memory cgroup stays)
    extra_ro_paths: Sequence[str | Path] = ()
    extra_rw_paths: Sequence[str | Path] = ()
    # Writable under Landlock only, not bound: paths that exist inside the sandbox (a fork
    # server's /proc, whose children each re-restrict to their own /proc/<pid>).
    landlock_rw: Sequence[str | Path] = ()
    env_passthrough: Sequence[str] = DEFAULT_ENV_PASSTHROUGH
    env: Mapping[str, str] = field(default_factory=dict)  # set in the child as given
    output_cap_bytes: int = 1 << 20  # per stream
    hide_paths: Sequence[str | Path] = ()  # more directories to hide (bwrap only)
    disable: frozenset[str] = frozenset()  # treat these mechanisms as unavailable

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.memory_mb <= 0 or self.max_procs <= 0:
            raise ValueError("timeout_s, memory_mb and max_procs must be positive")
        if self.max_file_mb <= 0 or self.output_cap_bytes < 2:
            raise ValueError("max_file_mb and output_cap_bytes must be positive")
        self.disable = frozenset(self.disable)
        unknown = self.disable - set(DISABLEABLE)
        if unknown:
            raise ValueError(f"unknown mechanisms in disable: {sorted(unknown)}")

    @property
    def effective_cpu_s(self) -> int:
        if self.cpu_s is not None:
            return self.cpu_s
        return math.ceil(self.timeout_s * (os.cpu_count() or 1)) + 1


@dataclass
class SandboxRun:
    """What happened to one sandboxed child. Everything in it is untrusted output."""

    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool
    killed: str | None  # "timeout", "memory", "signal 24 (SIGXCPU: cpu limit)", ...
    wall_s: float
    enforced: list[str]
    missing: list[str]
    truncated: list[str] = field(default_factory=list)  # "stdout" and/or "stderr"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out
