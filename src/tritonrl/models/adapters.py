"""A moved run's LoRA adapters pointed at its in-run base model where it is now.

    relocate_adapters(run)      # every adapter_config.json of the sft stage, rewritten

PEFT writes the base model's absolute path into `adapter_config.json`, and for the tiny
model built inside the run that path dies when the run is copied elsewhere. The manifest
records the base relative to the run (`tiny_model/model`); `relocate_adapters` rewrites
every adapter's `base_model_name_or_path` to where that is now, so
`AutoPeftModelForCausalLM.from_pretrained(RUN/sft/final)` works after any tritonrl
command (`sft`, `rl`, `eval`, `load_sft_model`) has opened the moved run.

What it does NOT do: it does not rewrite a base outside the run (a hub id travels as it
is; a local directory must exist on the new machine too) or the trainer's pickled
`training_args.bin` (informational: neither loading nor resuming reads it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tritonrl.config import TINY
from tritonrl.runs import Run, atomic_write_json

log = logging.getLogger(__name__)

STAGE = "sft"  # the stage whose adapters these are


def base_model_path(run: Run, config: dict) -> str | None:
    """The base model's path where the run is now, when it lives inside the run (the
    tiny model); None for a hub id or a directory outside the run."""
    info = run.stages.get(STAGE, {}).get("info", {})
    name = info.get("base_model") or (config.get("model") or {}).get("name_or_path")
    if name != TINY or not run.has_artifact("tiny_model", "model"):
        return None
    return str(run.artifact("tiny_model", "model"))


def adapter_configs(run: Run) -> list[Path]:
    """Every adapter_config.json the SFT stage wrote: the final adapter, the checkpoints."""
    stage_dir = run.path / STAGE
    found = sorted(stage_dir.glob("checkpoints/checkpoint-*/adapter_config.json"))
    final = stage_dir / "final" / "adapter_config.json"
    return found + [final] if final.is_file() else found


def relocate_adapters(run: Run) -> int:
    """Point the adapters of `run` at its in-run base model where it is now; returns how
    many were rewritten. A read-only copy is left as it is (loading through the manifest
    does not need the rewrite)."""
    base = base_model_path(run, run.config)
    if base is None:
        return 0
    rewritten = 0
    for path in adapter_configs(run):
        data = json.loads(path.read_text())
        if data.get("base_model_name_or_path") == base:
            continue
        data["base_model_name_or_path"] = base
        try:
            atomic_write_json(path, data)
        except OSError as e:
            log.warning("cannot point %s at the moved base model: %s", path, e)
            continue
        rewritten += 1
    if rewritten:
        log.info("run %s moved: %d adapter(s) now point at %s", run.path, rewritten, base)
    return rewritten
