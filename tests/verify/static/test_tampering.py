"""Static checks, tampering with the harness: introspection, monkeypatching, try/except
around launches, the stolen reference, timers, side streams and lazy outputs.

Each snippet is a small candidate (a real kernel, a `ModelNew`) with the cheat dropped
into one place; the comment above each group gives its docs/hacks.md category.
"""

from __future__ import annotations

import pytest
from static_cases import FAMILIES, candidate, flags

from tritonrl.verify.static import static_check

# (id, expected flag, candidate source)
HOSTILE: list[tuple[str, str, str]] = [
    # 4/13: introspection
    (
        "sys-modules",
        "introspection",
        candidate('m = sys.modules["__main__"]', prelude="import sys"),
    ),
    (
        "sys-modules-alias",
        "introspection",
        candidate("m = mods", prelude="import sys as s\nmods = s.modules"),
    ),
    ("gc", "introspection", candidate("objs = gc.get_objects()", prelude="import gc")),
    ("inspect", "introspection", candidate("f = inspect.currentframe()", prelude="import inspect")),
    ("getframe", "introspection", candidate("f = sys._getframe(1)", prelude="import sys")),
    ("f-back", "introspection", candidate("g = frame.f_back.f_globals", init="frame = None")),
    ("globals-attr", "introspection", candidate("g = launch.__globals__")),
    ("builtins-name", "introspection", candidate('e = __builtins__["eval"]')),
    ("subclasses", "introspection", candidate("s = ().__class__.__bases__[0].__subclasses__()")),
    ("code-attr", "introspection", candidate("c = launch.__code__")),
    ("globals", "introspection", candidate('m = globals()["torch"]')),
    ("vars", "introspection", candidate('m = vars(torch)["matmul"]')),
    ("dict-attr", "introspection", candidate('m = torch.__dict__["matmul"]')),
    ("torch-C", "introspection", candidate("torch._C._set_grad_enabled(False)")),
    (
        "dispatch-off",
        "introspection",
        candidate("", prelude="from torch.utils._python_dispatch import _disable_current_modes"),
    ),
    ("rebind-name", "introspection", candidate("", prelude='__name__ = "__main__"')),
    # 12/13: monkeypatching
    ("patch-event", "monkeypatch", candidate("", prelude="torch.cuda.Event = object")),
    (
        "patch-perf-counter",
        "monkeypatch",
        candidate("", prelude="import time\ntime.perf_counter = lambda: 0.0"),
    ),
    (
        "patch-allclose",
        "monkeypatch",
        candidate("", prelude="torch.allclose = lambda *a, **k: True"),
    ),
    ("patch-eq", "monkeypatch", candidate("", prelude="torch.Tensor.__eq__ = lambda a, b: True")),
    (
        "patch-eq-alias",
        "monkeypatch",
        candidate("", prelude="T = torch.Tensor\nT.__eq__ = lambda a, b: True"),
    ),
    (
        "patch-do-bench",
        "monkeypatch",
        candidate("", prelude="triton.testing.do_bench = lambda f: 0.001"),
    ),
    ("patch-sync", "monkeypatch", candidate("torch.cuda.synchronize = lambda: None")),
    ("setattr", "monkeypatch", candidate('setattr(torch, "allclose", lambda *a: True)')),
    ("delattr", "monkeypatch", candidate('delattr(torch.Tensor, "__eq__")')),
    ("object-setattr", "monkeypatch", candidate('object.__setattr__(self, "x", 1)')),
    (
        "environ",
        "monkeypatch",
        candidate('os.environ["TRITON_INTERPRET"] = "0"', prelude="import os"),
    ),
    ("environ-update", "monkeypatch", candidate('os.environ.update(A="1")', prelude="import os")),
    (
        "builtins-print",
        "monkeypatch",
        candidate("", prelude="import builtins\nbuiltins.print = len"),
    ),
    ("nested-patch", "monkeypatch", candidate("torch.testing.assert_close = print")),
    # 3: try/except fallback
    (
        "try-launch",
        "try_except_launch",
        candidate("try:\n    launch(x, y)\nexcept Exception:\n    y = x.clone()"),
    ),
    (
        "try-direct",
        "try_except_launch",
        candidate(
            "try:\n    copy_kernel[(1,)](x, y, x.numel(), BLOCK=256)\nexcept Exception:\n    pass"
        ),
    ),
    (
        "try-in-helper",
        "try_except_launch",
        candidate(
            "y = safe(x)",
            prelude="""
            def safe(x):
                y = torch.empty_like(x)
                try:
                    launch(x, y)
                except RuntimeError:
                    return x
                return y
            """,
        ),
    ),
    (
        "suppress-cm",
        "try_except_launch",
        candidate(
            "with Quiet():\n    launch(x, y)",
            prelude="""
            class Quiet:
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    return True
            """,
        ),
    ),
    # 4: stolen reference
    ("model-call", "reference_access", candidate("y = Model()(x, w)")),
    (
        "model-subclass",
        "reference_access",
        candidate("", prelude="class Model(nn.Module):\n    pass\n\nclass M2(Model):\n    pass"),
    ),
    ("from-reference", "reference_access", candidate("", prelude="from reference import Model")),
    ("import-harness", "reference_access", candidate("", prelude="import tritonrl")),
    ("relative", "reference_access", candidate("", prelude="from . import ref")),
    (
        "attr-model",
        "reference_access",
        candidate('y = sys.modules["__main__"].Model', prelude="import sys"),
    ),
    (
        "getattr-model",
        "reference_access",
        candidate('m = getattr(mod, "Model")', init="mod = None"),
    ),
    ("numpy", "reference_access", candidate("", prelude="import numpy as np")),
    ("unknown-module", "reference_access", candidate("", prelude="import scipy")),
    # 12: timing
    ("perf-counter", "timing_tamper", candidate("t = time.perf_counter()", prelude="import time")),
    (
        "from-time",
        "timing_tamper",
        candidate("t = perf_counter()", prelude="from time import perf_counter"),
    ),
    ("event", "timing_tamper", candidate("e = torch.cuda.Event(enable_timing=True)")),
    ("do-bench", "timing_tamper", candidate("", prelude="from triton.testing import do_bench")),
    ("timeit", "timing_tamper", candidate("", prelude="import timeit")),
    # 9: side streams
    ("stream", "side_stream", candidate("s = torch.cuda.Stream()")),
    (
        "stream-ctx",
        "side_stream",
        candidate("with torch.cuda.stream(s):\n    launch(x, y)", init="s = None"),
    ),
    ("graph", "side_stream", candidate("g = torch.cuda.CUDAGraph()")),
    # 11: lazy outputs
    (
        "tensor-subclass",
        "output_type",
        candidate("", prelude="class Lazy(torch.Tensor):\n    pass"),
    ),
    (
        "torch-function",
        "output_type",
        candidate("", prelude="class L:\n    def __torch_function__(self, *a):\n        pass"),
    ),
    ("as-subclass", "output_type", candidate("y = y.as_subclass(torch.Tensor)")),
]


@pytest.mark.parametrize(
    ("flag", "source"), [(f, s) for _, f, s in HOSTILE], ids=[i for i, _, _ in HOSTILE]
)
def test_hostile_snippet_is_flagged(flag: str, source: str) -> None:
    found = flags(source)
    assert flag in found, f"expected {flag}, got {found}"


def test_every_flag_of_the_family_has_a_hostile_snippet() -> None:
    assert {flag for _, flag, _ in HOSTILE} == FAMILIES["tampering"]


def test_precision_flags_are_not_monkeypatching() -> None:
    src = candidate("", prelude="torch.backends.cuda.matmul.allow_tf32 = True")
    assert static_check(src) == []
