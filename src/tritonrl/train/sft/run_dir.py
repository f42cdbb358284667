"""The SFT stage's dealings with its run: which config it may run under, where its base is.

    run, extend = open_run("runs/demo", config)   # same config, or a raised budget

`resolve_base` makes a local base model's path absolute before anything records it.
`open_run` accepts a run created with the same resolved config, and one whose only
change is a raised training budget (`sft.max_steps` above the steps done, or more
`sft.epochs`): training longer is continuing from the last checkpoint, so `extend` says
to reopen a done stage. Any other change is refused with a ValueError listing it.

A moved run's adapters are pointed at its base by `tritonrl.models.adapters`.

What it does NOT do: it does not train (`tritonrl.train.sft` does) or load a model
(`tritonrl.models`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from tritonrl.config import STORE_KEYS, TINY, Config
from tritonrl.config_loader import config_to_dict, diff_configs
from tritonrl.runs import Run, RunError

log = logging.getLogger(__name__)

STAGE = "sft"
BUDGET = ("max_steps", "epochs")  # sft.* fields that may grow on an existing run


def resolve_base(config: Config) -> Config:
    """`config` with a local base model directory made absolute (as transformers reads
    it from where the command runs), so the manifest and the adapters record the model
    that was used, whatever directory a later command runs in."""
    name = config.model.name_or_path
    path = Path(name).expanduser()
    if name == TINY or not path.exists() or str(path.resolve()) == name:
        return config
    model = dataclasses.replace(config.model, name_or_path=str(path.resolve()))
    return dataclasses.replace(config, model=model)


def _without_budget(config: dict) -> dict:
    sft = {k: v for k, v in (config.get(STAGE) or {}).items() if k not in BUDGET}
    return {**config, STAGE: sft}


def budget_raised(old: dict, new: dict, steps_done: int) -> bool:
    """Whether `new` differs from `old` only by a larger budget: `sft.max_steps` above
    both its old value and the steps done, and/or more `sft.epochs`, nothing lower."""
    if diff_configs(_without_budget(old), _without_budget(new)):
        return False
    a, b = old.get(STAGE) or {}, new.get(STAGE) or {}
    steps_ok = b.get("max_steps") == a.get("max_steps") or (
        b.get("max_steps", -1) > max(a.get("max_steps", -1), steps_done)
    )
    epochs_ok = b.get("epochs", 0) >= a.get("epochs", 0)
    return steps_ok and epochs_ok and a != b


def _trained(config: dict) -> dict:
    """`config` without the `run` keys that do not change what is trained (STORE_KEYS)."""
    run = {k: v for k, v in (config.get("run") or {}).items() if k not in STORE_KEYS}
    return {**config, "run": run}


def open_run(run_dir: str | Path, config: Config) -> tuple[Run, bool]:
    """(the run in `run_dir`, whether its done SFT stage is to be extended). A new run is
    created with `config`; an existing one must have the same resolved config, or differ
    only by a raised budget (else a ValueError lists what differs)."""
    resolved = config_to_dict(config)
    try:
        run = Run.open(run_dir)
    except RunError:
        if (Path(run_dir) / "manifest.json").exists():
            raise
        return Run.create(run_dir, resolved), False
    if not run.config:  # created by a stage without a config (prepare): adopt ours
        run.adopt_config(resolved)
        return run, False
    changes = diff_configs(_trained(run.config), _trained(resolved))
    if not changes:
        return run, False
    steps_done = run.stages.get(STAGE, {}).get("step", 0)
    if not budget_raised(run.config, resolved, steps_done):
        raise ValueError(
            f"run {run.path} was created with a different config; differing: "
            + "; ".join(changes)
            + ". Use the same config and overrides (only a larger sft.max_steps or "
            "sft.epochs may continue a run), or a new run directory."
        )
    if run.status(STAGE) == "done" and not run.has_artifact(STAGE, "checkpoint"):
        raise ValueError(
            f"run {run.path}: stage sft is done but records no checkpoint to continue from; "
            "train longer in a new run directory"
        )
    log.info("raising the SFT budget of %s: %s", run.path, "; ".join(changes))
    return run, run.status(STAGE) == "done"
