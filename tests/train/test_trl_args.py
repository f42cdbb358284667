"""TRL config classes built from our fields (`tritonrl.train.trl_args`): a field the
installed class lacks is left out with a warning naming it, and gradient checkpointing
goes by whichever name the class has."""

import dataclasses
import logging

from tritonrl.train.trl_args import trl_config


@dataclasses.dataclass
class OldArgs:
    learning_rate: float = 0.0
    gradient_checkpointing: bool = False


@dataclasses.dataclass
class NewArgs:
    learning_rate: float = 0.0
    activation_checkpointing: bool = False
    min_p: float | None = 0.5


def test_a_field_the_class_lacks_is_dropped_and_said(caplog):
    with caplog.at_level(logging.WARNING, logger="tritonrl.train.trl_args"):
        args = trl_config(OldArgs, {"learning_rate": 1e-5, "min_p": None, "top_k": 0})
    assert args == OldArgs(learning_rate=1e-5)
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "the installed TRL's OldArgs has no field min_p: min_p=None left out",
        "the installed TRL's OldArgs has no field top_k: top_k=0 left out",
    ]


def test_every_field_the_class_has_is_passed_without_a_word(caplog):
    with caplog.at_level(logging.WARNING, logger="tritonrl.train.trl_args"):
        args = trl_config(NewArgs, {"learning_rate": 1e-5, "min_p": None})
    assert args == NewArgs(learning_rate=1e-5, min_p=None) and not caplog.records


def test_checkpointing_goes_by_the_name_the_class_has():
    assert trl_config(OldArgs, {}, checkpointing=True).gradient_checkpointing
    assert trl_config(NewArgs, {}, checkpointing=True).activation_checkpointing
    assert not trl_config(NewArgs, {}).activation_checkpointing
