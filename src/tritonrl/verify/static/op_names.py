"""Which names `verify.allowed_torch_ops` may hold: those the checks can ever match.

    check_allowed_ops(["matmul", "F.relu", "aten::mm"])   # fine
    check_allowed_ops(["reluu"])                           # ValueError naming 'reluu'

Under the partial policy the static checks drop a compute finding when its op, in
`tritonrl.config.op_key`'s form (the "torch.", "torch.nn.functional.", "nn.functional.", "F.",
"aten::", "aten." prefixes gone, lower case), is allowed. The ops they name are torch
functions (`torch.relu`, `F.conv2d`, `torch.linalg.norm`: the last name), tensor methods
(`x.relu()`), nn layers (`nn.Conv2d`: "conv2d"), operators on tensors (`a @ b`:
"matmul", `a + b`: "add", `a < b`: "lt") and builtins on tensors (`sum(x)`); the
run-time op audit (`verify.inside.guards.ops`) takes aten names as well. `known_op` says
whether a name is one of those; anything else (a typo such as "reluu", `nn.Conv2d` with
its module, a made-up name) could never allow anything, and a prompt would promise it.

What it does NOT do: check that an op is a sensible thing to allow; torch is imported on
the first call (the names are read from its namespaces), not at import.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from tritonrl.config import OP_NAME_HINT, op_key
from tritonrl.verify.static.names import torch_layer_class
from tritonrl.verify.static.rules import (
    BINOP_NAMES,
    BUILTIN_COMPUTE,
    CMP_NAMES,
    COMPUTE_METHODS,
    DUNDER_COMPUTE,
    HOST_ROUNDTRIP,
)

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


@functools.cache
def _torch_names() -> frozenset[str]:
    import torch
    import torch.nn.functional as F

    names = set(BINOP_NAMES.values()) | set(CMP_NAMES.values()) | BUILTIN_COMPUTE
    names |= COMPUTE_METHODS | HOST_ROUNDTRIP | {d.strip("_") for d in DUNDER_COMPUTE}
    for space in (torch, F, torch.Tensor, torch.linalg, torch.special, torch.fft):
        for name in dir(space):
            if not name.startswith("__"):
                names |= {name.lower(), name.rstrip("_").lower()}  # relu_ is relu in place
    for name, obj in vars(torch.nn).items():
        if torch_layer_class(obj):
            names.add(name.lower())
    return frozenset(names)


def known_op(name: str) -> bool:
    """Whether `name` (as `verify.allowed_torch_ops` gives it) is an op the static checks
    or the run-time op audit can match."""
    key = op_key(name)
    if not _IDENTIFIER.fullmatch(key):
        return False
    if key in _torch_names():
        return True
    import torch

    try:  # an aten op the run-time audit names ("_softmax", "convolution")
        getattr(torch.ops.aten, key)
    except (AttributeError, RuntimeError):
        return False
    return True


def check_allowed_ops(names: Iterable[str], where: str = "verify.allowed_torch_ops") -> None:
    """A ValueError naming the first entry of `names` that is no op (`known_op`), with
    the accepted form."""
    for name in names:
        if not known_op(name):
            raise ValueError(f"{where}: {name!r} is no torch op the checker knows; {OP_NAME_HINT}")
