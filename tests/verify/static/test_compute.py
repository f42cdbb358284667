"""Static checks, the library fallback: torch compute and nn layers where the inputs are
visible (aliases, getattr, stored references, helpers and lambdas included), and the
`partial` policy that allows named ops.

Each snippet is a small candidate (a real kernel, a `ModelNew`) with the cheat dropped
into one place; the comment above each group gives its docs/hacks.md category.
"""

from __future__ import annotations

import pytest
from static_cases import FAMILIES, candidate, flags

# (id, expected flag, candidate source)
HOSTILE: list[tuple[str, str, str]] = [
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
]


@pytest.mark.parametrize(
    ("flag", "source"), [(f, s) for _, f, s in HOSTILE], ids=[i for i, _, _ in HOSTILE]
)
def test_hostile_snippet_is_flagged(flag: str, source: str) -> None:
    found = flags(source)
    assert flag in found, f"expected {flag}, got {found}"


def test_every_flag_of_the_family_has_a_hostile_snippet() -> None:
    assert {flag for _, flag, _ in HOSTILE} == FAMILIES["compute"]


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
