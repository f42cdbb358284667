"""The source around `forward`: imports, local classes and functions, and `__init__`.

`Module` resolves names through the source's imports (`F.relu` ->
`torch.nn.functional.relu`) and knows its local classes and functions; `Init` records
what a class's `__init__` registers on `self`: submodules (`Sub`: nn layers, containers,
instances of local classes) and tensor attributes.

What it does NOT do: it never counts ops in `forward` (that is `forward`), and never
imports or runs the source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tritonrl.tasks.difficulty.ops import CONTAINERS, NO_OP_MODULES, is_heavy, op_name

_DEFAULT_ALIASES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}


@dataclass
class Sub:
    """A submodule built in `__init__`: its layer kinds, or a local class."""

    layers: list[str] = field(default_factory=list)  # op names of its nn layers
    container: bool = False
    dynamic: bool = False  # built by a comprehension, a loop or `*args`
    local: str | None = None  # class name, for a class defined in the source

    @property
    def big(self) -> bool:
        heavy = sum(is_heavy(op) or op.startswith("local:") for op in self.layers)
        return self.container and (self.dynamic or heavy >= 2 or len(self.layers) >= 4)


def _aliases(tree: ast.Module) -> dict[str, str]:
    names = dict(_DEFAULT_ALIASES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def dotted_name(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`F.relu` -> `torch.nn.functional.relu` (None unless rooted at an imported name)."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def is_self_attr(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


class Module:
    """The source's imports, local classes and functions."""

    def __init__(self, tree: ast.Module):
        self.aliases = _aliases(tree)
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def nn_class(self, call: ast.AST) -> str | None:
        """`nn.Linear(...)` -> "Linear"."""
        if not isinstance(call, ast.Call):
            return None
        name = dotted_name(call.func, self.aliases) or ""
        if name.startswith("torch.nn.") and name.count(".") == 2:
            return name.rsplit(".", 1)[1]
        return None

    def local_class(self, call: ast.AST) -> str | None:
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            return call.func.id if call.func.id in self.classes else None
        return None

    def layer_names(self, node: ast.AST) -> list[str]:
        """Op names of the layers built anywhere inside `node` (local classes as local:X)."""
        out = []
        for n in ast.walk(node):
            cls = self.nn_class(n)
            if cls and cls not in CONTAINERS and cls not in NO_OP_MODULES:
                out.append(op_name(cls))
            elif self.local_class(n):
                out.append(f"local:{self.local_class(n)}")
        return out


def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _built_dynamically(args: list[ast.expr]) -> bool:
    """`nn.Sequential(*layers)`, `nn.ModuleList(layers)`, `nn.ModuleList([... for ...])`."""
    for arg in args:
        items = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
        if any(isinstance(i, (ast.Name, ast.Starred)) for i in items):
            return True
        comprehensions = (ast.ListComp, ast.GeneratorExp, ast.DictComp)
        if any(isinstance(n, comprehensions) for n in ast.walk(arg)):
            return True
    return False


def _submodule(module: Module, value: ast.AST) -> Sub | None:
    cls = module.nn_class(value)
    if cls in CONTAINERS:
        dynamic = _built_dynamically(value.args)
        return Sub(module.layer_names(value), container=True, dynamic=dynamic)
    if cls and cls not in NO_OP_MODULES and cls not in ("Parameter", "Buffer"):
        return Sub([op_name(cls)])
    local = module.local_class(value)
    return Sub([f"local:{local}"], local=local) if local else None


class Init:
    """What `__init__` registers on `self`: submodules and tensor attributes."""

    def __init__(self, module: Module, cls: ast.ClassDef):
        self.module = module
        self.subs: dict[str, Sub] = {}
        self.tensors: set[str] = set()
        init = methods(cls).get("__init__")
        for node in ast.walk(init) if init else []:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._register(module, is_self_attr(target), node.value)
            elif isinstance(node, ast.For):
                self._grown_in_loop(node)
            elif isinstance(node, ast.Call) and is_self_attr(node.func) == "register_buffer":
                self._buffer(node)

    def _register(self, module: Module, attr: str | None, value: ast.AST) -> None:
        if attr is None:
            return
        sub = _submodule(module, value)
        if sub is not None:
            self.subs[attr] = sub
        elif isinstance(value, ast.Call) and (
            dotted_name(value.func, module.aliases) or ""
        ).startswith("torch"):
            self.tensors.add(attr)  # nn.Parameter(...), torch.randn(...)

    def _buffer(self, call: ast.Call) -> None:
        if call.args and isinstance(call.args[0], ast.Constant):
            self.tensors.add(str(call.args[0].value))

    def _grown_in_loop(self, loop: ast.For) -> None:
        """`for ...: self.layers.append(nn.Linear(...))` makes `layers` dynamic."""
        for node in ast.walk(loop):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend")
            ):
                attr = is_self_attr(node.func.value)
                if attr in self.subs:
                    self.subs[attr].dynamic = True
                    self.subs[attr].layers += self.module.layer_names(node)
