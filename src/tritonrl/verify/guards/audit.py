"""The Python audit hook: escapes, native memory access and introspection, logged.

`install_audit_hook()` adds a `sys.addaudithook` hook (which cannot be removed) that
records, as flag-prefixed problems read back by `audit_findings()`: processes, network
access and writes outside the working directory as `sandbox_violation` (HACKS.md #23:
attempts, whether or not the sandbox let them through), `ctypes` native code or raw
memory access (#21; in forward it also counts as a host round-trip in the op audit),
and gc / frame scans as `introspection` (#4). The toolchain Triton runs itself on a GPU
machine (ldconfig, a C compiler, ptxas) is not a violation there.

What it does NOT do: block anything (the sandbox does that) or watch events while
Triton's own launch machinery runs; candidate code cannot remove the hook, but it could
forge the worker's report of it (verdicts are computed on the trusted side).
"""

from __future__ import annotations

import os
import sys

import torch

from tritonrl.verify.guards.state import AUDITS, LOCK, STATE, report

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
_WATCHED = _PROCESS_EVENTS | _NETWORK_EVENTS | _CTYPES_EVENTS | _INTROSPECTION_EVENTS | {"open"}
# Programs Triton runs itself on a GPU machine to find the driver and build its launcher
# (possibly outside a launch, when candidate code first touches `triton.runtime.driver`).
# Under the CPU interpreter nothing legitimate starts a process.
_TOOLCHAIN = frozenset(
    {"ldconfig", "gcc", "cc", "clang", "c++", "g++", "ptxas", "nvcc", "nvidia-smi", "nvdisasm",
     "cuobjdump", "nvlink", "fatbinary"}
)  # fmt: skip
_TOOLCHAIN_OK: list[bool] = []  # set when the hook is installed: CUDA visible or not
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


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


def _is_write_outside(args: tuple) -> str | None:
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, int) or path is None:
        return None
    writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and flags & _WRITE_FLAGS
    )
    if not writes:
        return None
    full = os.path.abspath(os.fsdecode(path))
    root = _AUDIT_ROOT[0] if _AUDIT_ROOT else os.getcwd()
    if full == "/dev/null" or full == root or full.startswith(root.rstrip(os.sep) + os.sep):
        return None
    return full


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
    if event not in _WATCHED or STATE.pause:
        return
    try:
        if event == "open":
            outside = _is_write_outside(args)
            if outside:
                audit_finding(f"sandbox_violation: write outside the work dir: {outside}")
        elif event in _PROCESS_EVENTS:
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


def install_audit_hook() -> None:
    if not _AUDIT_ROOT:
        _AUDIT_ROOT.append(os.getcwd())
        _TOOLCHAIN_OK.append(torch.cuda.is_available())
        sys.addaudithook(_audit_hook)
