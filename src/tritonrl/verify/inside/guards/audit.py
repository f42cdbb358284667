"""The Python audit hook: escapes, native memory access and introspection, logged.

`install_audit_hook()` adds a `sys.addaudithook` hook (which cannot be removed) that
records, as flag-prefixed problems read back by `audit_findings()`: processes, network
access and writes outside the working directory as `sandbox_violation` (docs/hacks.md #23:
attempts, whether or not the sandbox let them through), `ctypes` native code or raw
memory access (#21; in forward it also counts as a host round-trip in the op audit),
and gc / frame scans as `introspection` (#4). The toolchain Triton runs itself on a GPU
machine (ldconfig, a C compiler, ptxas) is not a violation there.

A write outside is any change at a path that resolves (symlinks and `dir_fd` followed)
outside the work dir and the job's Triton cache: an `open` for writing; a rename,
replace, move, link, symlink (where the link or its target lies outside), mkdir, rmdir,
remove, truncate, chmod, chown, utime or xattr change (`os.*` audit events); a sqlite
database. Routes that raise no audit event are wrapped when the hook is installed:
`torch.save` to a path (torch's C++ file writer), `torch.from_file` and
`UntypedStorage.from_file` with `shared=True`, `os.mkfifo`, `os.mknod`, and `os.open`
with a `dir_fd`. Writes are watched while Triton's launch machinery runs too (a kernel
argument's methods are candidate code called from there); Triton's own writes go to
the work dir and the cache.

A read of an input-set file in the work dir's `sets/` by anything but the worker's own
read of it (`taking_sets`) is `reference_access` (docs/hacks.md #15): a full-size
problem's sets are written there one at a time while the candidate is loaded, and taken
by the worker before any candidate code of the command that uses them runs; code the
candidate left to run in between (a signal handler, a trace or gc callback, a thread)
that opens one (`open`, `os.open`, `torch.from_file`, `UntypedStorage.from_file`) is
caught here.

What it does NOT do: block anything (the sandbox does that); watch processes, ctypes or
introspection while Triton's own launch machinery runs; see writes by native code it
does not wrap (`torch.jit.save`, a C extension: the sandbox blocks them, unflagged).
Candidate code cannot remove the hook, but it could restore the wrapped functions
(`hooks_intact` names them) or forge the worker's report of it (verdicts are computed
on the trusted side).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch

from tritonrl.verify.inside.guards.state import AUDITS, LOCK, STATE, patch, report

# Flag-prefixed problems seen by the audit hook or the thread-start hook, in order.
_AUDIT_FINDINGS: list[str] = []
_AUDIT_LIMIT = 32
_AUDIT_ROOT: list[str] = []  # the working directory when the hook was installed

_PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
        "os.forkpty", "os.kill", "os.killpg", "pty.spawn", "os.startfile",
    }
)  # fmt: skip
_NETWORK_EVENTS = frozenset(
    {
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
        "socket.gethostbyname", "socket.gethostbyaddr", "urllib.Request", "http.client.connect",
    }
)  # fmt: skip
_CTYPES_EVENTS = frozenset(
    {
        "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer",
        "ctypes.addressof", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle",
        "ctypes.call_function", "ctypes.create_string_buffer", "ctypes.create_unicode_buffer",
        "ctypes.PyObj_FromPtr", "ctypes.seh_exception",
    }
)  # fmt: skip
_INTROSPECTION_EVENTS = frozenset(
    {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"}
)
_WATCHED = _PROCESS_EVENTS | _NETWORK_EVENTS | _CTYPES_EVENTS | _INTROSPECTION_EVENTS
# Programs Triton runs itself on a GPU machine to find the driver and build its launcher
# (possibly outside a launch, when candidate code first touches `triton.runtime.driver`).
# Under the CPU interpreter nothing legitimate starts a process.
_TOOLCHAIN = frozenset(
    {"ldconfig", "gcc", "cc", "clang", "c++", "g++", "ptxas", "nvcc", "nvidia-smi", "nvdisasm",
     "cuobjdump", "nvlink", "fatbinary"}
)  # fmt: skip
_TOOLCHAIN_OK: list[bool] = []  # set when the hook is installed: CUDA visible or not
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# Where writes may go, resolved when the hook is installed: the work dir, and the job's
# Triton cache (in a pool, `.triton/cache` is a link to a directory of its own).
_WRITE_ROOTS: list[str] = []
# Events that change something at a path: event -> ((path index, dir_fd index), ...).
_FS_EVENTS = {
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.mkdir": ((0, 2),),
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.truncate": ((0, None),),
    "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),),
    "os.chflags": ((0, None),), "os.setxattr": ((0, None),), "os.removexattr": ((0, None),),
    "sqlite3.connect": ((0, None),),
}  # fmt: skip
_WRITES = frozenset({"open", "os.symlink", *_FS_EVENTS})


_TAKING = [0]  # > 0 while the worker itself reads an input-set file (`taking_sets`)


@contextlib.contextmanager
def taking_sets() -> Iterator[None]:
    """The worker's own read of its input-set files: not flagged."""
    _TAKING[0] += 1
    try:
        yield
    finally:
        _TAKING[0] -= 1


def _staged_set(path) -> str | None:
    """`path` resolved, when it names a file in the work dir's `sets/` (None otherwise)."""
    if not _AUDIT_ROOT or not isinstance(path, (str, bytes, os.PathLike)):
        return None
    full = os.path.realpath(os.fsdecode(path))
    sets = os.path.join(os.path.realpath(_AUDIT_ROOT[0]), "sets")
    return full if full.startswith(sets + os.sep) else None


def _report_staged_read(what: str, path) -> None:
    if _TAKING[0]:
        return
    try:
        name = _staged_set(path)
    except Exception:  # a check must never break the call it guards
        return
    if name:
        audit_finding(
            f"reference_access: read the input-set file {os.path.basename(name)} outside the "
            f"worker's own read of it ({what}; docs/hacks.md #15)"
        )


def audit_finding(problem: str) -> None:
    with LOCK:
        new = problem not in _AUDIT_FINDINGS and len(_AUDIT_FINDINGS) < _AUDIT_LIMIT
        if new:
            _AUDIT_FINDINGS.append(problem)
    if new:
        report(problem)  # to the findings log now: the process may die on the next line


def audit_findings() -> list[str]:
    """What the audit hook and the thread-start hook saw since `install_hooks()`, as
    flag-prefixed problems: `sandbox_violation` (processes, network, writes outside the
    working directory: attempts, whether or not the sandbox let them through),
    `ctypes` (native memory access), `introspection` (gc / frame scans),
    `background_thread` (a thread was started). Python audit hooks cannot be removed,
    so candidate code cannot switch this off; it could still forge the worker's report
    of it (see the module docstring)."""
    with LOCK:
        return list(_AUDIT_FINDINGS)


def _program(event: str, args: tuple) -> str:
    try:
        if event == "subprocess.Popen":
            exe, argv = args[0], args[1]
            first = exe or (argv if isinstance(argv, (str, bytes)) else list(argv)[0])
        elif event in ("os.exec", "os.posix_spawn", "os.spawn"):
            first = args[0] if event != "os.spawn" else args[1]
        elif event == "os.system":
            first = os.fsdecode(args[0]).split()[0]
        else:
            return ""
        return os.path.basename(os.fsdecode(first))
    except Exception:  # an odd argument: name nothing, flag it
        return "?"


def _outside(path, dir_fd: int | None = None) -> str | None:
    """`path` resolved (symlinks, `..`, a `dir_fd`), when it lies outside every write
    root; None inside, or for what is not a path (an fd, an in-memory database)."""
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        return None
    name = os.fsdecode(path)
    if name in ("", ":memory:"):
        return None
    if name.startswith("file:"):  # a sqlite URI
        name = name[5:].split("?", 1)[0]
    if not os.path.isabs(name) and isinstance(dir_fd, int) and dir_fd >= 0:
        try:
            name = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        except OSError:  # no /proc: not resolved, not flagged
            return None
    full = os.path.realpath(name)
    roots = _WRITE_ROOTS or [os.path.realpath(os.getcwd())]
    if full == "/dev/null" or any(full == r or full.startswith(r + os.sep) for r in roots):
        return None
    return full


def _is_write_outside(args: tuple) -> str | None:
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and flags & _WRITE_FLAGS
    )
    return _outside(path) if writes else None


def _write_problem(event: str, args: tuple) -> str | None:
    """What a file-system event changes outside the write roots, or None."""
    args = tuple(args)
    if event == "open":
        outside = _is_write_outside(args)
        return f"write outside the work dir: {outside}" if outside else None
    if event == "os.symlink":  # src is the link's target, relative to the link's directory
        src, dst, dir_fd = (args + (None, None, -1))[:3]
        link = _outside(dst, dir_fd)
        if link:
            return f"write outside the work dir ({event}): {link}"
        if all(isinstance(a, (str, bytes, os.PathLike)) for a in (src, dst)):
            where = os.path.dirname(os.path.abspath(os.fsdecode(dst)))
            target = _outside(os.path.join(where, os.fsdecode(src)))
            if target:
                return f"link to a path outside the work dir ({event}): {target}"
        return None
    for index, fd_index in _FS_EVENTS.get(event, ()):
        if index < len(args):
            dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
            outside = _outside(args[index], dir_fd)
            if outside:
                return f"write outside the work dir ({event}): {outside}"
    return None


def _from_candidate() -> bool:
    """Is the innermost Python frame outside the ctypes package in a file of the work
    dir (the candidate's)? Libraries the candidate calls are not attributed to it: the
    static layer flags a ctypes import, this catches the direct use."""
    import ctypes

    skip = os.path.dirname(ctypes.__file__)
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith(skip) or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
    if frame is None:
        return False
    root = _AUDIT_ROOT[0] if _AUDIT_ROOT else os.getcwd()
    return os.path.abspath(frame.f_code.co_filename).startswith(root.rstrip(os.sep) + os.sep)


def _audit_hook(event: str, args: tuple) -> None:
    if event in _WRITES:  # also while paused: a kernel argument's methods run there
        try:
            problem = _write_problem(event, args)
            if problem:
                audit_finding(f"sandbox_violation: {problem}")
            if event == "open" and args:
                _report_staged_read("open", args[0])
        except Exception:  # an audit hook must never break the audited call
            pass
        return
    if event not in _WATCHED or STATE.pause:
        return
    try:
        if event in _PROCESS_EVENTS:
            prog = _program(event, args)
            if not (_TOOLCHAIN_OK and _TOOLCHAIN_OK[0] and prog in _TOOLCHAIN):
                audit_finding(f"sandbox_violation: {event}({prog or ''})")
        elif event in _NETWORK_EVENTS:
            audit_finding(f"sandbox_violation: network access ({event})")
        elif event in _CTYPES_EVENTS:
            if not _from_candidate():
                return  # Triton's and torch's own driver loading (dlopen/dlsym on CUDA)
            audit_finding(f"ctypes: native code or raw memory access ({event})")
            for audit in list(AUDITS):  # in forward, raw memory is a host round-trip
                audit.record(f"host::{event}")
        elif event in _INTROSPECTION_EVENTS:
            audit_finding(f"introspection: {event}")
    except Exception:  # an audit hook must never break the audited call
        pass


def _report_write(what: str, path, dir_fd=None) -> None:
    try:
        outside = _outside(path, dir_fd)
    except Exception:  # a check must never break the call it guards
        return
    if outside:
        audit_finding(f"sandbox_violation: write outside the work dir ({what}): {outside}")


def _path_arg(args: tuple, kwargs: dict, index: int, name: str):
    return args[index] if len(args) > index else kwargs.get(name)


def _wrap_path_writer(
    what: str, index: int, name: str, shared: int | None = None, reads: bool = False
):
    """A wrapper for `what`, which writes at its path argument (`index` or `name`)
    without an audit event (native code); with `shared`, only when that argument (the
    `shared=` of `from_file`) is true. `reads`: it also reads there (a staged input-set
    file read is reported)."""

    def make(original):
        def call(*args, **kwargs):
            if reads:
                _report_staged_read(what, _path_arg(args, kwargs, index, name))
            if shared is None or _path_arg(args, kwargs, shared, "shared"):
                _report_write(what, _path_arg(args, kwargs, index, name), kwargs.get("dir_fd"))
            return original(*args, **kwargs)

        return call

    return make


def _wrap_os_open(original):
    """`os.open` raises its audit event without the `dir_fd` it resolves the path in."""

    def call(path, flags, *args, **kwargs):
        if kwargs.get("dir_fd") is not None and isinstance(flags, int) and flags & _WRITE_FLAGS:
            _report_write("os.open", path, kwargs["dir_fd"])
        return original(path, flags, *args, **kwargs)

    return call


def _install_write_hooks() -> None:
    """Wrap the writes that raise no audit event (see the module docstring)."""
    import posix

    for module in (os, posix):
        patch(module, "open", _wrap_os_open)
        for name in ("mkfifo", "mknod"):
            patch(module, name, _wrap_path_writer(f"os.{name}", 0, "path"))
    patch(torch._C, "PyTorchFileWriter", _wrap_path_writer("torch.save", 0, "file_name"))
    patch(
        torch,
        "from_file",
        _wrap_path_writer("torch.from_file", 0, "filename", shared=1, reads=True),
    )
    storage = torch.UntypedStorage
    bound = storage.from_file  # a classmethod of torch's C storage: kept bound
    patch(
        storage,
        "from_file",
        lambda _: _wrap_path_writer("UntypedStorage.from_file", 0, "filename", 1, True)(bound),
    )


def install_audit_hook() -> None:
    if not _AUDIT_ROOT:
        _AUDIT_ROOT.append(os.getcwd())
        _TOOLCHAIN_OK.append(torch.cuda.is_available())
        cache = os.environ.get("TRITON_CACHE_DIR")
        roots = [os.getcwd(), *([cache] if cache else [])]
        _WRITE_ROOTS.extend(os.path.realpath(r) for r in roots)
        _install_write_hooks()
        sys.addaudithook(_audit_hook)
