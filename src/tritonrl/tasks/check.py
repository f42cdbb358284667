"""Check a task's reference Triton solution against its reference `Model`.

A fast in-process check for task authors and the generator's tests: it runs *trusted*
solutions that ship with a task, in this process, on a few input sets (two seeds at the
planned size, one at odd sizes). `tritonrl tasks check` and every untrusted candidate go
through `tritonrl.verify`, which sandboxes them; nothing here defends against a hostile
kernel. It also holds the output comparison and per-dtype tolerances the verifier uses.

On a machine without CUDA the solution runs under the Triton interpreter
(`TRITON_INTERPRET=1`), which must be set before a kernel is defined: `check_task`
sets it itself when asked for the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tritonrl.tasks.shapes import instantiate
from tritonrl.tasks.task import Task

# (atol, rtol) per dtype: |out - ref| <= atol + rtol * |ref| element-wise.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when a GPU is visible, else `cpu`."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; use auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device")
    return device


def import_source(source: str, name: str, directory: str | Path) -> types.ModuleType:
    """Import Python source from a real file (Triton's `@jit` reads its function's source
    back with `inspect`, so code executed from a string would not compile)."""
    path = Path(directory) / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def flatten_outputs(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)):
        return [y for x in out for y in flatten_outputs(x)]
    return [out]


def compare_outputs(ref: Any, new: Any) -> str | None:
    """None when `new` matches `ref` within the per-dtype tolerance, else the reason."""
    refs, news = flatten_outputs(ref), flatten_outputs(new)
    if len(refs) != len(news):
        return f"expected {len(refs)} outputs, got {len(news)}"
    for i, (r, n) in enumerate(zip(refs, news, strict=False)):
        if not isinstance(r, torch.Tensor):
            if r != n:
                return f"output {i}: expected {r!r}, got {n!r}"
            continue
        if type(n) is not torch.Tensor and not getattr(n, "is_raw_file_tensor", False):
            return f"output {i}: expected a torch.Tensor, got {type(n).__name__}"
        if n.shape != r.shape:
            return f"output {i}: shape {tuple(n.shape)}, expected {tuple(r.shape)}"
        if n.dtype != r.dtype:
            return f"output {i}: dtype {n.dtype}, expected {r.dtype}"
        atol, rtol = TOLERANCES.get(r.dtype, (0.0, 0.0))
        reason = _compare_tensor(r, n, atol, rtol)
        if reason:
            return f"output {i}: {reason}"
    return None


COMPARE_CHUNK = 1 << 24  # elements compared at a time: bounded memory for GB outputs


def _compare_tensor(r: torch.Tensor, n: Any, atol: float, rtol: float) -> str | None:
    """Element-wise |n - r| <= atol + rtol |r| in float64, a chunk at a time (on the GPU
    when there is one and the tensor is large, where a host pass over GBs takes seconds).
    `n` is a tensor, or a worker's output still in its file (`verify.tensorfile`), read
    a chunk at a time into one buffer."""
    device = "cuda" if r.numel() > COMPARE_CHUNK // 4 and torch.cuda.is_available() else "cpu"
    rf = r.detach().reshape(-1)
    if getattr(n, "is_raw_file_tensor", False):
        buffer = torch.empty(min(COMPARE_CHUNK, rf.numel()), dtype=n.dtype)
        chunk = lambda start, k: n.read(start, buffer[:k])  # noqa: E731
    else:
        nf = n.detach().reshape(-1)
        chunk = lambda start, k: nf[start : start + k]  # noqa: E731
    bad_total, worst = 0, 0.0
    for start in range(0, rf.numel(), COMPARE_CHUNK):
        k = min(COMPARE_CHUNK, rf.numel() - start)
        r64 = rf[start : start + k].to(device).double()
        n64 = chunk(start, k).to(device).double()
        r_nan, n_nan = torch.isnan(r64), torch.isnan(n64)
        if n_nan.any() and not torch.equal(n_nan, r_nan):
            return "NaN where the reference has none"
        err = (n64 - r64).abs()
        bad = ~(r_nan & n_nan) & ~(err <= atol + rtol * r64.abs())
        count = int(bad.sum())
        if count:
            bad_total += count
            worst = max(worst, err[bad].max().item())
    if bad_total:
        return (
            f"{bad_total} of {r.numel()} elements differ "
            f"(max abs error {worst:.3g}, atol {atol}, rtol {rtol})"
        )
    return None


def to_device(obj: Any, device: str) -> Any:
    """Every tensor in `obj` (nested lists and tuples too, integer tensors included) moved
    to `device`; other values as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    return obj


@dataclass
class CheckResult:
    task: str
    ok: bool
    seconds: float
    runs: list[str] = field(default_factory=list)  # one line per input set
    error: str | None = None


def check_task(task: Task, device: str = "cpu", seeds: tuple[int, ...] = (1, 2)) -> CheckResult:
    """Run `task.solution` against the reference on two seeds plus one odd-size set."""
    start = time.perf_counter()
    if task.solution is None:
        return CheckResult(task.id, False, 0.0, error="task has no reference solution")
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    runs: list[str] = []
    plans = [("small", s) for s in seeds] + [("odd", seeds[0] + 100)]
    with tempfile.TemporaryDirectory(prefix="tritonrl-check-") as tmp:
        try:
            name = f"tritonrl_solution_{abs(hash(task.id))}"
            solution = import_source(task.solution, name, tmp)
            for mode, seed in plans:
                inst = instantiate(task, mode)
                init = inst.init_inputs()
                torch.manual_seed(seed)
                ref_model = inst.module.Model(*init).to(device)
                torch.manual_seed(seed)
                new_model = solution.ModelNew(*init).to(device)
                inputs = to_device(inst.inputs(seed), device)
                with torch.no_grad():
                    ref = ref_model(
                        *[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                    )
                    new = new_model(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                reason = compare_outputs(ref, new)
                runs.append(f"{mode} seed={seed} sizes={inst.overrides}: {reason or 'ok'}")
                if reason:
                    return CheckResult(task.id, False, time.perf_counter() - start, runs, reason)
        except Exception as e:  # the report names the failure instead of a traceback
            return CheckResult(
                task.id, False, time.perf_counter() - start, runs, f"{type(e).__name__}: {e}"
            )
        finally:
            sys.modules.pop(name, None)
    return CheckResult(task.id, True, time.perf_counter() - start, runs)
