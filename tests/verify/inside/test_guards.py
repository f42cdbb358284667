"""Run-time guards under the real Triton interpreter: honest kernels pass every guard;
each hostile forward (one docs/hacks.md category per test, named in its docstring) is caught.

Kernels are written to temporary files and imported (`@triton.jit` reads its source
back), after `install_hooks()`, as the worker does.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import types

import pytest
import torch

from tritonrl.tasks.runtime import import_source
from tritonrl.verify.inside import guards
from tritonrl.verify.inside.guards import (
    LaunchCounter,
    OpAudit,
    capture_timers,
    check_output_types,
    hooks_intact,
    inputs_mutated,
    new_threads,
    refill_,
    run_guarded,
    snapshot_inputs,
    thread_snapshot,
    timers_intact,
)

PRELUDE = """
import threading
import time
import _thread

import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def launch_relu(x, y):
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 64),)](x, y, n, BLOCK=64)
"""

_names = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    """These tests run CPU tensors through the interpreter, GPU or not."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    guards.install_hooks()
    guards.warm_runtime()
    yield
    if old is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = old


def load(tmp_path, body: str) -> types.ModuleType:
    """Import PRELUDE + body from a real file."""
    return import_source(PRELUDE + body, f"guard_case_{next(_names)}", tmp_path)


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(100, generator=torch.Generator().manual_seed(0))


# ----- honest kernels ------------------------------------------------------------------

HONEST = """
def forward(x):
    x = x.contiguous().view(-1)
    y = torch.empty_like(x)
    launch_relu(x, y)
    return y.view(10, 10).t().contiguous().t().reshape(100)
"""

HONEST_TUNED = """
@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1)], key=["n"])
@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@triton.jit
def tuned_relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def forward(x):
    n = x.numel()
    y = torch.empty_like(x)
    tuned_relu[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    z = torch.zeros(n, dtype=x.dtype)
    launch_relu(y, z)
    return z, y.new_empty(0), n
"""

CAPTURED_AT_IMPORT = """
RUN = relu_kernel.run


def forward(x):
    y = torch.empty_like(x)
    RUN(x, y, x.numel(), BLOCK=128, grid=(1,), warmup=False)
    return y
"""


def test_honest_kernel_passes_every_guard(tmp_path, x) -> None:
    mod = load(tmp_path, HONEST)
    report = run_guarded(mod.forward, [x])
    assert report.error is None and report.problems == []
    assert report.launches == 1
    assert torch.equal(report.output, torch.relu(x))
    assert report.ops and set(report.ops) <= {f"aten::{o}" for o in guards.STRICT_ALLOWED_OPS}


def test_autotune_heuristics_and_two_launches(tmp_path, x) -> None:
    mod = load(tmp_path, HONEST_TUNED)
    for _ in range(2):  # the second call takes the autotuner's cached path
        report = run_guarded(mod.forward, [x])
        assert report.error is None and report.problems == []
        assert report.launches == 2
        assert torch.equal(report.output[0], torch.relu(x))


def test_launch_through_reference_taken_at_import_is_counted(tmp_path, x) -> None:
    """Hooks are installed at class level before import, so `RUN = kernel.run` is ours."""
    mod = load(tmp_path, CAPTURED_AT_IMPORT)
    with LaunchCounter() as counter:
        out = mod.forward(x)
    assert counter.count == 1 and counter.launches[0].kernel == "relu_kernel"
    assert counter.launches[0].grid == (1,)
    assert torch.equal(out, torch.relu(x))


# ----- hostile kernels -----------------------------------------------------------------


def test_torch_fallback_is_caught(tmp_path, x) -> None:
    """#1 library fallback: a kernel runs for show, torch computes the answer."""
    mod = load(
        tmp_path,
        """
def forward(x, w):
    launch_relu(x, torch.empty_like(x))
    return torch.relu(x @ w)
""",
    )
    w = torch.randn(100, 7)
    report = run_guarded(mod.forward, [x, w])
    assert report.launches == 1
    assert {"torch_fallback: aten::mm", "torch_fallback: aten::relu"} <= set(report.problems)
    assert report.flags == ["torch_fallback"]


def test_partial_policy_allows_named_ops(tmp_path, x) -> None:
    mod = load(
        tmp_path, "def forward(x, w):\n    launch_relu(x, x.clone())\n    return (x @ w).relu()\n"
    )
    w = torch.randn(100, 3)
    with OpAudit() as audit:
        mod.forward(x, w)
    assert audit.violations("partial", {"torch.matmul"}) == ["aten::relu"]
    assert audit.violations("partial", {"matmul", "F.relu"}) == []
    # every spelling the config takes and the static checks read as "relu" allows it here
    # too (nn.functional. and capitals were kept: aten::relu was then a violation)
    for relu in ("relu", "torch.relu", "F.relu", "nn.functional.relu", "ReLU", "aten::relu",
                 "torch.nn.functional.relu"):  # fmt: skip
        assert audit.violations("partial", {"matmul", relu}) == [], relu
    assert audit.violations("partial", {"matmul", "nn.functional.gelu"}) == ["aten::relu"]
    assert "aten::mm" in audit.violations("strict")
    with pytest.raises(ValueError):
        audit.violations("lenient")


def test_never_launched_kernel_counts_zero(tmp_path, x) -> None:
    """#2 kernel never launched (and #5 stale memory: returns uninitialised memory)."""
    mod = load(tmp_path, "def forward(x):\n    return torch.empty_like(x)\n")
    report = run_guarded(mod.forward, [x])
    assert report.launches == 0
    assert report.flags == ["no_launch"]


def test_empty_grid_launch_does_not_count(tmp_path, x) -> None:
    """#2 variant: a launch with zero programs runs nothing."""
    mod = load(
        tmp_path,
        """
def forward(x):
    y = torch.empty_like(x)
    relu_kernel[(0,)](x, y, x.numel(), BLOCK=64)
    return y
""",
    )
    with LaunchCounter() as counter:
        mod.forward(x)
    assert counter.count == 0 and len(counter.empty_launches) == 1


def test_try_except_fallback_is_caught(tmp_path, x) -> None:
    """#3 try/except fallback: the launch fails, torch answers."""
    mod = load(
        tmp_path,
        """
def forward(x):
    y = torch.empty_like(x)
    try:
        relu_kernel[(1,)](x, y)  # missing arguments: raises
    except Exception:
        y = torch.relu(x)
    return y
""",
    )
    report = run_guarded(mod.forward, [x])
    assert torch.equal(report.output, torch.relu(x))
    assert "torch_fallback: aten::relu" in report.problems
    assert "no_launch" in report.flags


def test_torch_inside_a_kernel_body_is_audited(tmp_path, x) -> None:
    """#1 under the interpreter only: a kernel body is Python, and may call torch."""
    mod = load(
        tmp_path,
        """
STASH = {}


@triton.jit
def sneaky(x_ptr, BLOCK: tl.constexpr):
    STASH["y"].copy_(torch.relu(STASH["x"]))


def forward(x):
    y = torch.empty_like(x)
    STASH["x"], STASH["y"] = x, y
    sneaky[(1,)](x, BLOCK=16)
    return y
""",
    )
    report = run_guarded(mod.forward, [x])
    assert torch.equal(report.output, torch.relu(x)) and report.launches == 1
    assert report.problems == ["torch_fallback: aten::relu"]


def test_grid_callable_is_audited(tmp_path, x) -> None:
    """#1: a grid callable is user code run inside the launch machinery."""
    mod = load(
        tmp_path,
        """
def forward(x):
    y = torch.empty_like(x)

    def grid(meta):
        y.copy_(torch.relu(x))
        return (0,)

    relu_kernel[grid](x, y, x.numel(), BLOCK=64)
    return y
""",
    )
    report = run_guarded(mod.forward, [x])
    assert "torch_fallback: aten::relu" in report.problems
    assert "no_launch" in report.flags  # zero programs


def test_host_roundtrip_is_recorded(tmp_path, x) -> None:
    """#1 via numpy: the dispatcher never sees numpy compute."""
    mod = load(
        tmp_path,
        """
def forward(x):
    launch_relu(x, torch.empty_like(x))
    return torch.from_numpy(x.numpy().clip(0, None)), x.tolist()[:1]
""",
    )
    with OpAudit() as audit:
        mod.forward(x)
    assert {"host::numpy", "host::from_numpy", "host::tolist"} <= set(audit.violations())


def test_many_item_reads_are_a_violation(x) -> None:
    with OpAudit() as few:
        [x[i].item() for i in range(3)]
    with OpAudit() as many:
        [x[i].item() for i in range(guards.SCALAR_READ_BUDGET + 1)]
    assert few.violations() == []
    assert many.violations() == ["aten::_local_scalar_dense"]


def test_an_audit_with_a_policy_reports_violations_as_they_happen(x) -> None:
    """What the worker's findings log relies on: a host round-trip reaches the sinks
    before the call runs, so one that then fails (here a meta tensor, on a GPU a CUDA
    tensor) is still on record; allowed ops and audits without a policy report nothing."""
    seen: list[str] = []
    guards.SINKS.append(seen.append)
    try:
        with OpAudit():  # no policy: nothing is reported live
            torch.relu(x)
        assert seen == []
        with OpAudit(policy="strict") as audit:
            torch.empty_like(x)
            with pytest.raises((TypeError, RuntimeError, NotImplementedError)):
                torch.empty(4, device="meta").numpy()
            torch.relu(x)
            torch.relu(x)  # the same violation again: reported once
            [x[i].item() for i in range(guards.SCALAR_READ_BUDGET + 1)]
    finally:
        guards.SINKS.remove(seen.append)
    ops = [s.rsplit(": ", 1)[-1] for s in seen]
    assert ops == ["host::numpy", "aten::relu", "aten::_local_scalar_dense"], seen
    assert all(s.startswith("torch_fallback: ") for s in seen)
    assert set(ops) == set(audit.violations())
    with pytest.raises(ValueError, match="policy"):
        OpAudit(policy="lenient")


def test_popping_the_audit_is_reported(x) -> None:
    from torch.utils._python_dispatch import _pop_mode

    audit = OpAudit()
    with audit:
        _pop_mode()
        torch.relu(x)
    assert audit.violations() == ["audit::tampered"]


def test_input_mutation_is_caught(tmp_path, x) -> None:
    """#6 input mutation: the kernel writes its result into its input."""
    mod = load(
        tmp_path,
        "def forward(x):\n    launch_relu(x, x)\n    return x.clone()\n",
    )
    report = run_guarded(mod.forward, [x])
    assert report.problems == ["input_mutation: input 0 values changed"]


def test_inputs_mutated_details() -> None:
    a, b = torch.randn(4), torch.tensor([float("nan"), 1.0])
    snap = snapshot_inputs([a, [b, 3]])
    assert inputs_mutated(snap, [a, [b, 3]]) == []  # NaNs compare equal bit for bit
    a.set_(torch.zeros(4))
    assert inputs_mutated(snap, [a, [b, 4]]) == [
        "input_mutation: input 0 storage/shape/strides changed",
        "input_mutation: input 1.1 changed",
    ]
    assert inputs_mutated(snap, [a]) == ["input_mutation: 3 inputs became 1"]


def test_tensor_subclass_output_is_caught(tmp_path, x) -> None:
    """#11 lazy outputs: a subclass, a parameter, an overridden method."""
    mod = load(
        tmp_path,
        """
class Lazy(torch.Tensor):
    pass


def forward(x):
    y = torch.empty_like(x)
    launch_relu(x, y)
    z = torch.empty_like(x)
    z.sum = lambda *a: 0
    return y.as_subclass(Lazy), torch.nn.Parameter(y.clone()), z
""",
    )
    report = run_guarded(mod.forward, [x])
    assert report.flags == ["output_type"]
    assert len(report.problems) == 3
    assert "output 2 carries instance attributes ['sum']" in report.problems[2]


def test_returned_input_is_caught_as_aliasing(tmp_path, x) -> None:
    """Returning an input (or a view of one) instead of new memory."""
    mod = load(
        tmp_path,
        "def forward(x):\n    launch_relu(x, x)\n    return x, x.view(10, 10)[2:], x.clone()\n",
    )
    report = run_guarded(mod.forward, [x])
    aliases = [p for p in report.problems if p.startswith("output_aliases_input")]
    assert aliases == [
        "output_aliases_input: output 0 shares storage with input 0",
        "output_aliases_input: output 1 shares storage with input 0",
    ]


def test_background_thread_is_caught(tmp_path, x) -> None:
    """#10 background threads: work continues after return."""
    mod = load(
        tmp_path,
        """
def forward(x):
    y = torch.empty_like(x)
    def finish():
        time.sleep(0.3)
        launch_relu(x, y)

    t = threading.Thread(target=finish, name="finisher")
    t.start()
    time.sleep(0.01)
    return y
""",
    )
    before = thread_snapshot()
    report = run_guarded(mod.forward, [x], os_threads=False)
    assert "background_thread: python thread 'finisher' still running" in report.problems
    for t in threading.enumerate():
        if t.name == "finisher":
            t.join()
    # (the OS-level check may still see OpenMP workers the finisher's torch ops started)
    assert new_threads(before, os_threads=False) == []


def test_raw_os_thread_is_caught(tmp_path, x) -> None:
    """#10 via `_thread`: invisible to threading.enumerate, visible in /proc."""
    if thread_snapshot().os_tids is None:
        pytest.skip("no /proc/self/task here")
    mod = load(
        tmp_path,
        """
DONE = []


def forward(x):
    y = torch.empty_like(x)
    launch_relu(x, y)
    _thread.start_new_thread(lambda: (time.sleep(0.5), DONE.append(1)), ())
    return y
""",
    )
    report = run_guarded(mod.forward, [x])
    assert any(p.startswith("background_thread: 1 new OS threads") for p in report.problems)
    deadline = time.time() + 5
    while not mod.DONE and time.time() < deadline:
        time.sleep(0.05)


def test_timer_patching_is_caught(monkeypatch) -> None:
    """#12 timer tampering and #13 harness patching."""
    captured = capture_timers(extra=["tritonrl.verify.solution_check.compare_outputs"])
    assert timers_intact(captured) == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(torch.Tensor, "__eq__", lambda a, b: True)
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(guards, "inputs_mutated", lambda *a: [])
    monkeypatch.setattr("tritonrl.verify.solution_check.compare_outputs", lambda *a: None)
    # the measurement loop, which the worker builds only after the candidate loaded
    monkeypatch.setattr("tritonrl.verify.inside.timing.Timer._series", lambda *a: ([1e-3], False))
    monkeypatch.setattr("tritonrl.verify.inside.timing._gc_disable", lambda: None)
    assert timers_intact(captured) == [
        "timer_tampering: time.perf_counter was replaced",
        "timer_tampering: torch.allclose was replaced",
        "timer_tampering: torch.Tensor.__eq__ was replaced",
        "timer_tampering: tritonrl.verify.inside.guards.inputs_mutated was replaced",
        "timer_tampering: tritonrl.verify.inside.timing.Timer._series was replaced",
        "timer_tampering: tritonrl.verify.inside.timing._gc_disable was replaced",
        "timer_tampering: tritonrl.verify.solution_check.compare_outputs was replaced",
    ]
    monkeypatch.undo()
    assert timers_intact(captured) == []


def test_removing_launch_hooks_is_caught(monkeypatch) -> None:
    from triton.runtime.interpreter import GridExecutor

    captured = capture_timers()
    assert hooks_intact() == []
    original = GridExecutor.__call__.__wrapped__
    monkeypatch.setattr(GridExecutor, "__call__", original)
    label = "triton.runtime.interpreter.GridExecutor.__call__"
    assert hooks_intact() == [f"timer_tampering: launch hook {label} was replaced"]
    assert timers_intact(captured) == [f"timer_tampering: {label} was replaced"]


# ----- refill --------------------------------------------------------------------------


def test_refill_changes_data_in_place() -> None:
    """#7 output caching: same buffers, new data, same domain."""
    g = torch.Generator().manual_seed(1)
    f = torch.rand(64, 8, generator=g)  # [0, 1): must stay there
    s = torch.randn(32, generator=g)
    i = torch.randint(3, 9, (50,), generator=g)
    b = torch.rand(40, generator=g) < 0.5
    h = torch.randn(16, generator=g).half()
    tensors = [f, [s, i], {"b": b, "h": h}]
    before = [t.clone() for t in (f, s, i, b, h)]
    ptrs = [t.data_ptr() for t in (f, s, i, b, h)]
    out = refill_(tensors, 123)
    assert out is tensors
    assert [t.data_ptr() for t in (f, s, i, b, h)] == ptrs
    for old, new in zip(before, (f, s, i, b, h), strict=True):
        assert not torch.equal(old, new)
    assert f.min() >= 0 and f.max() < 1 and f.sum() != before[0].sum()
    assert (s > 0).sum() == (before[1] > 0).sum()  # signs kept (as a multiset)
    assert i.min() >= 3 and i.max() <= 8
    assert h.dtype == torch.float16


def test_refill_exposes_output_caching_by_pointer(tmp_path, x) -> None:
    """#7/#8: a forward that caches by data_ptr returns a stale result after refill_."""
    mod = load(
        tmp_path,
        """
CACHE = {}


def forward(x):
    key = x.data_ptr()
    if key not in CACHE:
        y = torch.empty_like(x)
        launch_relu(x, y)
        CACHE[key] = y
    return CACHE[key]
""",
    )
    first = mod.forward(x)
    assert torch.equal(first, torch.relu(x))
    refill_([x], torch.Generator().manual_seed(7))
    assert not torch.equal(mod.forward(x), torch.relu(x))


def test_refill_with_given_data_copies_in_place() -> None:
    """The trusted side may generate the new data itself (it computes the reference)."""
    a, b = torch.zeros(3), torch.zeros(2, dtype=torch.int64)
    ptrs = (a.data_ptr(), b.data_ptr())
    refill_([a, (b, 5)], [torch.ones(3), (torch.tensor([4, 2]), 6)])
    assert (a.data_ptr(), b.data_ptr()) == ptrs
    assert a.tolist() == [1.0, 1.0, 1.0] and b.tolist() == [4, 2]
    with pytest.raises(ValueError):
        refill_([a], [a, b])


def test_counter_installed_across_calls_and_reset(tmp_path, x) -> None:
    """The worker style: one counter installed at load, reset per call, handed to the
    audit."""
    mod = load(tmp_path, HONEST)
    counter = LaunchCounter().install()
    try:
        mod.forward(x)
        assert counter.count == 1
        counter.reset()
        with OpAudit(counter) as audit:
            mod.forward(x)
        assert counter.count == 1 and audit.violations() == []
    finally:
        counter.uninstall()
    mod.forward(x)
    assert counter.count == 1 and not counter.active
    fresh = LaunchCounter()
    with OpAudit(fresh):  # an inactive counter is active for the audit's duration
        mod.forward(x)
    assert fresh.count == 1 and not fresh.active


def test_check_output_types_passes_plain_outputs() -> None:
    a = torch.randn(3)
    assert check_output_types((torch.randn(2), [1, 2.0, None], torch.empty(0)), [a]) == []


# ----- GPU (compiled kernels: JITFunction.run, the autotuner's benchmark loop) ----------

GPU_CASES = """
@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128})],
    key=["n"],
)
@triton.jit
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def honest(x):
    y = torch.empty_like(x)
    launch_relu(x, y)
    return y


def autotuned(x):
    y = torch.empty_like(x)
    n = x.numel()
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y


def precompiled(x):
    # the Triton tutorials' style: compile with warmup, launch the compiled kernel
    y = torch.empty_like(x)
    n = x.numel()
    k = relu_kernel.warmup(x, y, n, BLOCK=64, grid=(1,))
    k._init_handles()
    k[(triton.cdiv(n, 64), 1, 1)](x, y, n, 64)
    return y


def fallback(x, w):
    launch_relu(x, torch.empty_like(x))
    return torch.relu(x @ w)


def grid_cheat(x):
    y = torch.empty_like(x)

    def grid(meta):
        y.copy_(torch.relu(x))
        return (1,)

    relu_kernel[grid](x, torch.empty_like(x), 1, BLOCK=16)
    return y
"""


@pytest.mark.gpu
def test_gpu_launches_and_audit(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # real compilation for these kernels
    mod = load(tmp_path, GPU_CASES)
    guards.warm_runtime("cuda")
    x = torch.randn(5000, device="cuda")
    for _ in range(2):  # first call compiles (and autotunes), second hits the caches
        for fn in (mod.honest, mod.autotuned, mod.precompiled):
            report = run_guarded(fn, [x])
            torch.cuda.synchronize()
            assert report.error is None, report.error
            assert report.problems == [] and report.launches == 1, (fn.__name__, report)
            assert torch.equal(report.output, torch.relu(x))
    report = run_guarded(mod.fallback, [x, torch.randn(5000, 3, device="cuda")])
    assert "torch_fallback: aten::mm" in report.problems and report.launches == 1
    report = run_guarded(mod.grid_cheat, [x])
    assert "torch_fallback: aten::relu" in report.problems and report.launches == 1


_WRITE_ROOTS_PROBE = """
import json, os, sys, torch
from tritonrl.verify.inside.guards import audit_findings, install_hooks
install_hooks()
with open(".triton/cache/entry.tmp", "w") as f:  # Triton's cache: a temp file, renamed
    f.write("x")
os.replace(".triton/cache/entry.tmp", ".triton/cache/entry")
os.makedirs("out/sub", exist_ok=True)
torch.save(torch.ones(2), "out/sub/t.pt")
os.symlink("out/sub/t.pt", "inside_link")
print(json.dumps(audit_findings()))
sys.stdout.flush()
try:  # past the link, beneath the cache's real directory but outside it
    open(".triton/cache/../escaped", "w").close()
except OSError:
    pass
print(json.dumps(audit_findings()))
"""


def test_the_work_dir_and_a_linked_triton_cache_take_writes_unflagged(tmp_path) -> None:
    """As in a pool job: `.triton/cache` is a link to a directory outside the work dir
    (the per-source cache). Triton's writes there, and the worker's in the work dir, are
    no escapes; a path that leaves the cache's real directory through the link is."""
    import json
    import subprocess
    import sys

    work, cache = tmp_path / "job", tmp_path / "cache" / "abc"
    (work / ".triton").mkdir(parents=True)
    cache.mkdir(parents=True)
    (work / ".triton" / "cache").symlink_to(cache, target_is_directory=True)
    env = {**os.environ, "TRITON_CACHE_DIR": str(work / ".triton" / "cache")}
    run = subprocess.run(
        [sys.executable, "-c", _WRITE_ROOTS_PROBE], cwd=work, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    clean, after = (json.loads(line) for line in run.stdout.splitlines()[-2:])
    assert clean == [], clean
    assert after == [f"sandbox_violation: write outside the work dir: {cache.parent}/escaped"]
