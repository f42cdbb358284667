"""Timer and harness identity checks (docs/hacks.md #12 timer tampering, #13 harness patching).

`capture_timers` records the identity of the timing, comparison and harness functions
(`TIMER_NAMES`, plus extra dotted paths, plus every patched entry point) before
candidate code loads; `timers_intact` names those that were replaced since. The guards
are named by the package (`tritonrl.verify.inside.guards.inputs_mutated`): that is where the
worker and `run_guarded` look them up.

What it does NOT do: notice a replacement undone before the check, or a function
replaced somewhere that is not listed.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from typing import Any

from tritonrl.verify.inside.guards.hooks import install_hooks
from tritonrl.verify.inside.guards.state import PATCHES, raw

TIMER_NAMES = (
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.thread_time", "time.sleep", "torch.cuda.Event",
    "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize", "torch.cuda._sleep", "torch.cuda.current_stream", "torch.cuda.Stream",
    "triton.testing.do_bench", "torch.allclose", "torch.isclose", "torch.equal",
    "torch.testing.assert_close", "torch.Tensor.__eq__", "torch.Tensor.__ne__",
    "torch.Tensor.__sub__", "torch.Tensor.abs", "torch.Tensor.double", "torch.Tensor.cpu",
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.__torch_function__",
    "builtins.isinstance", "builtins.len", "builtins.abs",
    "tritonrl.verify.inside.guards.snapshot_inputs", "tritonrl.verify.inside.guards.inputs_mutated",
    "tritonrl.verify.inside.guards.check_output_types", "tritonrl.verify.inside.guards.new_threads",
    "tritonrl.verify.inside.guards.refill_", "tritonrl.verify.inside.guards.run_guarded",
    "tritonrl.verify.inside.guards.OpAudit.violations",
    "tritonrl.verify.inside.guards.OpAudit.__exit__",
    "tritonrl.verify.inside.guards.LaunchCounter.__exit__",
    "tritonrl.verify.inside.guards.LaunchCounter.count",
    # what the worker runs on outputs and inputs after forward, outside the op audit
    "torch.Tensor", "torch.Tensor.detach", "torch.Tensor.contiguous", "torch.Tensor.reshape",
    "torch.Tensor.view", "torch.Tensor.untyped_storage", "torch.save", "torch.load",
    "torch.no_grad", "json.dumps", "tritonrl.verify.inside.guards.OpAudit.__torch_dispatch__",
    "tritonrl.verify.inside.guards.OpAudit.__enter__",
    "tritonrl.verify.inside.guards.audit_findings", "tritonrl.verify.inside.guards.timers_intact",
    # the measurement loop itself (imported here, before the candidate loads)
    "tritonrl.verify.inside.timing.Timer", "tritonrl.verify.inside.timing.Timer.measure",
    "tritonrl.verify.inside.timing.Timer._loop", "tritonrl.verify.inside.timing.Timer._trial",
    "tritonrl.verify.inside.timing.Timer._calibrate",
    "tritonrl.verify.inside.timing.Timer._raise_preroll",
    "tritonrl.verify.inside.timing.Timer._sync_now", "tritonrl.verify.inside.timing.Timer._series",
    "tritonrl.verify.inside.timing.TimingOptions", "tritonrl.verify.inside.timing.summarize",
    "tritonrl.verify.inside.timing.converged", "tritonrl.verify.inside.timing._gc_disable",
    "tritonrl.verify.inside.timing._gc_enable", "tritonrl.verify.inside.timing._gc_isenabled",
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
            obj = raw(inspect.getattr_static(obj, part, _ABSENT))
        else:
            obj = getattr(obj, part, _ABSENT)
        if obj is _ABSENT:
            return _ABSENT
    return obj


def capture_timers(extra: Iterable[str] = ()) -> dict[str, Any]:
    """Identity of the timing, comparison and harness functions (TIMER_NAMES plus
    `extra` dotted paths, plus the launch hooks), captured before candidate code loads
    (docs/hacks.md #12 timer tampering, #13 harness patching)."""
    install_hooks()
    captured = {name: _resolve_path(name) for name in (*TIMER_NAMES, *extra)}
    for label, (owner, attr, _, _) in PATCHES.items():
        captured[f"hook:{label}"] = raw(inspect.getattr_static(owner, attr, None))
    return captured


def timers_intact(captured: dict[str, Any]) -> list[str]:
    """Names whose object is no longer the one captured (docs/hacks.md #12, #13)."""
    problems = []
    for name, obj in captured.items():
        if name.startswith("hook:"):
            _, label = name.split(":", 1)
            owner, attr, _, _ = PATCHES[label]
            now = raw(inspect.getattr_static(owner, attr, None))
        else:
            now = _resolve_path(name)
        if now is not obj:
            problems.append(f"timer_tampering: {name.removeprefix('hook:')} was replaced")
    return problems
