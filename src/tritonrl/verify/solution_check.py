"""Check a task's reference Triton solution against its reference `Model`.

A fast in-process check for task authors and the generator's tests: it runs *trusted*
solutions that ship with a task, in this process, on a few input sets (two seeds at the
planned size, one at odd sizes). `tritonrl tasks check` and every untrusted candidate go
through `tritonrl.verify`, which sandboxes them; nothing here defends against a hostile
kernel. The output comparison and tolerances are the verifier's (`tritonrl.verify.compare`),
which is why this check sits in the verifier's package and not in `tritonrl.tasks`.

On a machine without CUDA the solution runs under the Triton interpreter
(`TRITON_INTERPRET=1`), which must be set before a kernel is defined: `check_task`
sets it itself when asked for the CPU.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

from tritonrl.tasks.runtime import import_source, to_device
from tritonrl.tasks.shapes import instantiate
from tritonrl.tasks.task import Task
from tritonrl.verify.compare import compare_outputs


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
