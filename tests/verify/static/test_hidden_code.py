"""Static checks, code the checker cannot read: the compiler as author (torch.compile,
Dynamo, TorchScript, spelled around) and hidden code (exec, eval, __import__, decoders,
computed getattr, pre-run hooks, torch.library).

Each snippet is a small candidate (a real kernel, a `ModelNew`) with the cheat dropped
into one place; the comment above each group gives its docs/hacks.md category.
"""

from __future__ import annotations

import pytest
from static_cases import FAMILIES, candidate, flags

# (id, expected flag, candidate source)
HOSTILE: list[tuple[str, str, str]] = [
    # 20: compiler as author
    ("compile", "torch_compile", candidate("y = torch.compile(lambda a: a)(x)")),
    (
        "compile-alias",
        "torch_compile",
        candidate("y = T.compile(launch)", prelude="import torch as T"),
    ),
    (
        "compile-from-import",
        "torch_compile",
        candidate("f = c(launch)", prelude="from torch import compile as c"),
    ),
    ("compile-getattr", "torch_compile", candidate('f = getattr(torch, "compile")(launch)')),
    ("compile-rebound", "torch_compile", candidate("f = cc(launch)", prelude="cc = torch.compile")),
    (
        "compile-star",
        "torch_compile",
        candidate("f = compile(launch)", prelude="from torch import *"),
    ),
    ("dynamo", "torch_compile", candidate("", prelude="import torch._dynamo")),
    ("inductor", "torch_compile", candidate("", prelude="from torch._inductor import config")),
    (
        "compile-decorator",
        "torch_compile",
        candidate("y = helper(x)", prelude="@torch.compile\ndef helper(a):\n    return a"),
    ),
    ("jit-script", "torch_compile", candidate("f = torch.jit.script(launch)")),
    ("module-compile", "torch_compile", candidate("self.compile()")),
    ("import-dunder", "torch_compile", candidate('f = __import__("torch").compile')),
    # 21: hidden code
    ("exec", "hidden_code", candidate('exec("y = x @ w")')),
    ("eval", "hidden_code", candidate('y = eval("x @ w")')),
    ("builtin-compile", "hidden_code", candidate('code = compile("x", "f", "eval")')),
    ("eval-alias", "hidden_code", candidate('y = e("x")', prelude="e = eval")),
    (
        "eval-builtins",
        "hidden_code",
        candidate('y = builtins.eval("x")', prelude="import builtins"),
    ),
    (
        "eval-getattr",
        "hidden_code",
        candidate('y = getattr(builtins, "eval")("x")', prelude="import builtins"),
    ),
    ("dunder-import", "hidden_code", candidate('m = __import__("o" + "s")')),
    (
        "importlib",
        "hidden_code",
        candidate('m = importlib.import_module("torch")', prelude="import importlib"),
    ),
    ("base64", "hidden_code", candidate('exec(base64.b64decode("eT14"))', prelude="import base64")),
    (
        "codecs",
        "hidden_code",
        candidate('s = codecs.decode("k", "rot13")', prelude="import codecs"),
    ),
    ("zlib", "hidden_code", candidate("", prelude="import zlib")),
    ("marshal", "hidden_code", candidate("", prelude="from marshal import loads")),
    ("pickle", "hidden_code", candidate("", prelude="import pickle")),
    ("getattr-computed", "hidden_code", candidate('f = getattr(torch, "mat" + "mul")(x, w)')),
    ("getattr-var", "hidden_code", candidate('name = "relu"\nf = getattr(torch, name)')),
    ("getattr-tensor", "hidden_code", candidate('op = "relu"\ny = getattr(x, op)()')),
    ("pre-run-hook", "hidden_code", candidate("copy_kernel.add_pre_run_hook(print)")),
    (
        "torch-library",
        "hidden_code",
        candidate("", prelude='lib = torch.library.Library("x", "DEF")'),
    ),
]


@pytest.mark.parametrize(
    ("flag", "source"), [(f, s) for _, f, s in HOSTILE], ids=[i for i, _, _ in HOSTILE]
)
def test_hostile_snippet_is_flagged(flag: str, source: str) -> None:
    found = flags(source)
    assert flag in found, f"expected {flag}, got {found}"


def test_every_flag_of_the_family_has_a_hostile_snippet() -> None:
    assert {flag for _, flag, _ in HOSTILE} == FAMILIES["hidden_code"]
