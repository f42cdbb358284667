"""Hooks on the ways around the op audit: host round-trips, dispatch escapes, threads.

Host round-trips of tensor data that the dispatcher never sees (docs/hacks.md #1):
`Tensor.numpy`, `tolist`, DLPack, `__array__`, pickling, `torch.from_numpy` /
`frombuffer` / `save` / `load`, `ctypes` raw-address copies, and the text of a tensor of
more than `SCALAR_READ_BUDGET` elements are recorded as `host::<name>` ops in the active
op audits. Calls that switch Python dispatch modes off or pop them, from anywhere but
torch's own code, mark the active audits tampered (#1, #13). Thread starts by candidate
code are recorded as `background_thread` findings even if the thread is gone by the
time threads are counted (#10).

What it does NOT do: see host compute on raw memory that needs none of these entry
points (numpy over an object with `__array_interface__` at `data_ptr()`, the private
`torch._C.TensorBase.numpy`); the static checks refuse the `sys.modules` / private-API
access it needs (tests/verify/hostile/c01_array_interface_host.py).
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from tritonrl.verify.inside.guards.audit import audit_finding
from tritonrl.verify.inside.guards.state import AUDITS, STATE, patch

# `.item()` reads are metadata-like for a few scalars; many of them are a host loop.
SCALAR_READ_BUDGET = 16


def _wrap_host(name: str, original: Callable) -> Callable:
    """Tensor.numpy / tolist / torch.from_numpy: host round-trips the dispatcher never
    sees; recorded as `host::<name>` ops."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if not STATE.pause:
            for audit in list(AUDITS):  # recorded before the call: it may crash
                audit.record(f"host::{name}")
        return original(*args, **kwargs)

    return call


def _wrap_text(name: str, original: Callable) -> Callable:
    """Tensor.__repr__ / __str__ / __format__: the text of a tensor is a host read of its
    values (torch even disables dispatch modes to format it), so formatting more than a
    few elements is recorded as `host::<name>` (a debug print of a scalar is not)."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not STATE.pause and AUDITS:
            try:
                big = self.numel() > SCALAR_READ_BUDGET
            except Exception:  # not a plain tensor: count it
                big = True
            if big:
                for audit in list(AUDITS):
                    audit.record(f"host::{name}")
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
    from anywhere else while an audit is active marks it tampered (docs/hacks.md #1, #13)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if AUDITS and not STATE.pause and not _torch_internal():
            for audit in list(AUDITS):
                audit.tamper(f"{name} was called")
        return original(*args, **kwargs)

    return call


def wrap_thread_start(original: Callable) -> Callable:
    """_thread.start_new_thread (threading keeps its own alias): a thread started by
    candidate code is recorded even if it is gone by the time threads are counted
    (docs/hacks.md #10). Threads started inside Triton's launch machinery are not."""

    def call(function: Any, *args: Any, **kwargs: Any) -> Any:
        if not STATE.pause:
            owner = getattr(function, "__self__", None)
            if isinstance(owner, threading.Thread):
                target = getattr(owner, "_target", None)
                what = f"{owner.name!r} ({getattr(target, '__qualname__', 'run')})"
            else:
                what = getattr(function, "__qualname__", type(function).__name__)
            audit_finding(f"background_thread: a thread was started: {what}")
        return original(function, *args, **kwargs)

    return call


def install_host_hooks() -> None:
    """Host round-trips of tensor data that the dispatcher never sees (#1): numpy,
    lists, DLPack (zero-copy sharing with numpy or anything else), raw buffers, pickling
    and the text of a tensor."""
    import torch.utils.dlpack

    for name in ("numpy", "tolist", "__dlpack__", "__array__", "__reduce_ex__"):
        patch(torch.Tensor, name, lambda orig, n=name: _wrap_host(n, orig))
    for name in ("__repr__", "__str__", "__format__"):
        patch(torch.Tensor, name, lambda orig, n=name: _wrap_text(n, orig))
    for name in ("from_numpy", "from_dlpack", "frombuffer", "save", "load"):
        patch(torch, name, lambda orig, n=name: _wrap_host(n, orig))
    for name in ("to_dlpack", "from_dlpack"):
        if inspect.getattr_static(torch.utils.dlpack, name, None) is not None:
            patch(torch.utils.dlpack, name, lambda orig, n=name: _wrap_host(n, orig))
    patch(torch.UntypedStorage, "tolist", lambda orig: _wrap_host("storage.tolist", orig))
    if hasattr(torch._C, "_to_dlpack"):
        patch(torch._C, "_to_dlpack", lambda orig: _wrap_host("_to_dlpack", orig))
    import ctypes

    for name in ("memmove", "memset", "cast"):  # raw addresses raise no audit event
        patch(ctypes, name, lambda orig, n=name: _wrap_host(f"ctypes.{n}", orig))


def install_dispatch_hooks() -> None:
    from torch.utils import _python_dispatch as pd

    for name in ("_disable_current_modes", "_pop_mode", "_pop_mode_temporarily"):
        if hasattr(pd, name):
            patch(pd, name, lambda orig, n=name: _wrap_dispatch_escape(n, orig))
    for name in (
        "_pop_torch_dispatch_stack", "_unset_dispatch_mode", "_set_dispatch_mode",
        "_DisableTorchDispatch", "_ExcludeDispatchKeyGuard",
        "_dispatch_tls_set_dispatch_key_excluded", "_DisablePythonDispatcher",
    ):  # fmt: skip
        if hasattr(torch._C, name):
            make = lambda orig, n=f"torch._C.{name}": _wrap_dispatch_escape(n, orig)  # noqa: E731
            patch(torch._C, name, make)
