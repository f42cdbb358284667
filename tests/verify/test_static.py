"""Static checks: every flag fires on hostile code (spelled-around variants included) and
honest kernels, the builtin solutions among them, give no findings at all.

Each hostile snippet is a small candidate in the KernelBench shape (a real kernel, a
`ModelNew`) with the cheat dropped into one place; the comment above each group gives its
docs/hacks.md category.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tritonrl.verify.static import FLAGS, Finding, static_check

SOLUTIONS = Path(__file__).resolve().parents[2] / "src/tritonrl/tasks/builtin/solutions"

HEADER = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x, y):
    copy_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
"""


def candidate(
    forward: str,
    init: str = "",
    prelude: str = "",
    epilogue: str = "",
    members: str = "",
    bases: str = "nn.Module",
) -> str:
    """A full candidate whose forward body is `forward` (a kernel runs first); `members`
    go into the class body, `prelude` before the class, `epilogue` after it."""
    init_body = textwrap.indent(textwrap.dedent(init), " " * 8) if init else ""
    body = textwrap.indent(textwrap.dedent(forward), " " * 8)
    extra = textwrap.indent(textwrap.dedent(members), " " * 4) + "\n" if members else ""
    return (
        HEADER
        + textwrap.dedent(prelude)
        + f"\n\nclass ModelNew({bases}):\n"
        + extra
        + "    def __init__(self, n=4, m=4):\n"
        + "        super().__init__()\n"
        + init_body
        + "\n    def forward(self, x, w):\n"
        + "        y = torch.empty_like(x)\n"
        + "        launch(x, y)\n"
        + body
        + "\n        return y\n"
        + textwrap.dedent(epilogue)
    )


def flags(source: str, **kw) -> set[str]:
    return {f.flag for f in static_check(source, **kw)}


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
    # native code
    ("ctypes", "ctypes", candidate("", prelude="import ctypes")),
    ("ctypes-from", "ctypes", candidate("", prelude="from ctypes import CDLL")),
    (
        "load-inline",
        "ctypes",
        candidate("", prelude="from torch.utils.cpp_extension import load_inline"),
    ),
    ("cffi", "ctypes", candidate("", prelude="import cffi")),
    ("triton-compile", "ctypes", candidate('k = triton.compile("k.ptx")')),
    # 23/24: processes
    ("subprocess", "subprocess", candidate('subprocess.run(["ls"])', prelude="import subprocess")),
    ("os-system", "subprocess", candidate('os.system("ls")', prelude="import os")),
    ("os-popen", "subprocess", candidate('os.popen("ls")', prelude="import os")),
    ("os-exec", "subprocess", candidate('os.execv("/bin/ls", [])', prelude="import os")),
    ("os-spawn", "subprocess", candidate('os.spawnl(0, "/bin/ls")', prelude="import os")),
    ("os-fork", "subprocess", candidate("pid = os.fork()", prelude="import os")),
    ("os-system-alias", "subprocess", candidate('s("ls")', prelude="from os import system as s")),
    ("os-getattr", "subprocess", candidate('getattr(os, "system")("ls")', prelude="import os")),
    ("pty", "subprocess", candidate("", prelude="import pty")),
    ("multiprocessing", "subprocess", candidate("", prelude="import multiprocessing as mp")),
    ("torch-mp", "subprocess", candidate("", prelude="import torch.multiprocessing")),
    ("pip", "subprocess", candidate("", prelude="import pip")),
    ("signal", "subprocess", candidate("", prelude="import signal")),
    # 10: threads
    (
        "thread",
        "threading",
        candidate(
            "threading.Thread(target=launch, args=(x, y)).start()", prelude="import threading"
        ),
    ),
    (
        "thread-from",
        "threading",
        candidate("Thread(target=print).start()", prelude="from threading import Thread"),
    ),
    ("_thread", "threading", candidate("", prelude="import _thread")),
    (
        "futures",
        "threading",
        candidate("", prelude="from concurrent.futures import ThreadPoolExecutor"),
    ),
    ("asyncio", "threading", candidate("", prelude="import asyncio")),
    ("jit-fork", "threading", candidate("fut = torch.jit.fork(launch, x, y)")),
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
    # 1: library fallback
    ("matmul", "torch_compute", candidate("y = torch.matmul(x, w)")),
    ("mm", "torch_compute", candidate("y = torch.mm(x, w)")),
    ("bmm", "torch_compute", candidate("y = torch.bmm(x, w)")),
    ("addmm", "torch_compute", candidate("y = torch.addmm(y, x, w)")),
    ("einsum", "torch_compute", candidate('y = torch.einsum("ij,jk->ik", x, w)')),
    ("relu", "torch_compute", candidate("y = torch.relu(x)")),
    ("softmax", "torch_compute", candidate("y = torch.softmax(x, -1)")),
    ("sum", "torch_compute", candidate("y = torch.sum(x)")),
    ("exp", "torch_compute", candidate("y = torch.exp(x)")),
    ("where", "torch_compute", candidate("y = torch.where(x > 0, x, w)")),
    ("cat", "torch_compute", candidate("y = torch.cat([x, w])")),
    ("method-sum", "torch_compute", candidate("y = x.sum(dim=1)")),
    ("method-relu", "torch_compute", candidate("y = x.relu()")),
    ("method-mm", "torch_compute", candidate("y = x.mm(w)")),
    ("method-inplace", "torch_compute", candidate("y.add_(x)")),
    ("method-on-result", "torch_compute", candidate("y = x.contiguous().exp()")),
    ("matmul-op", "torch_compute", candidate("y = x @ w")),
    ("add-op", "torch_compute", candidate("y = x + w")),
    ("mul-scalar", "torch_compute", candidate("y = x * 2.0")),
    ("neg-op", "torch_compute", candidate("y = -x")),
    ("compare-op", "torch_compute", candidate("y = (x > 0).float()")),
    ("augassign", "torch_compute", candidate("y += x")),
    (
        "param-op",
        "torch_compute",
        candidate("y = x * self.scale", init="self.scale = nn.Parameter(torch.ones(1))"),
    ),
    (
        "weight-op",
        "torch_compute",
        candidate("y = y + self.lin.bias", init="self.lin = nn.Linear(n, m)"),
    ),
    ("unbound-method", "torch_compute", candidate("y = torch.Tensor.add(x, w)")),
    ("dunder-method", "torch_compute", candidate("y = x.__matmul__(w)")),
    ("builtin-sum", "torch_compute", candidate("y = sum(x)")),
    ("numpy-roundtrip", "torch_compute", candidate("a = x.numpy()")),
    ("tolist", "torch_compute", candidate("a = x.tolist()")),
    ("from-numpy", "torch_compute", candidate("y = torch.from_numpy(a)")),
    ("aten-op", "torch_compute", candidate("y = torch.ops.aten.mm(x, w)")),
    (
        "alias-from",
        "torch_compute",
        candidate("y = mm(x, w)", prelude="from torch import matmul as mm"),
    ),
    ("alias-module", "torch_compute", candidate("y = T.mm(x, w)", prelude="import torch as T")),
    ("alias-local", "torch_compute", candidate("y = f(x, w)", prelude="f = torch.matmul")),
    ("alias-self", "torch_compute", candidate("y = self.f(x, w)", init="self.f = torch.matmul")),
    ("star", "torch_compute", candidate("y = matmul(x, w)", prelude="from torch import *")),
    ("getattr-literal", "torch_compute", candidate('y = getattr(torch, "matmul")(x, w)')),
    ("class-attr", "torch_compute", candidate("y = self.op(x, w)", members="op = torch.matmul")),
    (
        "default-arg",
        "torch_compute",
        candidate(
            "y = self.helper(x, w)",
            members="def helper(self, a, b, op=torch.matmul):\n    return op(a, b)",
        ),
    ),
    ("stored-in-list", "torch_compute", candidate("y = OPS[0](x)", prelude="OPS = [torch.relu]")),
    ("map-ref", "torch_compute", candidate("ys = list(map(torch.relu, [x, w]))")),
    (
        "helper",
        "torch_compute",
        candidate("y = helper(x, w)", prelude="def helper(a, b):\n    return torch.mm(a, b)"),
    ),
    (
        "helper-class",
        "torch_compute",
        candidate(
            "y = Ops().run(x)",
            prelude="class Ops:\n    def run(self, a):\n        return a.exp()",
        ),
    ),
    (
        "lambda-in-init",
        "torch_compute",
        candidate("y = self.act(x)", init="self.act = lambda t: torch.tanh(t)"),
    ),
    (
        "heuristics-lambda",
        "torch_compute",
        candidate(
            "",
            prelude="""
            @triton.heuristics({"B": lambda a: (a["y"].copy_(a["x"].mm(a["w"])), 64)[1]})
            @triton.jit
            def k2(x, y, w, B: tl.constexpr):
                pass
            """,
        ),
    ),
    (
        "torch-in-jit",
        "torch_compute",
        candidate(
            "",
            prelude="""
            STASH = {}

            @triton.jit
            def k3(x_ptr):
                torch.matmul(STASH["x"], STASH["w"], out=STASH["y"])
            """,
        ),
    ),
    ("partial-not-allowed", "torch_compute", candidate("y = torch.relu(x @ w)")),
    # nn layers
    (
        "layer-call",
        "nn_compute_layer",
        candidate("y = self.lin(x)", init="self.lin = nn.Linear(n, m)"),
    ),
    (
        "layer-forward",
        "nn_compute_layer",
        candidate("y = self.lin.forward(x)", init="self.lin = nn.Linear(n, m)"),
    ),
    (
        "layer-getattr",
        "nn_compute_layer",
        candidate('y = getattr(self, "lin")(x)', init="self.lin = nn.Linear(n, m)"),
    ),
    ("layer-inline", "nn_compute_layer", candidate("y = nn.Linear(4, 4)(x)")),
    (
        "layer-torch-nn",
        "nn_compute_layer",
        candidate("y = self.c(x)", init="self.c = torch.nn.Conv2d(n, m, 3)"),
    ),
    (
        "sequential",
        "nn_compute_layer",
        candidate("y = self.seq(x)", init="self.seq = nn.Sequential(nn.Linear(n, m), nn.ReLU())"),
    ),
    (
        "modulelist",
        "nn_compute_layer",
        candidate("y = self.layers[0](x)", init="self.layers = nn.ModuleList([nn.Linear(n, m)])"),
    ),
    (
        "layer-loop",
        "nn_compute_layer",
        candidate(
            "for act in self.acts:\n    y = act(y)", init="self.acts = nn.ModuleList([nn.ReLU()])"
        ),
    ),
    (
        "functional",
        "nn_compute_layer",
        candidate("y = F.relu(x)", prelude="import torch.nn.functional as F"),
    ),
    ("functional-full", "nn_compute_layer", candidate("y = torch.nn.functional.linear(x, w)")),
    (
        "functional-from",
        "nn_compute_layer",
        candidate("y = gelu(x)", prelude="from torch.nn.functional import gelu"),
    ),
    (
        "layer-method-ref",
        "nn_compute_layer",
        candidate("y = nn.Linear.forward(self.lin, x)", init="self.lin = nn.Linear(n, m)"),
    ),
    # 23: io
    ("open", "io", candidate('open("/tmp/x", "w").write("1")')),
    ("pathlib", "io", candidate('Path("x").write_text("1")', prelude="from pathlib import Path")),
    ("socket", "io", candidate("", prelude="import socket")),
    ("urllib", "io", candidate("", prelude="import urllib.request")),
    ("requests", "io", candidate("", prelude="import requests")),
    ("torch-save", "io", candidate('torch.save(x, "x.pt")')),
    ("shutil", "io", candidate("", prelude="import shutil")),
    ("os-remove", "io", candidate('os.remove("x")', prelude="import os")),
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
    # 14: early exit
    ("sys-exit", "forged_verdict", candidate("sys.exit(0)", prelude="import sys")),
    ("os-exit", "forged_verdict", candidate("os._exit(0)", prelude="import os")),
    ("exit", "forged_verdict", candidate("exit(0)")),
    ("raise-systemexit", "forged_verdict", candidate("raise SystemExit(0)")),
    ("atexit", "forged_verdict", candidate("", prelude="import atexit")),
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

NO_KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x)
"""


@pytest.mark.parametrize(
    ("flag", "source"), [(f, s) for _, f, s in HOSTILE], ids=[i for i, _, _ in HOSTILE]
)
def test_hostile_snippet_is_flagged(flag: str, source: str) -> None:
    found = flags(source)
    assert flag in found, f"expected {flag}, got {found}"


def test_every_flag_has_a_hostile_snippet() -> None:
    covered = {flag for _, flag, _ in HOSTILE} | {"no_triton_kernel", "syntax_error"}
    assert covered == set(FLAGS)


def test_no_triton_kernel() -> None:
    assert flags(NO_KERNEL) == {"no_triton_kernel"}


def test_syntax_error_is_reported_not_raised() -> None:
    assert static_check("def f(:\n") == [Finding("syntax_error", 1, "invalid syntax")]


def test_findings_carry_lines_and_details() -> None:
    src = candidate("y = torch.relu(x)")
    [finding] = static_check(src)
    assert finding.flag == "torch_compute"
    assert src.splitlines()[finding.line - 1].strip() == "y = torch.relu(x)"
    assert "torch.relu" in finding.detail


def test_partial_policy_allows_named_ops_only() -> None:
    src = candidate("y = torch.relu(x @ w)")
    assert (
        flags(src, policy="partial", allowed_torch_ops=frozenset({"matmul", "torch.relu"})) == set()
    )
    assert flags(src, policy="partial", allowed_torch_ops=frozenset({"matmul"})) == {
        "torch_compute"
    }
    layer = candidate("y = self.lin(x)", init="self.lin = nn.Linear(n, m)")
    assert flags(layer, policy="partial", allowed_torch_ops=frozenset({"linear"})) == set()
    # non-compute flags stay whatever the policy
    assert "torch_compile" in flags(candidate("f = torch.compile(launch)"), policy="partial")


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError):
        static_check("x = 1", policy="lenient")


# ----- honest code -------------------------------------------------------------------

HONEST_FULL = '''
"""Fused linear + bias + activation with autotuning; several launches and outputs."""
import math
import os
import time
from typing import Optional

import torch
import torch.nn as nn
import triton
import triton.language as tl

try:
    from triton.language.extra import libdevice
except ImportError:  # older triton
    libdevice = None

LOG2E = math.log2(math.e)


def _configs():
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": 32}, num_warps=4) for bm in (16, 32)]


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  EVEN_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :] * sxk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + kk[:, None] * swk,
                    mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, b)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc = acc + bias[None, :]
    acc = tl.exp2(acc * 1.4426950408889634) / (1.0 + tl.exp2(acc * 1.4426950408889634))
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _row_max(v):
    return tl.max(v, axis=0)


@triton.jit
def rowmax_kernel(y_ptr, out_ptr, idx_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(y_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    tl.store(out_ptr + row, _row_max(v))
    tl.store(idx_ptr + row, tl.argmax(v, axis=0))


def linear_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    assert x.is_contiguous() and x.dim() == 2
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    linear_kernel[grid](x, weight, bias, y, M, N, K, x.stride(0), x.stride(1),
                        weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
                        BLOCK_K=32)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float = 1.0):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.extra = nn.Parameter(torch.randn(out_features) * 0.02)
        nn.init.kaiming_uniform_(self.linear.weight, a=math.sqrt(5))
        self.register_buffer("offsets", torch.arange(out_features))
        self.scale = scale / math.sqrt(in_features)
        self.block = max(16, triton.next_power_of_2(out_features))

    def _rowmax(self, y: torch.Tensor):
        M, N = y.shape
        out = y.new_empty(M)
        idx = torch.empty(M, dtype=torch.int64, device=y.device)
        rowmax_kernel[(M,)](y, out, idx, N, y.stride(0), BLOCK=self.block)
        return out, idx

    def forward(self, x: torch.Tensor, dim: int = 1, eps: Optional[float] = None):
        orig_shape = x.shape
        x2 = x.reshape(-1, orig_shape[-1]).contiguous()
        x2 = x2.to(torch.float32)
        w, b = self.linear.weight, self.linear.bias
        w_t = w.t().contiguous().t()
        y = linear_act(x2, w_t, b.detach())
        m, idx = self._rowmax(y)
        n_rows = x2.shape[0] * dim
        half = n_rows // 2 + (orig_shape[0] - 1) % 2
        if y.dtype != x.dtype or x.numel() == 0 or eps is not None:
            pass
        y = y.view(*orig_shape[:-1], -1).to(x.dtype)
        return y, m.unsqueeze(-1).expand(-1, 2), idx[:half]


batch_size = 8
in_features = 32
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features).abs() + 1]


def get_init_inputs():
    return [in_features, out_features]


if __name__ == "__main__":
    model = ModelNew(*get_init_inputs())
    x = get_inputs()[0]
    start = time.perf_counter()
    out = model(x)[0]
    ref = torch.sigmoid(x @ model.linear.weight.t() + model.linear.bias)
    print(torch.allclose(out, ref), time.perf_counter() - start, os.getpid())
'''

HONEST_AUTOGRAD = '''
import torch
import torch.nn as nn
from triton import jit, cdiv
import triton.language as tl


@jit
def scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * s, mask=m)


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        y = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(cdiv(n, 128),)](x, y, n, s, BLOCK=128)
        ctx.save_for_backward(x)
        return y


def matmul(a, b):
    """A helper that happens to share a torch name; it launches a kernel."""
    return _Scale.apply(a, 2.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def softmax(self, x):
        return matmul(x, x)

    def forward(self, *args):
        x = args[0].contiguous().view(-1)
        with torch.no_grad():
            y = self.softmax(x)
        out = torch.zeros_like(x)
        out.copy_(y)
        out[:1] = y[:1]
        return out.view_as(args[0]).clone()
'''

HONEST_TRITON_JIT_CALL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _fill(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32) + 1.0, mask=offs < n)


fill = triton.jit(_fill)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty(x.shape[0], y.shape[1], device=x.device)
        outs = []
        for i in range(2):
            t = torch.empty_strided((4, 4), (4, 1), device=x.device)
            fill[(1,)](t, t.numel(), BLOCK=16)
            outs.append(t.permute(1, 0).flatten().unsqueeze(0).squeeze(0))
        fill[(triton.cdiv(out.numel(), 64),)](out, out.numel(), BLOCK=64)
        return out, outs[0].reshape(4, 4), x.new_zeros(3).float()
"""

HONEST = {"full": HONEST_FULL, "autograd": HONEST_AUTOGRAD, "jit-call": HONEST_TRITON_JIT_CALL}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_kernel_has_no_findings(name: str) -> None:
    assert static_check(HONEST[name]) == []


def _solutions() -> list[Path]:
    return sorted(SOLUTIONS.rglob("*.py"))


def test_builtin_solutions_exist() -> None:
    assert len(_solutions()) >= 2


@pytest.mark.parametrize("path", _solutions(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_builtin_solution_has_no_findings(path: Path) -> None:
    assert static_check(path.read_text(encoding="utf-8")) == []


def test_shape_arithmetic_is_not_compute() -> None:
    src = candidate(
        """
        M, K = x.shape
        N = w.shape[1]
        total = M * N + K
        blocks = triton.cdiv(total, 128) * 2 - 1
        stride = x.stride(0) * 4
        if x.numel() > 0 and x.dtype == torch.float32 and w is not None:
            half = -(M // 2)
        """
    )
    assert static_check(src) == []


def test_main_block_and_input_helpers_are_not_checked() -> None:
    src = candidate(
        "",
        epilogue="""

def get_inputs():
    return [torch.randn(4, 4).relu(), torch.rand(4, 4) * 2]


if __name__ == "__main__":
    import time
    t = time.perf_counter()
    print(torch.allclose(ModelNew()(*get_inputs()), torch.zeros(4)))
""",
    )
    assert static_check(src) == []


def test_precision_flags_are_not_monkeypatching() -> None:
    src = candidate("", prelude="torch.backends.cuda.matmul.allow_tf32 = True")
    assert static_check(src) == []


def test_init_may_use_torch() -> None:
    src = candidate(
        "",
        init="""
        self.w = nn.Parameter(torch.randn(n, m) / n ** 0.5)
        self.b = nn.Parameter(torch.zeros(m))
        nn.init.xavier_uniform_(self.w)
        self.lin = nn.Linear(n, m)
        self.norm = nn.LayerNorm(m)
        self.w_t = self.w.detach().t().contiguous()
        """,
    )
    assert static_check(src) == []


@pytest.mark.parametrize(
    "guard",
    ['if __name__ != "__main__":\n    {}', 'if __name__ == "__main__":\n    pass\nelse:\n    {}'],
)
def test_code_that_runs_on_import_is_checked(guard: str) -> None:
    src = candidate("", epilogue="\n" + guard.format("torch.allclose = print") + "\n")
    assert "monkeypatch" in flags(src)


LLM_STYLE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                   BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    row = tl.load(row_start_ptr + col_offsets, mask=col_offsets < n_cols, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    softmax_output = numerator / tl.sum(numerator, axis=0)
    tl.store(output_ptr + row_idx * output_row_stride + col_offsets, softmax_output,
             mask=col_offsets < n_cols)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    assert x.is_cuda or x.device.type == "cpu", "tensor must be on a device"
    if not x.is_contiguous():
        x = x.contiguous()
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 4 if BLOCK_SIZE < 2048 else 8
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols,
                              BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return y


class ModelNew(nn.Module):
    """Softmax over the last dimension with a Triton kernel."""

    BLOCK = 128

    def __init__(self, dim: int = -1):
        super(ModelNew, self).__init__()
        self.dim = dim

    @staticmethod
    def _flatten(x):
        return x.reshape(-1, x.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        scale = 1.0 / (x.shape[-1] ** 0.5) if x.ndim > 1 else 1.0
        out_shape = shape[:-1] + (shape[-1],)
        dtype = torch.float16 if x.dtype == torch.float16 else torch.float32
        y = triton_softmax(self._flatten(x).to(dtype))
        return y.view(out_shape)
'''


def test_llm_style_kernel_has_no_findings() -> None:
    assert static_check(LLM_STYLE) == []
