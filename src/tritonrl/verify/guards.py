"""Run-time guards that run inside the sandboxed worker, around a candidate's forward.

Each guard answers rows of /work/shared/HACKS.md (named in its docstring):

* `install_hooks()` patches, at class level, Triton's launch entry points (the
  interpreter's `GridExecutor`, `JITFunction.run` and `CompiledKernel.__getitem__` on GPU,
  the autotuner's benchmark loop)
  and torch's host round-trips (`Tensor.numpy`, `tolist`, DLPack, `__array__`, pickling,
  `torch.from_numpy` / `frombuffer` / `save` / `load`, the text of a tensor, `ctypes`
  raw-address copies), the ways to switch the op audit's dispatch mode off (#1, #13),
  and thread starts (#10); it also adds a Python audit hook (which cannot be removed)
  that logs escape attempts, native memory access and gc/frame scans (`audit_findings`,
  #21, #23, #4). Call
  it BEFORE the candidate module is imported, so that a candidate cannot keep a reference
  to an unpatched entry point. It is idempotent and changes no behaviour.
* `LaunchCounter` counts Triton kernel launches (#2).
* `OpAudit` records the aten ops executed (#1, #3, #4, #20).
* `snapshot_inputs` / `inputs_mutated` (#6), `refill_` (#7, #8), `check_output_types`
  (#11, output aliasing), `thread_snapshot` / `new_threads` (#10), `capture_timers` /
  `timers_intact` (#12, #13).
* `run_guarded` runs one forward under all of them and names the flags.

Problem strings start with the flag they stand for (`"input_mutation: input 0 ..."`), the
names of `tritonrl.verify.result.CHEAT_FLAGS`; `flag_of` splits them.

Typical use in the worker::

    timers = capture_timers()             # installs the hooks; before the import
    module = import_candidate(...)
    model = module.ModelNew(*init_inputs).to(device)
    report = run_guarded(model, inputs, policy="strict")   # one call, all per-call guards
    refill_(inputs, new_inputs)           # same buffers, new data; call again, compare
    problems = report.problems + timers_intact(timers)

or piece by piece: `thread_snapshot(warm=device)`, `snapshot_inputs`, `with
LaunchCounter() as launches, OpAudit() as audit: ...`, then `launches.count`,
`audit.violations(policy, allowed)`, `inputs_mutated`, `check_output_types`,
`new_threads`. A worker whose audit reports "audit::tampered" should be recycled.

What this does NOT do: defend itself. These guards live in the same process as the
candidate, so in-process code can in principle undo them (pop the dispatch mode, restore
the patched methods, patch `time`). That is why the static checks flag introspection,
private torch API and monkeypatching, why `timers_intact` re-checks identities after
the candidate ran, and why verdicts are computed on the trusted side from data the
candidate never touched. Inductor-compiled kernels launch through their own launchers
and are not counted as launches (the static check refuses torch.compile). Host compute
on raw memory that needs none of the hooked entry points (numpy over an object with
`__array_interface__` at `data_ptr()`, the private `torch._C.TensorBase.numpy`) is not
seen at run time; the static checks refuse the `sys.modules` / private-API access it
needs (tests/verify/hostile/c01_array_interface_host.py).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import logging
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

log = logging.getLogger(__name__)

# aten ops allowed under the strict policy: allocation, views, copies, metadata.
ALLOCATION_OPS = frozenset(
    {
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
        "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
        "new_full", "arange", "zero_", "fill_", "scalar_tensor", "lift_fresh",
        "lift_fresh_copy", "resize_",
    }
)  # fmt: skip
VIEW_OPS = frozenset(
    {
        "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose",
        "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "alias", "detach",
        "unfold", "narrow", "split", "split_with_sizes", "unsafe_split", "chunk", "unbind",
        "movedim", "view_as_real", "view_as_complex", "diagonal", "expand_as", "view_as",
        "flatten", "unflatten", "contiguous", "squeeze_", "unsqueeze_", "t_", "transpose_",
        "as_strided_", "detach_",
    }
)  # fmt: skip
COPY_OPS = frozenset({"copy_", "clone", "_to_copy", "to", "_copy_from", "_copy_from_and_resize"})
METADATA_OPS = frozenset(
    {
        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel",
        "dim", "is_contiguous", "is_same_size", "is_pinned", "_has_compatible_shallow_copy_type",
        "_local_scalar_dense",
    }
)  # fmt: skip
STRICT_ALLOWED_OPS = ALLOCATION_OPS | VIEW_OPS | COPY_OPS | METADATA_OPS
# `.item()` reads are metadata-like for a few scalars; many of them are a host loop.
SCALAR_READ_BUDGET = 16

# Torch-level op names (as a task's allowed_torch_ops names them) -> aten ops they run.
OP_ALIASES: dict[str, frozenset[str]] = {
    k: frozenset(v)
    for k, v in {
        "matmul": {"mm", "bmm", "addmm", "matmul", "mv", "dot", "baddbmm", "addmv"},
        "linear": {"addmm", "mm", "linear", "matmul", "bmm", "add"},
        "einsum": {"bmm", "mm", "mul", "sum", "einsum"},
        "relu": {"relu", "clamp_min"},
        "softmax": {"_softmax", "softmax"},
        "log_softmax": {"_log_softmax", "log_softmax"},
        "layer_norm": {"native_layer_norm", "layer_norm"},
        "group_norm": {"native_group_norm", "group_norm"},
        "batch_norm": {
            "native_batch_norm", "_native_batch_norm_legit", "batch_norm",
            "_native_batch_norm_legit_no_training",
        },
        "conv1d": {"convolution", "_convolution", "conv1d"},
        "conv2d": {"convolution", "_convolution", "conv2d"},
        "conv3d": {"convolution", "_convolution", "conv3d"},
        "sub": {"sub", "rsub"},
        "max": {"max", "amax"},
        "min": {"min", "amin"},
        "pad": {"constant_pad_nd", "pad"},
        "cross_entropy": {"_log_softmax", "nll_loss_forward", "nll_loss", "cross_entropy"},
        "dropout": {"dropout", "native_dropout"},
    }.items()
}  # fmt: skip


def expand_allowed(names: Iterable[str]) -> frozenset[str]:
    """The aten op names that torch-level op names (e.g. {"matmul", "F.relu"}) allow."""
    out: set[str] = set()
    for raw in names:
        name = raw
        for prefix in ("torch.nn.functional.", "torch.", "F.", "aten::", "aten."):
            name = name.removeprefix(prefix)
        out |= {name, f"_{name}", f"native_{name}", f"{name}_"} | OP_ALIASES.get(name, set())
    return frozenset(out)


def flag_of(problem: str) -> str:
    """The flag a problem string stands for ("input_mutation: ..." -> "input_mutation")."""
    return problem.split(":", 1)[0]


# ----- launch hooks -------------------------------------------------------------------


class _LaunchState(threading.local):
    pause = 0  # > 0 while Triton's own launch machinery runs: the op audit ignores ops
    bench = 0  # > 0 while the autotuner benchmarks configs: launches are not counted


_STATE = _LaunchState()
_LOCK = threading.Lock()
_COUNTERS: list[LaunchCounter] = []
_AUDITS: list[OpAudit] = []
# label -> (owner, attribute, original, wrapper)
_PATCHES: dict[str, tuple[Any, str, Any, Any]] = {}


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel's name, its grid, and its number of programs
    (None when the grid could not be evaluated)."""

    kernel: str
    grid: tuple | None
    programs: int | None


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    _STATE.pause += 1
    try:
        yield
    finally:
        _STATE.pause -= 1


def _unpaused(fn: Callable) -> Callable:
    """Run `fn` (user code called from inside launch machinery: a grid callable, a
    pre-run hook) with the op audit listening again."""

    def call(*args: Any, **kwargs: Any) -> Any:
        saved, _STATE.pause = _STATE.pause, 0
        try:
            return fn(*args, **kwargs)
        finally:
            _STATE.pause = saved

    return call


class _GridRecorder:
    """Wraps a launch grid (tuple or callable) and remembers what it evaluated to."""

    def __init__(self, grid: Any):
        self.grid = grid
        self.value: tuple | None = None if callable(grid) else _as_grid(grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = _unpaused(self.grid)(*args, **kwargs)
        self.value = _as_grid(result)
        return result

    def wrapped(self) -> Any:
        return self if callable(self.grid) else self.grid


def _as_grid(grid: Any) -> tuple | None:
    try:
        return tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        return None


def _record_launch(kernel: str, grid: tuple | None) -> None:
    if _STATE.bench:
        for c in list(_COUNTERS):
            c.benchmark_launches += 1
        return
    programs = math.prod(grid) if grid is not None else None
    launch = Launch(kernel, grid, programs)
    with _LOCK:
        counters = list(_COUNTERS)
    for c in counters:
        (c.empty_launches if programs == 0 else c.launches).append(launch)
    log.debug("launch %s grid=%s", kernel, grid)


def _kernel_name(fn: Any) -> str:
    inner = getattr(fn, "fn", fn)
    return getattr(inner, "__name__", type(fn).__name__)


def _wrap_jit_run(original: Callable) -> Callable:
    """JITFunction.run (GPU): paused for the op audit, except for user callables."""

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _GridRecorder(kwargs.get("grid"))
        if "grid" in kwargs:
            kwargs["grid"] = recorder.wrapped()
        hooks = getattr(self, "pre_run_hooks", None)
        if hooks:
            self.pre_run_hooks = [_unpaused(h) for h in hooks]
        try:
            with _paused():
                result = original(self, *args, **kwargs)
        finally:
            if hooks:
                self.pre_run_hooks = hooks
        if not kwargs.get("warmup", False):
            _record_launch(_kernel_name(self), recorder.value)
        return result

    return run


def _wrap_grid_executor(original: Callable, pause_all: bool) -> Callable:
    """The interpreter's GridExecutor.__call__: one launch. Only Triton's argument
    copies are paused (see `_wrap_paused`), so torch ops a kernel body runs under the
    interpreter are audited; on Triton versions without those methods the whole call
    is paused."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _GridRecorder(self.grid)
        self.grid = recorder.wrapped()
        with _paused() if pause_all else contextlib.nullcontext():
            result = original(self, *args, **kwargs)
        _record_launch(_kernel_name(self), recorder.value)
        return result

    return call


def _wrap_compiled_getitem(original: Callable) -> Callable:
    """CompiledKernel.__getitem__ (GPU): `kernel.warmup(...)[grid](...)` launches a
    precompiled kernel without JITFunction.run (the Triton softmax tutorial does this)."""

    def getitem(self: Any, grid: Any) -> Callable:
        with _paused():
            runner = original(self, grid)

        def launch(*args: Any, **kwargs: Any) -> Any:
            with _paused():
                result = runner(*args, **kwargs)
            _record_launch(getattr(self, "name", "compiled_kernel"), _as_grid(grid))
            return result

        return launch

    return getitem


def _wrap_paused(original: Callable) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        with _paused():
            return original(*args, **kwargs)

    return call


def _wrap_bench(original: Callable) -> Callable:
    """Autotuner._bench: benchmark launches are neither counted nor audited."""

    def call(*args: Any, **kwargs: Any) -> Any:
        _STATE.bench += 1
        try:
            with _paused():
                return original(*args, **kwargs)
        finally:
            _STATE.bench -= 1

    return call


def _wrap_host(name: str, original: Callable) -> Callable:
    """Tensor.numpy / tolist / torch.from_numpy: host round-trips the dispatcher never
    sees; recorded as `host::<name>` ops."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if not _STATE.pause:
            for audit in list(_AUDITS):
                audit.ops[f"host::{name}"] += 1
        return original(*args, **kwargs)

    return call


def _wrap_text(name: str, original: Callable) -> Callable:
    """Tensor.__repr__ / __str__ / __format__: the text of a tensor is a host read of its
    values (torch even disables dispatch modes to format it), so formatting more than a
    few elements is recorded as `host::<name>` (a debug print of a scalar is not)."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _STATE.pause and _AUDITS:
            try:
                big = self.numel() > SCALAR_READ_BUDGET
            except Exception:  # not a plain tensor: count it
                big = True
            if big:
                for audit in list(_AUDITS):
                    audit.ops[f"host::{name}"] += 1
        return original(self, *args, **kwargs)

    return call


def _torch_internal(depth: int = 2) -> bool:
    """Whether the caller `depth` frames up is torch's own code (not the candidate's)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    return frame.f_code.co_filename.startswith(_TORCH_DIR)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _wrap_dispatch_escape(name: str, original: Callable) -> Callable:
    """Ways to switch Python dispatch modes off (or pop them) so that ops run unseen by
    the op audit; torch's own uses (exiting a mode, printing a tensor) are fine, a call
    from anywhere else while an audit is active marks it tampered (HACKS.md #1, #13)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if _AUDITS and not _STATE.pause and not _torch_internal():
            for audit in list(_AUDITS):
                audit.tampered.append(f"{name} was called")
        return original(*args, **kwargs)

    return call


def _wrap_thread_start(original: Callable) -> Callable:
    """_thread.start_new_thread (threading keeps its own alias): a thread started by
    candidate code is recorded even if it is gone by the time threads are counted
    (HACKS.md #10). Threads started inside Triton's launch machinery are not."""

    def call(function: Any, *args: Any, **kwargs: Any) -> Any:
        if not _STATE.pause:
            owner = getattr(function, "__self__", None)
            if isinstance(owner, threading.Thread):
                target = getattr(owner, "_target", None)
                what = f"{owner.name!r} ({getattr(target, '__qualname__', 'run')})"
            else:
                what = getattr(function, "__qualname__", type(function).__name__)
            _audit_finding(f"background_thread: a thread was started: {what}")
        return original(function, *args, **kwargs)

    return call


def _patch(owner: Any, attr: str, make: Callable[[Callable], Callable]) -> None:
    original = inspect.getattr_static(owner, attr, None)
    if original is None:
        log.debug("no %s.%s to patch on this version", owner, attr)
        return
    if isinstance(original, (staticmethod, classmethod)):
        original = original.__func__
    wrapper = make(original)
    wrapper.__wrapped__ = original
    setattr(owner, attr, wrapper)
    if isinstance(owner, type):
        label = f"{owner.__module__}.{owner.__qualname__}.{attr}"
    else:
        label = f"{owner.__name__}.{attr}"
    _PATCHES[label] = (owner, attr, original, wrapper)


def install_hooks() -> list[str]:
    """Patch launch entry points and host round-trips (idempotent); returns the labels of
    what is patched. Must run before candidate code is imported (#2, #1)."""
    with _LOCK:
        if _PATCHES:
            return list(_PATCHES)
        from triton.runtime import autotuner
        from triton.runtime import jit as triton_jit

        _patch(triton_jit.JITFunction, "run", _wrap_jit_run)
        _patch(autotuner.Autotuner, "_bench", _wrap_bench)
        try:
            from triton.compiler.compiler import CompiledKernel

            _patch(CompiledKernel, "__getitem__", _wrap_compiled_getitem)
        except ImportError:  # pragma: no cover
            log.warning("triton.compiler.compiler.CompiledKernel missing: not hooked")
        _install_interpreter_hooks()
        _install_host_hooks()
        _install_dispatch_hooks()
        import _thread

        _patch(_thread, "start_new_thread", _wrap_thread_start)
        if hasattr(threading, "_start_new_thread"):
            _patch(threading, "_start_new_thread", _wrap_thread_start)
        _install_audit_hook()
        log.debug("installed hooks: %s", sorted(_PATCHES))
        return list(_PATCHES)


def _install_host_hooks() -> None:
    """Host round-trips of tensor data that the dispatcher never sees (#1): numpy,
    lists, DLPack (zero-copy sharing with numpy or anything else), raw buffers, pickling
    and the text of a tensor."""
    import torch.utils.dlpack

    for name in ("numpy", "tolist", "__dlpack__", "__array__", "__reduce_ex__"):
        _patch(torch.Tensor, name, lambda orig, n=name: _wrap_host(n, orig))
    for name in ("__repr__", "__str__", "__format__"):
        _patch(torch.Tensor, name, lambda orig, n=name: _wrap_text(n, orig))
    for name in ("from_numpy", "from_dlpack", "frombuffer", "save", "load"):
        _patch(torch, name, lambda orig, n=name: _wrap_host(n, orig))
    for name in ("to_dlpack", "from_dlpack"):
        if inspect.getattr_static(torch.utils.dlpack, name, None) is not None:
            _patch(torch.utils.dlpack, name, lambda orig, n=name: _wrap_host(n, orig))
    _patch(torch.UntypedStorage, "tolist", lambda orig: _wrap_host("storage.tolist", orig))
    if hasattr(torch._C, "_to_dlpack"):
        _patch(torch._C, "_to_dlpack", lambda orig: _wrap_host("_to_dlpack", orig))
    import ctypes

    for name in ("memmove", "memset", "cast"):  # raw addresses raise no audit event
        _patch(ctypes, name, lambda orig, n=name: _wrap_host(f"ctypes.{n}", orig))


def _install_dispatch_hooks() -> None:
    from torch.utils import _python_dispatch as pd

    for name in ("_disable_current_modes", "_pop_mode", "_pop_mode_temporarily"):
        if hasattr(pd, name):
            _patch(pd, name, lambda orig, n=name: _wrap_dispatch_escape(n, orig))
    for name in (
        "_pop_torch_dispatch_stack", "_unset_dispatch_mode", "_set_dispatch_mode",
        "_DisableTorchDispatch", "_ExcludeDispatchKeyGuard",
        "_dispatch_tls_set_dispatch_key_excluded", "_DisablePythonDispatcher",
    ):  # fmt: skip
        if hasattr(torch._C, name):
            make = lambda orig, n=f"torch._C.{name}": _wrap_dispatch_escape(n, orig)  # noqa: E731
            _patch(torch._C, name, make)


# ----- audit hook: escapes, native memory, introspection ------------------------------

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


def _audit_finding(problem: str) -> None:
    with _LOCK:
        if problem not in _AUDIT_FINDINGS and len(_AUDIT_FINDINGS) < _AUDIT_LIMIT:
            _AUDIT_FINDINGS.append(problem)


def audit_findings() -> list[str]:
    """What the audit hook and the thread-start hook saw since `install_hooks()`, as
    flag-prefixed problems: `sandbox_violation` (processes, network, writes outside the
    working directory: attempts, whether or not the sandbox let them through),
    `ctypes` (native memory access), `introspection` (gc / frame scans),
    `background_thread` (a thread was started). Python audit hooks cannot be removed,
    so candidate code cannot switch this off; it could still forge the worker's report
    of it (see the module docstring)."""
    with _LOCK:
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
    if event not in _WATCHED or _STATE.pause:
        return
    try:
        if event == "open":
            outside = _is_write_outside(args)
            if outside:
                _audit_finding(f"sandbox_violation: write outside the work dir: {outside}")
        elif event in _PROCESS_EVENTS:
            prog = _program(event, args)
            if not (_TOOLCHAIN_OK and _TOOLCHAIN_OK[0] and prog in _TOOLCHAIN):
                _audit_finding(f"sandbox_violation: {event}({prog or ''})")
        elif event in _NETWORK_EVENTS:
            _audit_finding(f"sandbox_violation: network access ({event})")
        elif event in _CTYPES_EVENTS:
            if not _from_candidate():
                return  # Triton's and torch's own driver loading (dlopen/dlsym on CUDA)
            _audit_finding(f"ctypes: native code or raw memory access ({event})")
            for audit in list(_AUDITS):  # in forward, raw memory is a host round-trip
                audit.ops[f"host::{event}"] += 1
        elif event in _INTROSPECTION_EVENTS:
            _audit_finding(f"introspection: {event}")
    except Exception:  # an audit hook must never break the audited call
        pass


def _install_audit_hook() -> None:
    if not _AUDIT_ROOT:
        _AUDIT_ROOT.append(os.getcwd())
        _TOOLCHAIN_OK.append(torch.cuda.is_available())
        sys.addaudithook(_audit_hook)


def _install_interpreter_hooks() -> None:
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - every Triton 3.x ships the interpreter
        log.warning("triton.runtime.interpreter missing: launches under it are not counted")
        return
    executor = getattr(interpreter, "GridExecutor", None)
    if executor is None:  # pragma: no cover
        log.warning("triton interpreter has no GridExecutor: launches are not counted")
        return
    narrow = ("_init_args_hst", "_restore_args_dev")
    pause_all = not all(hasattr(executor, n) for n in narrow)
    _patch(executor, "__call__", lambda orig: _wrap_grid_executor(orig, pause_all))
    if not pause_all:
        for n in narrow:
            _patch(executor, n, _wrap_paused)


def hooks_intact() -> list[str]:
    """Patched entry points that no longer hold our wrapper (#12, #13)."""
    return [
        f"timer_tampering: launch hook {label} was replaced"
        for label, (owner, attr, _, wrapper) in _PATCHES.items()
        if _raw(inspect.getattr_static(owner, attr, None)) is not wrapper
    ]


def _raw(obj: Any) -> Any:
    return obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj


class LaunchCounter:
    """Counts Triton kernel launches while active (HACKS.md #2, kernel never launched).

    Works under the interpreter (GridExecutor) and on GPU (JITFunction.run), through
    @triton.autotune and @triton.heuristics (one user launch counts once; the autotuner's
    benchmark launches go to `benchmark_launches`). Launches with an empty grid (zero
    programs: nothing runs) go to `empty_launches` and do not count.
    """

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.empty_launches: list[Launch] = []
        self.benchmark_launches = 0

    @property
    def count(self) -> int:
        return len(self.launches)

    def install(self) -> LaunchCounter:
        """Install the hooks and start counting (until `uninstall()`)."""
        install_hooks()
        with _LOCK:
            if self not in _COUNTERS:
                _COUNTERS.append(self)
        return self

    def uninstall(self) -> None:
        with _LOCK:
            if self in _COUNTERS:
                _COUNTERS.remove(self)

    @property
    def active(self) -> bool:
        return self in _COUNTERS

    def reset(self) -> None:
        """Forget the launches seen so far (between calls)."""
        self.launches.clear()
        self.empty_launches.clear()
        self.benchmark_launches = 0

    def __enter__(self) -> LaunchCounter:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


# ----- op audit -----------------------------------------------------------------------


def _op_name(func: Any) -> str:
    packet = getattr(func, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or str(func).split(".")[0]
    namespace = getattr(func, "namespace", None) or "aten"
    return f"{namespace}::{name}"


class OpAudit(TorchDispatchMode):
    """Records every aten op the thread executes while active (HACKS.md #1 library
    fallback, #3 try/except fallback, #4 stolen reference, #20 compiler as author: their
    torch work shows up as compute ops).

    Ops that Triton's launch machinery runs itself (the interpreter's argument copies, the
    autotuner's benchmarking) are not counted; grid callables, heuristics and pre-run
    hooks are user code and are audited. Host round-trips (`.numpy()`, `.tolist()`,
    `torch.from_numpy`) are recorded as `host::*`. `ops` counts by name ("aten::mm").
    """

    def __init__(self, launches: LaunchCounter | None = None) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.tampered: list[str] = []
        # an optional counter kept active for the audit's duration
        self.launches = launches
        self._started_counter = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not _STATE.pause:
            self.ops[_op_name(func)] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> OpAudit:
        install_hooks()
        if self.launches is not None and not self.launches.active:
            self.launches.install()
            self._started_counter = True
        with _LOCK:
            _AUDITS.append(self)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        if _get_current_dispatch_mode() is not self:
            self.tampered.append("the audit is no longer the active dispatch mode")
        if "__torch_dispatch__" in vars(self):
            self.tampered.append("the audit's __torch_dispatch__ was replaced on the instance")
        with _LOCK:
            if self in _AUDITS:
                _AUDITS.remove(self)
        if self._started_counter:
            self.launches.uninstall()
            self._started_counter = False
        try:
            super().__exit__(*exc)
        except RuntimeError as e:  # the candidate emptied the mode stack
            log.warning("op audit exit after tampering: %s", e)

    def violations(self, policy: str = "strict", allowed: Iterable[str] = ()) -> list[str]:
        """Names of the compute ops recorded ("aten::mm", "host::numpy", ...), sorted.

        strict: only allocation, views, copies and metadata are allowed; partial: also
        the ops `allowed` names (torch-level names such as "matmul" are expanded with
        `expand_allowed`). A tampered audit reports "audit::tampered".
        """
        if policy not in ("strict", "partial"):
            raise ValueError(f"unknown policy {policy!r}")
        extra = expand_allowed(allowed) if policy == "partial" else frozenset()
        out = [name for name, n in sorted(self.ops.items()) if not _allowed(name, n, extra)]
        return out + (["audit::tampered"] if self.tampered else [])


def _allowed(name: str, count: int, extra: frozenset[str]) -> bool:
    namespace, short = name.split("::", 1)
    if namespace != "aten" or not (short in STRICT_ALLOWED_OPS or short in extra):
        return False
    return short != "_local_scalar_dense" or count <= SCALAR_READ_BUDGET


# ----- inputs -------------------------------------------------------------------------


def _leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of nested lists/tuples/dicts; paths look like "0", "1.2"."""
    if isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from _leaves(x, f"{path}.{i}" if path else str(i))
    elif isinstance(obj, dict):
        for k, x in obj.items():
            yield from _leaves(x, f"{path}.{k}" if path else str(k))
    else:
        yield path or "0", obj


@dataclass(frozen=True)
class _Saved:
    path: str
    value: Any  # a detached clone for tensors, a deep copy otherwise
    meta: tuple | None  # (shape, stride, dtype, device, data_ptr, storage_offset)


def _meta(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr(), t.storage_offset())


def snapshot_inputs(inputs: Any) -> list[_Saved]:
    """Copies of the inputs to compare with after the call (HACKS.md #6, input mutation)."""
    saved = []
    for path, x in _leaves(inputs):
        if isinstance(x, torch.Tensor):
            saved.append(_Saved(path, x.detach().clone(), _meta(x)))
        else:
            saved.append(_Saved(path, copy.deepcopy(x), None))
    return saved


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    a8 = a.detach().contiguous().reshape(-1).view(torch.uint8)
    b8 = b.detach().contiguous().reshape(-1).view(torch.uint8).to(a8.device)
    return bool(torch.equal(a8, b8))


def inputs_mutated(snapshot: list[_Saved], inputs: Any) -> list[str]:
    """What changed in `inputs` since `snapshot` (HACKS.md #6): values (compared bit for
    bit, so NaNs count), shape, strides, storage (set_ / .data swaps), non-tensor args."""
    leaves = list(_leaves(inputs))
    if len(leaves) != len(snapshot):
        return [f"input_mutation: {len(snapshot)} inputs became {len(leaves)}"]
    problems = []
    for saved, (path, x) in zip(snapshot, leaves, strict=True):
        if saved.meta is None:
            if not _equal_plain(saved.value, x):
                problems.append(f"input_mutation: input {path} changed")
            continue
        if not isinstance(x, torch.Tensor):
            problems.append(f"input_mutation: input {path} is no longer a tensor")
        elif _meta(x) != saved.meta:
            problems.append(f"input_mutation: input {path} storage/shape/strides changed")
        elif not _same_bits(x, saved.value):
            problems.append(f"input_mutation: input {path} values changed")
    return problems


def _equal_plain(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # comparisons of odd objects: treat as changed
        return False


def refill_(inputs: Any, source: Any) -> Any:
    """Refill the input tensors in place, same buffers, with new data (HACKS.md #7 output
    caching by pointer, #8 cross-call deferral: a cached or skipped result is now wrong).

    `source` is either new data shaped like `inputs` (the trusted side generated it and
    computes the reference on it: copied in), or a `torch.Generator` / int seed: then
    the data stays in the inputs' domain: floats are permuted and scaled by a factor in
    [0.5, 1) per element (signs, zeros and bounds like [0, 1] are kept; sums change),
    integers are redrawn within their old [min, max] (indices stay valid), bools are
    redrawn. Non-tensor inputs are left alone. Returns `inputs`.
    """
    targets = [x for _, x in _leaves(inputs)]
    if isinstance(source, (torch.Generator, int)):
        g = torch.Generator().manual_seed(source) if isinstance(source, int) else source
        new = [_fresh_like(x, g) if _refillable(x) else None for x in targets]
    else:
        new = [x for _, x in _leaves(source)]
        if len(new) != len(targets):
            raise ValueError(f"refill_: {len(new)} new values for {len(targets)} inputs")
    with torch.no_grad():
        for x, value in zip(targets, new, strict=True):
            if _refillable(x) and isinstance(value, torch.Tensor):
                x.copy_(value.to(x.device))
    return inputs


def _refillable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.numel() > 0


def _fresh_like(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    flat = x.detach().reshape(-1).cpu()
    n = flat.numel()
    if x.dtype == torch.bool:
        new = torch.rand(n, generator=g) < 0.5
    elif x.dtype.is_floating_point or x.dtype.is_complex:
        perm = torch.randperm(n, generator=g)
        factor = 0.5 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64)
        new = (flat[perm].to(torch.complex128 if x.dtype.is_complex else torch.float64)
               * factor).to(x.dtype)  # fmt: skip
    else:
        lo, hi = int(flat.min()), int(flat.max())
        new = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64).to(x.dtype)
    return new.reshape(x.shape)


# ----- outputs ------------------------------------------------------------------------


def check_output_types(outputs: Any, inputs: Any) -> list[str]:
    """Outputs must be exactly `torch.Tensor` with plain strided storage, no instance
    attributes (overridden methods), no lazy conj/neg bits, and no storage shared with an
    input (HACKS.md #11 lazy outputs; `output_aliases_input`: returning an input or a
    view of one). Python scalars and None pass."""
    input_storages = {
        t.untyped_storage().data_ptr(): path
        for path, t in _leaves(inputs)
        if isinstance(t, torch.Tensor) and t.numel() > 0
    }
    problems: list[str] = []
    for path, out in _leaves(outputs):
        if out is None or type(out) in (int, float, bool):
            continue
        if type(out) is not torch.Tensor:
            problems.append(f"output_type: output {path} is {type(out).__qualname__}, "
                            "not exactly torch.Tensor")  # fmt: skip
            continue
        problems += [f"output_type: output {path} {p}" for p in _tensor_oddities(out)]
        if out.numel() > 0 and out.untyped_storage().data_ptr() in input_storages:
            src = input_storages[out.untyped_storage().data_ptr()]
            problems.append(f"output_aliases_input: output {path} shares storage with input {src}")
    return problems


def _tensor_oddities(t: torch.Tensor) -> list[str]:
    odd = []
    attrs = sorted(vars(t)) if hasattr(t, "__dict__") else []
    if attrs:
        odd.append(f"carries instance attributes {attrs}")
    if t.layout != torch.strided or t.is_sparse or t.is_quantized or t.is_meta:
        odd.append(f"has layout {t.layout} (need plain strided storage)")
    if getattr(t, "is_nested", False):
        odd.append("is a nested tensor")
    if t.is_conj() or t.is_neg():
        odd.append("has a lazy conj/neg bit")
    if type(t.untyped_storage()) is not torch.UntypedStorage:
        odd.append(f"has storage {type(t.untyped_storage()).__qualname__}")
    return odd


# ----- threads ------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadSnapshot:
    python: frozenset[int]  # threading idents
    os_tids: frozenset[int] | None  # /proc/self/task entries (None where unavailable)


def _os_tids() -> frozenset[int] | None:
    try:
        return frozenset(int(n) for n in os.listdir("/proc/self/task"))
    except OSError:
        return None


def thread_snapshot(warm: str | None = "cpu") -> ThreadSnapshot:
    """Threads alive now (HACKS.md #10). Torch, numpy's BLAS and CUDA start their pools
    lazily on first use; `warm` (a device, or None) runs `warm_runtime` first so that
    they are not blamed on the candidate. Pass the device the candidate will use."""
    if warm is not None:
        warm_runtime(warm)
    return ThreadSnapshot(frozenset(t.ident for t in threading.enumerate()), _os_tids())


def new_threads(before: ThreadSnapshot, os_threads: bool = True) -> list[str]:
    """Threads alive now that were not in `before` (HACKS.md #10, background threads):
    Python threads by name, and OS threads (e.g. `_thread`, native code) by count."""
    now = thread_snapshot()
    fresh = [t for t in threading.enumerate() if t.ident not in before.python and t.is_alive()]
    problems = [f"background_thread: python thread {t.name!r} still running" for t in fresh]
    if os_threads and before.os_tids is not None and now.os_tids is not None:
        known = {getattr(t, "native_id", None) for t in fresh}
        extra = [
            (tid, name)
            for tid in sorted(now.os_tids - before.os_tids - known)
            if not (name := _thread_name(tid)).startswith(_RUNTIME_THREAD_PREFIXES)
        ]
        if extra:
            names = [name for _, name in extra]
            problems.append(f"background_thread: {len(extra)} new OS threads {names}")
    return problems


# OS threads the CUDA driver and runtime start on their own (their names are set in
# native code; Python threads are recognised by ident, whatever their name).
_RUNTIME_THREAD_PREFIXES = ("cuda",)


def _thread_name(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return str(tid)


_WARMED: set[str] = set()


def warm_runtime(device: str | torch.device = "cpu") -> None:
    """Start the thread pools torch (intra-op), numpy's BLAS and CUDA create lazily, so
    that `thread_snapshot()` taken afterwards does not blame the candidate for them.
    Does the work once per device."""
    if "cpu" not in _WARMED:
        a = torch.ones(512, 512)
        (a @ a).add_(1).sum()
        a.t().contiguous()
        try:
            import numpy as np

            b = np.ones((256, 256), dtype=np.float32)
            b.dot(b)
        except ImportError:  # pragma: no cover
            pass
        _WARMED.add("cpu")
    kind = str(device)
    if kind.startswith("cuda") and kind not in _WARMED and torch.cuda.is_available():
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize()
        _WARMED.add(kind)


# ----- timers and harness functions ---------------------------------------------------

TIMER_NAMES = (
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.sleep", "torch.cuda.Event",
    "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.Stream",
    "triton.testing.do_bench", "torch.allclose", "torch.isclose", "torch.equal",
    "torch.testing.assert_close", "torch.Tensor.__eq__", "torch.Tensor.__ne__",
    "torch.Tensor.__sub__", "torch.Tensor.abs", "torch.Tensor.double", "torch.Tensor.cpu",
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.__torch_function__",
    "builtins.isinstance", "builtins.len", "builtins.abs",
    "tritonrl.verify.guards.snapshot_inputs", "tritonrl.verify.guards.inputs_mutated",
    "tritonrl.verify.guards.check_output_types", "tritonrl.verify.guards.new_threads",
    "tritonrl.verify.guards.refill_", "tritonrl.verify.guards.run_guarded",
    "tritonrl.verify.guards.OpAudit.violations", "tritonrl.verify.guards.OpAudit.__exit__",
    "tritonrl.verify.guards.LaunchCounter.__exit__", "tritonrl.verify.guards.LaunchCounter.count",
    # what the worker runs on outputs and inputs after forward, outside the op audit
    "torch.Tensor", "torch.Tensor.detach", "torch.Tensor.contiguous", "torch.Tensor.reshape",
    "torch.Tensor.view", "torch.Tensor.untyped_storage", "torch.save", "torch.load",
    "torch.no_grad", "json.dumps", "tritonrl.verify.guards.OpAudit.__torch_dispatch__",
    "tritonrl.verify.guards.OpAudit.__enter__", "tritonrl.verify.guards.audit_findings",
    "tritonrl.verify.guards.timers_intact",
)  # fmt: skip
_ABSENT = object()


def _resolve_path(path: str) -> Any:
    """The object a dotted path names; attributes of classes are read statically."""
    parts = path.split(".")
    obj: Any = _ABSENT
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        rest = parts[i:]
        break
    else:
        return _ABSENT
    for part in rest:
        if isinstance(obj, type):
            obj = _raw(inspect.getattr_static(obj, part, _ABSENT))
        else:
            obj = getattr(obj, part, _ABSENT)
        if obj is _ABSENT:
            return _ABSENT
    return obj


def capture_timers(extra: Iterable[str] = ()) -> dict[str, Any]:
    """Identity of the timing, comparison and harness functions (TIMER_NAMES plus
    `extra` dotted paths, plus the launch hooks), captured before candidate code loads
    (HACKS.md #12 timer tampering, #13 harness patching)."""
    install_hooks()
    captured = {name: _resolve_path(name) for name in (*TIMER_NAMES, *extra)}
    for label, (owner, attr, _, _) in _PATCHES.items():
        captured[f"hook:{label}"] = _raw(inspect.getattr_static(owner, attr, None))
    return captured


def timers_intact(captured: dict[str, Any]) -> list[str]:
    """Names whose object is no longer the one captured (HACKS.md #12, #13)."""
    problems = []
    for name, obj in captured.items():
        if name.startswith("hook:"):
            _, label = name.split(":", 1)
            owner, attr, _, _ = _PATCHES[label]
            now = _raw(inspect.getattr_static(owner, attr, None))
        else:
            now = _resolve_path(name)
        if now is not obj:
            problems.append(f"timer_tampering: {name.removeprefix('hook:')} was replaced")
    return problems


def _device_of(inputs: Any) -> str:
    for _, x in _leaves(inputs):
        if isinstance(x, torch.Tensor):
            return str(x.device)
    return "cpu"


# ----- one guarded call ---------------------------------------------------------------


@dataclass
class GuardReport:
    """What `run_guarded` saw: the output, flag-prefixed problems, launches, ops."""

    output: Any = None
    problems: list[str] = field(default_factory=list)
    launches: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    error: BaseException | None = None

    @property
    def flags(self) -> list[str]:
        return sorted({flag_of(p) for p in self.problems})


def run_guarded(
    forward: Callable[..., Any],
    inputs: Any,
    policy: str = "strict",
    allowed: Iterable[str] = (),
    os_threads: bool = True,
) -> GuardReport:
    """Call `forward(*inputs)` under every per-call guard: launch count (`no_launch`),
    op audit (`torch_fallback`), input mutation, output types and aliasing, threads.
    Exceptions from the candidate are returned in `error`, not raised."""
    install_hooks()
    report = GuardReport()
    threads = thread_snapshot(warm=_device_of(inputs))
    snapshot = snapshot_inputs(inputs)
    counter, audit = LaunchCounter(), OpAudit()
    try:
        with counter, audit, torch.no_grad():
            report.output = forward(*inputs)
    except Exception as e:  # the candidate's failure is a finding, not a crash
        report.error = e
        return report
    finally:
        report.launches, report.ops = counter.count, audit.ops
    if counter.count == 0:
        report.problems.append("no_launch: no Triton kernel was launched")
    report.problems += [f"torch_fallback: {op}" for op in audit.violations(policy, allowed)]
    report.problems += inputs_mutated(snapshot, inputs)
    report.problems += check_output_types(report.output, inputs)
    report.problems += new_threads(threads, os_threads=os_threads)
    return report
