"""The op audit (docs/hacks.md #1, #3, #4, #20) and the aten op allow-lists it judges by.

`OpAudit` is a `TorchDispatchMode` that counts every aten op the thread executes while
active (plus the `host::*` round-trips recorded by `host`); `violations(policy,
allowed)` names the compute ops: under the strict policy only allocation, views, copies
and metadata (`STRICT_ALLOWED_OPS`) and up to `SCALAR_READ_BUDGET` scalar reads are
allowed; the partial policy also allows the aten ops that `expand_allowed` derives from
a task's torch-level names (`OP_ALIASES`). An audit that is no longer the active mode,
or whose dispatch method was replaced, reports "audit::tampered". An audit given a
`policy` also hands each violation of it to the guards' sinks the moment it is recorded
(`state.report`, as "torch_fallback: <op>"): the worker's findings log keeps it even if
the very call that was recorded then crashes the process.

What it does NOT do: see work that never goes through the dispatcher: Triton kernels
themselves (that is the point), native code, or host compute on raw memory (see
`host`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from tritonrl.config import op_key
from tritonrl.verify.inside.guards.hooks import LaunchCounter, install_hooks
from tritonrl.verify.inside.guards.host import SCALAR_READ_BUDGET
from tritonrl.verify.inside.guards.state import AUDITS, LOCK, STATE, report

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
    """The aten op names that torch-level op names (e.g. {"matmul", "F.relu"}) allow, each
    name read as the static checks read it (`tritonrl.config.op_key`)."""
    out: set[str] = set()
    for raw in names:
        name = op_key(raw)  # as the static checks read it: "nn.functional.ReLU" is "relu"
        out |= {name, f"_{name}", f"native_{name}", f"{name}_"} | OP_ALIASES.get(name, set())
    return frozenset(out)


def _op_name(func: Any) -> str:
    packet = getattr(func, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or str(func).split(".")[0]
    namespace = getattr(func, "namespace", None) or "aten"
    return f"{namespace}::{name}"


class OpAudit(TorchDispatchMode):
    """Records every aten op the thread executes while active (docs/hacks.md #1 library
    fallback, #3 try/except fallback, #4 stolen reference, #20 compiler as author: their
    torch work shows up as compute ops).

    Ops that Triton's launch machinery runs itself (the interpreter's argument copies, the
    autotuner's benchmarking) are not counted; grid callables, heuristics and pre-run
    hooks are user code and are audited. Host round-trips (`.numpy()`, `.tolist()`,
    `torch.from_numpy`) are recorded as `host::*`. `ops` counts by name ("aten::mm").
    With a `policy` ("strict" / "partial", and `allowed` as for `violations`), each
    violation is also reported to the guards' sinks as it happens.
    """

    def __init__(
        self,
        launches: LaunchCounter | None = None,
        *,
        policy: str | None = None,
        allowed: Iterable[str] = (),
    ) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.tampered: list[str] = []
        # an optional counter kept active for the audit's duration
        self.launches = launches
        self._started_counter = False
        # the extra ops allowed when violations are reported live (None: not reported)
        self._live: frozenset[str] | None = None
        if policy is not None:
            _check_policy(policy)
            self._live = expand_allowed(allowed) if policy == "partial" else frozenset()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not STATE.pause:
            self.record(_op_name(func))
        return func(*args, **(kwargs or {}))

    def record(self, name: str) -> None:
        """Count one op ("aten::mm", "host::numpy"); report it at once if it is a new
        violation of the live policy."""
        self.ops[name] += 1
        live = self._live
        if live is not None:
            count = self.ops[name]
            if count in (1, SCALAR_READ_BUDGET + 1) and not _allowed(name, count, live):
                report(f"torch_fallback: torch computed inside forward: {name}")

    def tamper(self, reason: str) -> None:
        """Mark the audit tampered (its violations then include "audit::tampered")."""
        self.tampered.append(reason)
        if self._live is not None:
            report(f"torch_fallback: audit::tampered ({reason})")

    def __enter__(self) -> OpAudit:
        install_hooks()
        if self.launches is not None and not self.launches.active:
            self.launches.install()
            self._started_counter = True
        with LOCK:
            AUDITS.append(self)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        if _get_current_dispatch_mode() is not self:
            self.tamper("the audit is no longer the active dispatch mode")
        if "__torch_dispatch__" in vars(self):
            self.tamper("the audit's __torch_dispatch__ was replaced on the instance")
        with LOCK:
            if self in AUDITS:
                AUDITS.remove(self)
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
        _check_policy(policy)
        extra = expand_allowed(allowed) if policy == "partial" else frozenset()
        out = [name for name, n in sorted(self.ops.items()) if not _allowed(name, n, extra)]
        return out + (["audit::tampered"] if self.tampered else [])


def _check_policy(policy: str) -> None:
    if policy not in ("strict", "partial"):
        raise ValueError(f"unknown policy {policy!r}")


def _allowed(name: str, count: int, extra: frozenset[str]) -> bool:
    namespace, short = name.split("::", 1)
    if namespace != "aten" or not (short in STRICT_ALLOWED_OPS or short in extra):
        return False
    return short != "_local_scalar_dense" or count <= SCALAR_READ_BUDGET
