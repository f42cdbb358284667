"""The form of a kernel that two answers share when one only restates the other.

`code_key(code)` dumps the syntax tree of parsed code after two normalisations: string
and other constants standing alone as statements (docstrings) are dropped, and every
name the code itself binds (assigned names, parameters, functions, classes, import
aliases, loop and exception variables) is renamed by its order of first appearance, so
is the keyword that passes a parameter by that name. Comments and formatting never
reach the tree. Multi-turn RL ends a conversation whose later answer repeats an earlier
one by this key; a model learnt to dodge the plain tree by editing a docstring.

What it does NOT do: names it does not bind (builtins, `tl`'s functions, attributes) and
every other constant stay as written, since `max` for `min` or a block of 512 for 1024
is a different kernel; it does not prove two programs equivalent (a dead statement
still makes a new key).
"""

from __future__ import annotations

import ast


def code_key(code: str) -> str:
    """The normalised syntax tree of `code` (which must parse), as `ast.dump` text."""
    tree = _DropDocstrings().visit(ast.parse(code))
    names = _bound_names(tree)
    order: dict[str, str] = {}

    def rename(name: str | None) -> str | None:
        if name is None or name not in names:
            return name
        return order.setdefault(name, f"_{len(order)}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = rename(node.id)
        elif isinstance(node, ast.arg | ast.keyword):
            node.arg = rename(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            node.name = rename(node.name)
        elif isinstance(node, ast.alias) and node.asname:
            node.asname = rename(node.asname)
        elif isinstance(node, ast.ExceptHandler):
            node.name = rename(node.name)
    return ast.dump(tree)


def _bound_names(tree: ast.AST) -> set[str]:
    """The names `tree` binds itself; `from m import a` binds `a` but keeps its own
    field, so importing another name still changes the key."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _constant_statement(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


class _DropDocstrings(ast.NodeTransformer):
    """Statements that are only a constant (docstrings, a stray `...`) go; a body left
    empty gets `pass`."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [s for s in body if not _constant_statement(s)]
            setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))
        return node
