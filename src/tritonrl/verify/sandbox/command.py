"""The command line of a sandboxed child, built as data for the trampoline.

`child_env` is the scrubbed environment (rebuilt from an allow-list); `bwrap_argv` is
bubblewrap's command line (namespaces, `/` read-only, the work dir read-write, a private
size-capped /tmp, the caller's home hidden with the paths the child needs re-bound
read-only, /etc/shadow blanked); `inner_spec` is what the trampoline applies just before
exec'ing the command (rlimits, Landlock rules, the capability drop); `fallback_spec` the
namespaces the trampoline unshares itself without bwrap; `trampoline_cmd` the
trampoline's own command line.

What it does NOT do: run anything (see `spawn`), or decide which mechanisms a run gets
(see `plan`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import sys
from collections.abc import Sequence
from pathlib import Path

from tritonrl.verify.sandbox.config import SandboxConfig
from tritonrl.verify.sandbox.plan import Plan
from tritonrl.verify.sandbox.probe import probe
from tritonrl.verify.sandbox.trampoline import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    TRAMPOLINE,
)

_SANDBOX_UID = 65534  # "nobody" inside bwrap's user namespace
_HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")


# A fixed system PATH, not the caller's: the caller's may name a virtualenv or checkout
# whose path the candidate could read as a sign of the phase (docs/hacks.md #16). The worker
# is started by absolute path; the system compilers Triton needs live here.
# `SandboxConfig.env` can still set PATH where a compiler lives elsewhere.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def child_env(config: SandboxConfig, workdir: Path) -> dict[str, str]:
    w = str(workdir)
    env = {
        "PATH": SYSTEM_PATH,
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
    """Paths the child must see even when they lie under /tmp or a hidden directory."""
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


def bwrap_argv(
    plan: Plan, config: SandboxConfig, workdir: Path, argv: Sequence[str], inner: list[str]
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
    # Paths the child needs that the private /tmp or a hidden home would cover (a
    # checkout, a virtualenv or the package itself living under /tmp) are bound back.
    covered = [*hidden, "/tmp"]
    needed = _needed_paths(config, argv)
    for path in _outermost({p for p in needed if any(_under(p, h) for h in covered)}):
        a += ["--ro-bind", path, path]
    for path in _rw_paths(workdir, config):
        a += ["--bind", path, path]
    for path in hidden:
        a += ["--remount-ro", path]
    return [*a, "--chdir", str(workdir), "--", *inner]


def inner_spec(plan: Plan, config: SandboxConfig, workdir: Path, argv: Sequence[str]) -> dict:
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
        rw += [str(p) for p in config.landlock_rw]
        landlock = {"rw": rw, "deny_tcp": not config.network}
    return {
        "argv": list(argv),
        "cwd": str(workdir),
        "rlimits": limits,
        "landlock": landlock,
        "drop_caps": not plan.bwrap and os.geteuid() == 0,
    }


def fallback_spec(plan: Plan) -> dict:
    flags = CLONE_NEWIPC | CLONE_NEWUTS
    flags |= CLONE_NEWNET if plan.netns else 0
    flags |= CLONE_NEWPID if plan.pidns else 0
    mount_proc = plan.pidns and bool(probe()["mountns"])
    flags |= CLONE_NEWNS if mount_proc else 0
    flags |= CLONE_NEWUSER if os.geteuid() != 0 else 0
    return {"flags": flags, "mount_proc": mount_proc, "init": plan.pidns}


def trampoline_cmd(stage: str, spec: dict) -> list[str]:
    return [sys.executable, "-I", "-S", TRAMPOLINE, stage, json.dumps(spec)]
