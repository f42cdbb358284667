"""The sandbox's trampoline: this file run as a script, `python -I -S trampoline.py STAGE JSON`.

It sets the sandbox up between fork and exec of the untrusted command, so it is stdlib
only, logs nothing and imports nothing from `tritonrl` (`-I -S`: no site packages, no
PYTHONPATH, no script directory on `sys.path`). Stages:

  probe   print, as JSON, which namespaces this host lets us unshare (user, net, pid,
          mount).
  outer   outside the sandbox: join the run's cgroups before anything forks, then exec
          bwrap (which runs the `inner` stage inside), or without bwrap unshare the
          namespaces here, mount a fresh /proc and run the command under a tiny init as
          pid 1 of the new pid namespace.
  inner   the last step before the command: rlimits, the capability drop (fallback as
          root), no-new-privs, Landlock, chdir, exec.

Failing to set up exits with `SETUP_FAILED` and a `SETUP_MARK` line on stderr. The
package imports `TRAMPOLINE` (this file's path), `landlock_abi` and the clone flags
from here.

What it does NOT do: decide anything. The JSON spec (built by `command` from the plan)
says what to apply; this applies all of it or dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import resource
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

TRAMPOLINE = os.path.abspath(__file__)
SETUP_FAILED = 125  # exit status of the trampoline when it could not set the sandbox up
SETUP_MARK = "tritonrl-sandbox: setup failed:"

# Linux constants (uapi).
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
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


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    try:
        ret = _syscall(_SYS_LANDLOCK_CREATE, None, 0, _LANDLOCK_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(ret), 0)


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
    if flags & CLONE_NEWUSER:
        _write_id_maps(uid, gid)
    if flags & CLONE_NEWNS:
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
    """Outside the sandbox: join the run's cgroups before anything forks, then go in."""
    for procs in spec["cgroup_procs"]:  # one per hierarchy (pids, memory)
        Path(procs).write_text(str(os.getpid()))
    if spec.get("bwrap"):
        os.execv(spec["bwrap"][0], spec["bwrap"])
    _fallback(spec["fallback"], spec["inner"])


def _probe_stage() -> None:
    user = CLONE_NEWUSER if os.geteuid() != 0 else 0
    flags = {
        "userns": CLONE_NEWUSER,
        "netns": CLONE_NEWNET | user,
        "pidns": CLONE_NEWPID | user,
        "mountns": CLONE_NEWNS | user,
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
