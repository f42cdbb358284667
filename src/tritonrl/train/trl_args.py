"""TRL's trainer config classes built from our fields, whatever TRL version is installed.

    args = trl_config(GRPOConfig, {"learning_rate": 1e-6, ...}, checkpointing=True)

The SFT, GRPO/RLOO and weighted-SFT trainers each fill a TRL config class (`SFTConfig`,
`GRPOConfig`, `RLOOConfig`) from their section of our config. Fields move between TRL
and transformers versions: gradient checkpointing is `activation_checkpointing` in newer
ones (`gradient_checkpointing` before), and a field the installed class lacks is left
out, with a warning naming it and its value, so a setting that was not applied is seen.

What it does NOT do: it does not check values (TRL does) or map renamed fields other
than the checkpointing flag.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

log = logging.getLogger(__name__)


def trl_config(cls: type, wanted: dict[str, Any], checkpointing: bool | None = None):
    """`cls(**wanted)` with the fields `cls` has; each one it lacks is logged (WARNING)
    and left out. `checkpointing` (when not None) sets `activation_checkpointing` or,
    where the class has no such field, `gradient_checkpointing`."""
    names = {f.name for f in dataclasses.fields(cls)}
    if checkpointing is not None:
        ckpt = "activation_checkpointing" if "activation_checkpointing" in names else (
            "gradient_checkpointing")  # fmt: skip
        wanted = {ckpt: checkpointing, **wanted}
    for name in sorted(set(wanted) - names):
        log.warning("the installed TRL's %s has no field %s: %s=%r left out",
                    cls.__name__, name, name, wanted[name])  # fmt: skip
    return cls(**{k: v for k, v in wanted.items() if k in names})
