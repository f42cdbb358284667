"""Difficulty labels for KernelBench-format tasks: 1 single op, 2 fusion, 3 architecture.

`label_level` reads the reference's `class Model` with `ast` (nothing is executed) and
counts the compute ops its `forward` reaches: torch / `F.` calls, tensor methods
(`x.relu()`, `x.sum()`), arithmetic on tensors (`+`, `*`, `@`, unary `-`), and calls of the
`nn` layers built in `__init__` (a `Sequential` counts its members; a submodule whose class
is defined in the same source is analysed in turn). Arithmetic on plain numbers
(`1.0 / math.sqrt(d)`, `x.size(0) * 2`) and data movement (`view`, `permute`, `cat`) are
not ops, and a normalisation written out (`x / torch.sqrt(torch.mean(x**2, ...) + eps)`,
a softmax) counts as one op, `normalize`. The label:

* 3 (architecture): recurrent / transformer / attention modules, loops over layers, a
  `Sequential` / `ModuleList` of several layers (or one built in a loop), a residual
  connection around two or more weight layers, an attention pattern (softmax between
  matmuls), two or more submodules of locally defined classes, three or more weight
  layers (linear, conv, embedding, matmul), or many ops around weight layers (`MANY_OPS`
  with one, six with two);
* 2 (fusion): two or more compute ops (however long an element-wise formula is);
* 1: one op, or none found. Odd input (a syntax error, no `Model`) is labelled 1, logged.

`label_level_llm` asks an OpenAI-compatible chat endpoint instead (urllib, no extra
dependency). Neither is authoritative: a task's `levelN/` folder wins where it has one
(see `tritonrl.tasks.loaders`).

The package: `ops` (what counts as a compute op, `OpSummary`, the level rules), `modules`
(imports, local classes and what `__init__` registers), `forward` and `patterns` (the walk
over `forward` and the patterns counted as one op), `llm` (the LLM labeller). This module
holds the entry points.
"""

from __future__ import annotations

import ast
import logging

from tritonrl.astlock import AST_LOCK
from tritonrl.tasks.difficulty.forward import class_summary
from tritonrl.tasks.difficulty.llm import LLM_PROMPT, LabelError, label_level_llm, parse_level
from tritonrl.tasks.difficulty.modules import Module, methods
from tritonrl.tasks.difficulty.ops import MANY_OPS, OpSummary, level_of

log = logging.getLogger(__name__)

__all__ = [
    "LLM_PROMPT",
    "MANY_OPS",
    "LabelError",
    "OpSummary",
    "analyze",
    "describe_ops",
    "label_level",
    "label_level_llm",
    "level_of",
    "parse_level",
]


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    """`class Model`, else the last class with a `forward`."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for cls in classes:
        if cls.name == "Model":
            return cls
    with_forward = [c for c in classes if "forward" in methods(c)]
    return with_forward[-1] if with_forward else None


def analyze(source: str) -> OpSummary:
    """The `OpSummary` of a reference's `Model.forward`. Raises on unparseable source
    or a source with no model class (`label_level` turns that into level 1)."""
    with AST_LOCK:
        tree = ast.parse(source)
    cls = _model_class(tree)
    if cls is None or "forward" not in methods(cls):
        raise ValueError("no class Model with a forward method")
    return class_summary(Module(tree), cls)


def describe_ops(source: str) -> dict[str, int]:
    """Compute ops of `Model.forward` by kind, e.g. {"linear": 1, "relu": 1}."""
    return dict(analyze(source).ops)


def label_level(source: str) -> int:
    """1 single op, 2 fusion, 3 architecture (see the module docstring). Never raises."""
    try:
        summary = analyze(source)
    except (SyntaxError, ValueError, RecursionError) as e:
        log.warning("difficulty: cannot analyse the source (%s); labelling it level 1", e)
        return 1
    except Exception:  # a heuristic must not take a loader down
        log.warning("difficulty: analysis failed; labelling level 1", exc_info=True)
        return 1
    level = level_of(summary)
    log.debug("difficulty: %s -> level %d", dict(summary.ops), level)
    return level
