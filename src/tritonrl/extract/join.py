"""Split answers (rule 5 of `tritonrl.extract`): borrow the definitions a ModelNew needs.

`join_split` finds the names the chosen block uses but does not define, takes the
top-level statements defining them from earlier candidates of the same tier (nearest
first, transitively, within `MAX_SUPPORT_CHARS` / `MAX_SUPPORT_BLOCKS`) and places them
before the block in document order, keeping the block alone if the result does not parse.

What it does NOT do: it never borrows from later blocks, from a block that defines
`class Model` (the reference echoed back), or definitions of `Model`, `get_inputs` and
`get_init_inputs`; it never looks inside the reasoning.
"""

from __future__ import annotations

import ast
import builtins
import logging
from dataclasses import dataclass

from tritonrl.extract.common import (
    MAX_SUPPORT_BLOCKS,
    MAX_SUPPORT_CHARS,
    Block,
    first_line,
    normalise,
    parse,
    top_level_model_new,
)

log = logging.getLogger(__name__)

_BUILTINS = set(dir(builtins))
# Never borrowed from another block when joining split code: the task's own names.
_TASK_NAMES = {"Model", "get_inputs", "get_init_inputs"}


@dataclass
class _Stmt:
    block: int  # index of the source block
    node: ast.stmt
    text: str


def join_split(code: str, tree: ast.Module, earlier: list[Block]) -> str:
    """Prepend the earlier top-level definitions that `code` needs (rule 5)."""
    bound = _bound_anywhere(tree)
    need = _free_names(tree) - bound - _TASK_NAMES
    if not need:
        return code
    chosen = _resolve(need, bound, earlier)
    if not chosen:
        return code
    joined = _assemble(code, tree, chosen)
    new_tree, _ = parse(joined)
    if new_tree is None or not top_level_model_new(new_tree):
        log.debug("joined split answer does not parse; keeping the ModelNew block alone")
        return code
    log.debug("joined %d statements from earlier blocks for %s", len(chosen), sorted(need))
    return joined


def _resolve(need: set[str], bound: set[str], earlier: list[Block]) -> list[_Stmt]:
    """Statements defining `need`, nearest block first, followed transitively."""
    defs: dict[str, _Stmt] = {}
    chosen: dict[int, _Stmt] = {}
    provided, need, budget = set(bound), set(need), MAX_SUPPORT_CHARS
    nearest_first = list(range(len(earlier) - 1, -1, -1))[:MAX_SUPPORT_BLOCKS]
    for j in [None, *nearest_first]:
        if j is not None and len(earlier[j].text) <= budget:
            budget -= len(earlier[j].text)
            for stmt in reversed(_definitions(earlier[j], j)):
                for name in _names_bound_by(stmt.node):
                    defs.setdefault(name, stmt)
        _satisfy(need, defs, chosen, provided)
        if not need:
            break
    return sorted(chosen.values(), key=lambda s: (s.block, s.node.lineno))


def _satisfy(need: set[str], defs: dict, chosen: dict, provided: set[str]) -> None:
    changed = True
    while changed:
        changed = False
        for name in sorted(need):
            stmt = defs.get(name)
            if stmt is None:
                continue
            need.discard(name)
            changed = True
            if id(stmt.node) in chosen:
                continue
            chosen[id(stmt.node)] = stmt
            provided |= _names_bound_by(stmt.node)
            need |= _free_names(stmt.node) - provided - _TASK_NAMES - _bound_anywhere(stmt.node)


def _definitions(block: Block, index: int) -> list[_Stmt]:
    """Top-level statements of an earlier block that bind names, unless it is the reference."""
    tree, _ = parse(block.code)
    if tree is None:
        return []
    if any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in tree.body):
        return []  # the reference echoed back: never part of the answer
    lines = block.code.split("\n")
    out = []
    for node in tree.body:
        names = _names_bound_by(node)
        if names and not names & _TASK_NAMES:
            text = "\n".join(lines[first_line(node) - 1 : node.end_lineno])
            out.append(_Stmt(index, node, text))
    return out


def _assemble(code: str, tree: ast.Module, chosen: list[_Stmt]) -> str:
    """Borrowed statements first (after any `from __future__` of the chosen block)."""
    lines = code.split("\n")
    future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    head = [lines[n.lineno - 1 : n.end_lineno] for n in future]
    skip = {k for n in future for k in range(n.lineno - 1, n.end_lineno)}
    rest = [line for k, line in enumerate(lines) if k not in skip]
    parts = ["\n".join(sum(head, []))] if head else []
    previous = None
    for stmt in chosen:
        is_import = isinstance(stmt.node, (ast.Import, ast.ImportFrom))
        sep = "\n" if (is_import and previous) else "\n\n\n"
        parts.append(("" if not parts else sep) + stmt.text)
        previous = is_import
    borrowed = "".join(parts)
    return normalise((borrowed + "\n\n\n" + "\n".join(rest)).split("\n"))


def _names_bound_by(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module namespace."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return set()
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {_import_name(a) for a in node.names if a.name != "*"}
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= _names_bound_by(child)
    return names


def _import_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _bound_anywhere(node: ast.AST) -> set[str]:
    """Every name bound anywhere below `node` (an over-approximation of what it defines)."""
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
            names.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, ast.arg):
            names.add(child.arg)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= {_import_name(a) for a in child.names}
        elif isinstance(child, (ast.Global, ast.Nonlocal)):
            names |= set(child.names)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            names.add(child.name)
    return names


def _free_names(node: ast.AST) -> set[str]:
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - _BUILTINS
