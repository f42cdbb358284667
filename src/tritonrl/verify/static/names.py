"""Name resolution for the static checks: what a name in the candidate really refers to.

`NameResolver` records import aliases (`import torch as T`, `from torch import compile
as c`, `import torch.nn.functional as F`), plain re-bindings in any order (`c =
torch.compile`, `self.fn = torch.matmul`, a class attribute read back as `self.x`,
aliases of aliases), `getattr(torch, "compile")` with a literal string, `__import__`
and `importlib.import_module` of a literal, star imports of allowed modules, and the
names bound otherwise (which then shadow builtins). `resolve(node)` is the fully
qualified name (`torch.compile`, `builtins.exec`), or None for local values (`self.x`,
`x.sum`). The module-level helpers read AST shapes (`dotted_name`, `literal_str`, ...) and
look objects up in allowed modules without triggering lazy imports (`lookup`).

What it does NOT do: flag anything, or follow values: resolution is flow-insensitive and
by name, so an alias built through a container, a call or a computed string resolves to
None (the checker flags computed `getattr` names separately).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import sys
import types
from collections.abc import Iterable

from tritonrl.verify.static.rules import ALLOWED_IMPORTS, NN_CONTAINERS

MISSING = object()


def lookup(qualname: str) -> object:
    """The object `qualname` names in an allowed module, without triggering lazy imports
    (attributes are read statically); `MISSING` when unknown."""
    parts = qualname.split(".")
    if parts[0] not in ALLOWED_IMPORTS or parts[0] in ("os", "sys", "builtins"):
        return MISSING
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return MISSING
    for i, part in enumerate(parts[1:], start=1):
        if isinstance(obj, types.ModuleType):
            nxt = vars(obj).get(part, MISSING)
            if nxt is MISSING:
                nxt = sys.modules.get(".".join(parts[: i + 1]), MISSING)
        else:
            nxt = inspect.getattr_static(obj, part, MISSING)
        if nxt is MISSING:
            return MISSING
        obj = nxt
    return obj


def torch_layer_class(obj: object) -> str | None:
    """Name of an nn layer class (nn.Module subclass that computes), else None."""
    if not isinstance(obj, type):
        return None
    import torch

    if issubclass(obj, torch.nn.Module) and obj.__name__ not in NN_CONTAINERS:
        return obj.__name__
    return None


def literal_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def dotted_name(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain (also `getattr(a, "b")`), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    if is_getattr_literal(node):
        base = dotted_name(node.args[0])
        return f"{base}.{literal_str(node.args[1])}" if base else None
    return None


def is_getattr_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and literal_str(node.args[1]) is not None
    )


def is_reference_like(node: ast.AST) -> bool:
    """Expressions that merely name something (candidates for an alias)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        name = dotted_name(node.func) or ""
        return is_getattr_literal(node) or name in ("__import__", "importlib.import_module")
    return False


def is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":` exactly (its body never runs when imported)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    parts = [test.left, *test.comparators]
    names = {p.id for p in parts if isinstance(p, ast.Name)}
    return names == {"__name__"} and any(literal_str(p) == "__main__" for p in parts)


def func_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


class NameResolver:
    """Import aliases, re-bindings and bound names of one module; `resolve` uses them.
    Also keeps `parents` (node -> (parent, field)) for the analyses built on it."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.parents: dict[ast.AST, tuple[ast.AST, str]] = {}
        for node in ast.walk(tree):
            for field, value in ast.iter_fields(node):
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, ast.AST):
                        self.parents[child] = (node, field)
        self.aliases: dict[str, str] = {}
        self.star_modules: list[str] = []
        self.bound: set[str] = set()
        self._collect_names()

    def _collect_names(self) -> None:
        """Import aliases, plain re-bindings (aliases of aliases, in any order) and the
        names bound otherwise (which then shadow builtins)."""
        alias_assigns = self._collect_imports()
        alias_targets = {id(t) for n in ast.walk(self.tree) if isinstance(n, ast.Assign)
                         and is_reference_like(n.value) for t in n.targets}  # fmt: skip
        self._collect_bound(alias_targets)
        for _ in range(5):
            changed = False
            for key, value in alias_assigns:
                qn = self.resolve(value, exclude=key)
                if qn and self.aliases.get(key) != qn:
                    self.aliases[key] = qn
                    changed = True
            if not changed:
                break

    def _collect_imports(self) -> list[tuple[str, ast.AST]]:
        """Record import aliases; return the `name = reference` assignments to resolve."""
        alias_assigns: list[tuple[str, ast.AST]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")[0]
                    self.aliases[a.asname or top] = a.name if a.asname else top
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for a in node.names:
                    if a.name == "*":
                        self.star_modules.append(node.module)
                    else:
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Assign) and is_reference_like(node.value):
                in_class = isinstance(self.parents.get(node, (None,))[0], ast.ClassDef)
                for key in filter(None, map(dotted_name, node.targets)):
                    alias_assigns.append((key, node.value))
                    if in_class:  # class attribute, read back as self.name
                        alias_assigns.append((f"self.{key}", node.value))
        return alias_assigns

    def _collect_bound(self, alias_targets: set[int]) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bound.add(node.name)
            elif (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, (ast.Store, ast.Del))
                and id(node) not in alias_targets
            ):
                self.bound.add(node.id)

    def resolve(self, node: ast.AST, exclude: str | None = None) -> str | None:
        """Fully qualified name of what `node` refers to, when it is rooted in an import,
        a builtin or an alias of one; None for local values (`self.x`, `x.sum`)."""
        if isinstance(node, ast.Name):
            return self._resolve_name(node.id, exclude)
        if isinstance(node, ast.Attribute):
            dotted = dotted_name(node)
            if dotted and dotted != exclude and dotted in self.aliases:
                return self.aliases[dotted]
            base = self.resolve(node.value, exclude)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            if is_getattr_literal(node) and self.resolve(node.func) == "builtins.getattr":
                dotted = dotted_name(node)
                if dotted and dotted != exclude and dotted in self.aliases:
                    return self.aliases[dotted]
                base = self.resolve(node.args[0], exclude)
                return f"{base}.{literal_str(node.args[1])}" if base else None
            func = self.resolve(node.func, exclude)
            if func in ("builtins.__import__", "importlib.import_module") and node.args:
                return literal_str(node.args[0])
        return None

    def _resolve_name(self, name: str, exclude: str | None) -> str | None:
        if name != exclude and name in self.aliases:
            return self.aliases[name]
        if name == "__builtins__":
            return "builtins"
        if name in self.bound:
            return None
        for module in self.star_modules:
            if self._star_exports(module, name):
                return f"{module}.{name}"
        return f"builtins.{name}" if hasattr(builtins, name) else None

    def _star_exports(self, module: str, name: str) -> bool:
        obj = lookup(module)
        if obj is MISSING:
            return False
        exported = getattr(obj, "__all__", None)
        if exported is None:
            return not name.startswith("_") and name in vars(obj)
        return name in exported
