"""What running a task's code needs, in any process: importing Python source from a real
file (Triton's `@jit` reads its function's source back) and moving a task's inputs to a
device. The verifier's trusted side and its sandboxed worker both use these.

What it does NOT do: check or judge anything (`tritonrl.verify.solution_check` runs a
task's trusted solution; `tritonrl.verify` sandboxes untrusted ones).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import torch


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


def to_device(obj: Any, device: str) -> Any:
    """Every tensor in `obj` (nested lists and tuples too, integer tensors included) moved
    to `device`; other values as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    return obj
