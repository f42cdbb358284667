"""The `Task`: one problem in the KernelBench format, and its static validation.

A reference file defines `class Model(nn.Module)`, `get_inputs()` and (optionally)
`get_init_inputs()`, with sizes as module-level integer constants. A candidate defines
`class ModelNew(nn.Module)` with the same init arguments and outputs.

Everything here reads source text with `ast`; nothing executes task or candidate code.
Running a task (with its sizes scaled) is `tritonrl.tasks.shapes`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tritonrl.astlock import AST_LOCK

# `<id>_<Name>.py`, the KernelBench file naming.
_FILE_NAME = re.compile(r"^(\d+)_(.+)\.py$")


class TaskLoadError(ValueError):
    """A task source that cannot be used; the message names the file and what is wrong."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class Task:
    """One problem: a reference `Model` and how to build its inputs.

    id: stable identifier, also usable as a source spec where the origin allows
        (`builtin:level1/1_ReLU`, `level2/12_Gemm_Bias_ReLU` inside a directory, a file stem).
    level: 1 single op, 2 fusion, 3 architecture (4 and up as KernelBench numbers them).
    name: human name (file name without id and extension).
    source: the reference source text.
    origin: where it came from (a path, `builtin`, `kernelbook:<uuid>`, `generated:<seed>`).
    problem_id: the number in `<id>_<Name>.py`, when there is one.
    solution: a reference Triton solution (`ModelNew`) the verifier accepts, when known.
    """

    id: str
    level: int
    name: str
    source: str
    origin: str
    problem_id: int | None = None
    solution: str | None = field(default=None, repr=False)

    def __post_init__(self):
        # Validate eagerly so that a Task object is always usable.
        validate_reference(self.source, self.origin)


def parse_file_name(file_name: str) -> tuple[int | None, str]:
    """`12_Gemm_ReLU.py` -> (12, "Gemm_ReLU"); other names -> (None, stem)."""
    m = _FILE_NAME.match(file_name)
    if m:
        return int(m.group(1)), m.group(2)
    stem = file_name[:-3] if file_name.endswith(".py") else file_name
    return None, stem


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    classes, functions = set(), set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(node.name)
        elif isinstance(node, ast.Assign):
            # `get_inputs = make_inputs` style aliases count as definitions.
            for t in node.targets:
                if isinstance(t, ast.Name):
                    functions.add(t.id)
    return classes, functions


def parse_source(source: str, where: str) -> ast.Module:
    """Parse task or candidate source; a syntax error becomes a `TaskLoadError`."""
    try:
        with AST_LOCK:
            return ast.parse(source, filename=where)
    except SyntaxError as e:
        raise TaskLoadError(where, f"syntax error at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # e.g. null bytes in the source
        raise TaskLoadError(where, f"cannot parse: {e}") from None


def validate_reference(source: str, where: str) -> ast.Module:
    """Check that `source` is a KernelBench reference; return its AST.

    Raises `TaskLoadError` naming `where` and every missing piece.
    """
    tree = parse_source(source, where)
    classes, functions = _top_level_names(tree)
    missing = []
    if "Model" not in classes:
        missing.append("class Model")
    if "get_inputs" not in functions:
        missing.append("get_inputs()")
    if missing:
        raise TaskLoadError(
            where,
            "not a KernelBench-format reference: missing "
            + " and ".join(missing)
            + " (a task defines class Model(nn.Module), get_inputs() and get_init_inputs())",
        )
    return tree
