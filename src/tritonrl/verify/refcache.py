"""Reference timings measured once, in the trusted process, and cached on disk.

The key is the task (id and a hash of its source), the shapes (size overrides and
dtype of the timed input set), the device name, the torch and triton versions and the
CUDA-graph switch and the way it was measured (`METHOD`); the value is the timing
summary of the reference `Model` alone, timed by its stream events (trusted code), with
the summary of its time with the launch inside under "launch". The funnel uses it as a
yardstick for the reference timed beside the candidate in the worker, in both measures:
a reference that ran much slower there than alone (something in the candidate's process
slowed it, on the GPU or in its launch) is not allowed to inflate the speedup.

The file (`$XDG_CACHE_HOME/tritonrl/ref_times.json` by default; `verify.ref_time_cache`
names another, "off" disables it) is rewritten atomically under a lock; an unreadable
file is set aside and rebuilt, never trusted. What it does NOT do: time candidates, or
notice a GPU whose clocks changed since the entry was written (delete the file).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from tritonrl.runs.atomic import atomic_write_json
from tritonrl.tasks.runtime import to_device
from tritonrl.tasks.shapes import build_module
from tritonrl.verify.inputs import TRUSTED_LOCK
from tritonrl.verify.inside.stats import summarize
from tritonrl.verify.inside.timing import Timer
from tritonrl.verify.job import data_bytes

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_TIMER = None  # one trusted Timer per process (it holds the L2 flush buffer)
# How the entries were measured: 2 = stream events only, trials in which the host lost
# the CPU thrown away (entries of 1 could be read late in a busy pool: measured again);
# 3 = and the time with the launch inside (entries of 2 lack it: measured again).
METHOD = 3


def default_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tritonrl" / "ref_times.json"


def resolve_path(setting: str) -> Path | None:
    if setting == "off":
        return None
    return default_path() if setting in ("", "auto") else Path(setting)


def cache_key(task, prepared, device_name: str, graphs: bool) -> str:
    import torch
    import triton

    parts = {
        "task": task.id,
        "source": hashlib.sha256(task.source.encode()).hexdigest()[:16],
        "overrides": {k: repr(v) for k, v in sorted(prepared.overrides.items())},
        "dtype": str(prepared.spec.dtype),
        "device": device_name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "graphs": graphs,
        "method": METHOD,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            return data
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        pass
    log.warning("reference timing cache %s is unreadable; setting it aside", path)
    path.replace(path.with_suffix(".corrupt"))
    return {}


def cached_time(task, prepared, options, path: Path | None) -> dict | None:
    """The cached summary, or None: no GPU work, so it can be looked up before the
    timing phase has the GPU alone."""
    import torch

    if path is None:
        return None
    key = cache_key(task, prepared, torch.cuda.get_device_name(), options.graphs)
    with _LOCK:
        hit = _load(path).get(key)
    return hit if isinstance(hit, dict) and hit.get("mean", 0) > 0 else None


def reference_time(task, prepared, options, path: Path | None) -> tuple[dict, bool]:
    """The reference's timing summary for this input set, and whether it came from the
    cache. Measured (and stored) on a miss; call it while this GPU runs nothing else."""
    import torch

    key = cache_key(task, prepared, torch.cuda.get_device_name(), options.graphs)
    with _LOCK:
        data = _load(path) if path is not None else {}
        hit = data.get(key)
        if isinstance(hit, dict) and hit.get("mean", 0) > 0:
            return hit, True
        stats = _measure(task, prepared, options)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            data[key] = {**stats, "task": task.id}
            atomic_write_json(path, data)
    return stats, False


def reference_model(task, prepared, device: str):
    """The reference `Model` with the set's parameters, on `device`. Built under the
    trusted side's lock: the build draws from torch's global generator, which the
    threads preparing input sets seed (the parameters are then loaded from the set, but
    an unlocked build here would move another thread's seeded draws)."""
    import torch

    with TRUSTED_LOCK:
        module = build_module(task.source, prepared.overrides, task.origin)
        torch.manual_seed(prepared.spec.param_seed)
        model = module.Model(*prepared.init_inputs)
    model.load_state_dict(prepared.state_dict)
    if prepared.spec.dtype is not None:
        model = model.to(prepared.spec.dtype)
    return model.to(device)


BIG_BYTES = 256 << 20  # inputs this large leave this process's CUDA cache emptied after


def _measure(task, prepared, options) -> dict:
    """The reference's device-time summary, with its time with the launch inside under
    "launch". No output is kept past its call, and after a large problem this process's
    CUDA cache goes back to the device: the candidate's worker checks its outputs on the
    same GPU next."""
    import torch

    global _TIMER
    if _TIMER is None:
        _TIMER = Timer()
    model = reference_model(task, prepared, "cuda")
    inputs = to_device(prepared.inputs, "cuda")
    try:
        with torch.no_grad():
            m = _TIMER.measure({"ref": lambda: model(*inputs)}, options, watch=(), keep=())
    finally:
        model = inputs = None  # noqa: F841 - freed before the cache is emptied
        if data_bytes(prepared.inputs) >= BIG_BYTES:
            torch.cuda.empty_cache()
    stats = summarize(m["series"]["ref"]["times_ms"])
    launch = (m.get("launch") or {}).get("series", {}).get("ref")
    return {**stats, **({"launch": summarize(launch["times_ms"])} if launch else {})}
