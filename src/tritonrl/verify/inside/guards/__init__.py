"""Run-time guards that run inside the sandboxed worker, around a candidate's forward.

Each guard answers categories of docs/hacks.md, the cheat catalogue, named in its docstring:

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
* `SINKS`: callables given each new finding the moment it is seen (audit-hook findings,
  thread starts, and the violations of an `OpAudit` given a `policy`), before the call
  that produced it runs on: the worker appends its findings log
  (`tritonrl.verify.findings`) here, so that a forward that segfaults right after a host
  round-trip still leaves its finding behind.

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

The package: `state` (what the guards share: launch state, active counters and audits,
the patch registry), `launches` (launch hooks), `host` (host round-trips, dispatch-mode
escapes, thread starts), `audit` (the Python audit hook), `hooks` (`install_hooks`,
`hooks_intact`, `LaunchCounter`), `ops` (`OpAudit` and the op allow-lists), `inout`
(inputs and outputs), `threads`, `timers`. This module re-exports them and holds
`run_guarded`, which looks the guards up in this namespace: the one the worker calls
through and `timers_intact` re-checks (`TIMER_NAMES`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonrl.verify.inside.guards.audit import audit_findings, taking_sets
from tritonrl.verify.inside.guards.hooks import LaunchCounter, hooks_intact, install_hooks
from tritonrl.verify.inside.guards.host import SCALAR_READ_BUDGET
from tritonrl.verify.inside.guards.inout import (
    check_output_types,
    inputs_mutated,
    nested_leaves,
    refill_,
    snapshot_inputs,
)
from tritonrl.verify.inside.guards.launches import Launch
from tritonrl.verify.inside.guards.ops import (
    ALLOCATION_OPS,
    COPY_OPS,
    METADATA_OPS,
    OP_ALIASES,
    STRICT_ALLOWED_OPS,
    VIEW_OPS,
    OpAudit,
    expand_allowed,
)
from tritonrl.verify.inside.guards.state import SINKS
from tritonrl.verify.inside.guards.threads import (
    ThreadSnapshot,
    new_threads,
    thread_snapshot,
    warm_runtime,
)
from tritonrl.verify.inside.guards.timers import TIMER_NAMES, capture_timers, timers_intact

__all__ = [
    "ALLOCATION_OPS",
    "COPY_OPS",
    "METADATA_OPS",
    "OP_ALIASES",
    "SCALAR_READ_BUDGET",
    "SINKS",
    "STRICT_ALLOWED_OPS",
    "TIMER_NAMES",
    "VIEW_OPS",
    "GuardReport",
    "Launch",
    "LaunchCounter",
    "OpAudit",
    "ThreadSnapshot",
    "audit_findings",
    "capture_timers",
    "check_output_types",
    "expand_allowed",
    "flag_of",
    "hooks_intact",
    "inputs_mutated",
    "install_hooks",
    "new_threads",
    "refill_",
    "run_guarded",
    "snapshot_inputs",
    "taking_sets",
    "thread_snapshot",
    "timers_intact",
    "warm_runtime",
]


def flag_of(problem: str) -> str:
    """The flag a problem string stands for ("input_mutation: ..." -> "input_mutation")."""
    return problem.split(":", 1)[0]


def _device_of(inputs: Any) -> str:
    for _, x in nested_leaves(inputs):
        if isinstance(x, torch.Tensor):
            return str(x.device)
    return "cpu"


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
