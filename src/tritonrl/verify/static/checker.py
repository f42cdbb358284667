"""The static checks themselves: one pass over the candidate's tree, findings out.

`Checker(tree, allowed).run()` visits every node once, in the scope `scopes` gives it,
and records a `Finding` for: imports outside the allow-list and relative imports; uses
of qualified names the rules flag (compilers, native code, hidden code, processes,
threads, I/O, timers, streams, forged exits), private torch/triton API and flagged
attribute names; torch compute where the inputs are visible (torch calls, tensor
methods, operators and augmented assignments on tensors, builtins on tensors, nn layers,
host round-trips); stores, `setattr` and `delattr` on imported modules and `os.environ`
writes (monkeypatching); `getattr` with a computed name; try/except around code that
launches kernels and `__exit__` methods that swallow exceptions; tensor subclasses and
`__torch_function__` / `__torch_dispatch__`; `raise SystemExit`; no kernel at all.
Under the partial policy, compute findings for the allowed ops are dropped (`_compute`).

What it does NOT do: prove anything (see the package docstring); name resolution,
scopes and tensor inference come from the classes it builds on (`names`, `scopes`,
`tensors`).
"""

from __future__ import annotations

import ast
import types

from tritonrl.config import op_key
from tritonrl.verify.static.names import (
    MISSING,
    dotted_name,
    literal_str,
    lookup,
    torch_layer_class,
)
from tritonrl.verify.static.rules import (
    ALLOWED_IMPORTS,
    ALLOWED_METHODS,
    ALLOWED_TORCH_CALLS,
    AMBIGUOUS_METHODS,
    ATTR_FLAGS,
    BINOP_NAMES,
    BUILTIN_COMPUTE,
    CMP_NAMES,
    COMPUTE_METHODS,
    DUNDER_COMPUTE,
    HOST_ROUNDTRIP,
    PROTECTED_NAMES,
    REFERENCE_MODULES,
    Finding,
    is_private,
    rule_flag,
)
from tritonrl.verify.static.tensors import TensorInference


class Checker(TensorInference):
    """One pass of analysis over one module; `run()` returns the findings."""

    def __init__(self, tree: ast.Module, allowed: frozenset[str] | None):
        self.allowed = allowed  # None: strict
        self.found: dict[tuple[str, int, str], Finding] = {}
        super().__init__(tree)

    # ----- results -------------------------------------------------------------------
    def add(self, flag: str, node: ast.AST | None, detail: str, op: str = "") -> None:
        line = getattr(node, "lineno", 0) if node is not None else 0
        self.found.setdefault((flag, line, detail), Finding(flag, line, detail, op))

    def run(self) -> list[Finding]:
        if not self.jit_fns and not self._has_jit_call():
            self.add("no_triton_kernel", None, "no @triton.jit function is defined")
        for node in ast.walk(self.tree):
            scope = self.scope(node)
            if scope == "skip":
                continue
            self._visit(node, scope)
        self._check_context_managers()
        return sorted(self.found.values(), key=lambda f: (f.line, f.flag, f.detail))

    def _visit(self, node: ast.AST, scope: str) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._check_import(node)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            self._check_reference(node, scope)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            self._check_store(node, scope)
        elif isinstance(node, ast.Call):
            self._check_call(node, scope)
        elif isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare)) and scope == "compute":
            self._check_operator(node)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self._check_try(node, scope)
        elif isinstance(node, ast.ClassDef):
            self._check_class(node)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if self.resolve(exc) in ("builtins.SystemExit", "builtins.KeyboardInterrupt"):
                self.add("forged_verdict", node, "raises SystemExit")

    def _check_try(self, node: ast.AST, scope: str) -> None:
        if not getattr(node, "handlers", None) or scope == "jit":
            return
        fn = self._enclosing_fn(node)
        in_body = any(self._is_launch(n) for stmt in node.body for n in ast.walk(stmt))
        if in_body or (fn is not None and fn in self.launchers):
            self.add("try_except_launch", node, "try/except around code that launches kernels")

    def _check_context_managers(self) -> None:
        """A class whose __exit__ returns a truthy constant swallows exceptions like
        try/except does."""
        for cls in ast.walk(self.tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            for m in cls.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name in (
                    "__exit__",
                    "__aexit__",
                ):
                    for r in ast.walk(m):
                        if isinstance(r, ast.Return) and isinstance(r.value, ast.Constant) \
                                and r.value.value:  # fmt: skip
                            self.add("try_except_launch", r, "__exit__ swallows exceptions")

    # ----- imports and references -----------------------------------------------------
    def _check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom) and node.level:
            self.add("reference_access", node, "relative import")
            return
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            names = [f"{node.module}.{a.name}" if a.name != "*" else node.module
                     for a in node.names]  # fmt: skip
        for qn in names:
            self._check_module_name(node, qn)

    def _check_module_name(self, node: ast.AST, qn: str) -> None:
        top = qn.split(".")[0]
        flag = rule_flag(qn)
        if flag:
            self.add(flag, node, f"imports {qn}")
        elif is_private(qn):
            self.add("introspection", node, f"private API {qn}")
        elif top in REFERENCE_MODULES or qn.split(".")[-1] == "Model":
            self.add("reference_access", node, f"imports {qn}")
        elif top not in ALLOWED_IMPORTS:
            self.add("reference_access", node, f"import of {top} is outside the allow-list")

    def _check_reference(self, node: ast.Name | ast.Attribute, scope: str) -> None:
        if isinstance(node, ast.Attribute) and node.attr in ATTR_FLAGS:
            self.add(ATTR_FLAGS[node.attr], node, f"attribute .{node.attr}")
        if isinstance(node, ast.Name):
            if node.id == "Model" and isinstance(node.ctx, ast.Load):
                self.add("reference_access", node, "uses the name Model")
            if node.id in PROTECTED_NAMES and not isinstance(node.ctx, ast.Load):
                self.add("introspection", node, f"rebinds {node.id}")
            elif node.id in ("__builtins__", "__loader__", "__spec__"):
                self.add("introspection", node, f"uses {node.id}")
        if not isinstance(node.ctx, ast.Load):
            return
        parent, field = self.parents.get(node, (None, ""))
        if isinstance(parent, ast.Attribute) and field == "value":
            return  # the longest chain is classified, once
        qn = self.resolve(node)
        if qn is not None:
            self._classify(qn, node, scope, isinstance(parent, ast.Call) and field == "func")

    def _classify(self, qn: str, node: ast.AST, scope: str, called: bool) -> None:
        """Flag a use of the fully qualified name `qn`."""
        flag = rule_flag(qn)
        if flag:
            self.add(flag, node, f"uses {qn}")
        elif is_private(qn):
            self.add("introspection", node, f"private API {qn}")
        elif qn.startswith("torch.") and qn.split(".")[-1] == "compile":
            self.add("torch_compile", node, f"uses {qn}")
        stored = scope == "other" and not called and self._enclosing_fn(node) is None
        if flag is None and qn.startswith("torch.") and (scope == "compute" or stored):
            # module/class level: `OPS = [torch.relu]` keeps a compute function for later
            self._check_torch_use(qn, node, called)
        elif scope == "jit" and qn.startswith("torch.") and callable(lookup(qn)):
            self.add("torch_compute", node, f"{qn} inside a @triton.jit body")

    def _check_torch_use(self, qn: str, node: ast.AST, called: bool) -> None:
        """A torch.* name used where the inputs are in reach (strict: compute)."""
        name = qn.split(".")[-1]
        if qn.startswith("torch.nn.functional."):
            self._compute("nn_compute_layer", node, name, f"calls {qn}")
            return
        if qn in ALLOWED_TORCH_CALLS or qn.startswith(("torch.cuda.", "torch.backends.")):
            return
        if qn.startswith("torch.Tensor."):
            self._check_method_name(name, node, tensor_receiver=True, qn=qn)
            return
        if name in HOST_ROUNDTRIP:
            self._compute("torch_compute", node, name, f"host round-trip via {qn}")
            return
        obj = lookup(qn)
        if obj is MISSING:
            if called:
                self._compute("torch_compute", node, name, f"calls {qn}")
            return
        if isinstance(obj, (type, types.ModuleType)) or not callable(obj):
            return
        owner = lookup(qn.rsplit(".", 1)[0])
        layer = torch_layer_class(owner)
        if layer:
            self._compute("nn_compute_layer", node, layer.lower(), f"uses {qn}")
        else:
            self._compute("torch_compute", node, name, f"uses {qn}")

    def _compute(self, flag: str, node: ast.AST, op: str, detail: str) -> None:
        """Record a compute finding unless the partial policy allows `op`."""
        if self.allowed is not None and op_key(op) in self.allowed:
            return
        self.add(flag, node, detail, op_key(op))

    # ----- stores (monkeypatching) ----------------------------------------------------
    def _check_store(self, node: ast.AST, scope: str) -> None:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and not isinstance(
                    t.ctx, ast.Load
                ):
                    owner = self.resolve(t.value)
                    if owner and not owner.startswith("torch.backends."):  # precision flags
                        what = f"{owner}.{t.attr}" if isinstance(t, ast.Attribute) else owner
                        self.add("monkeypatch", node, f"assigns to {what}")
        if isinstance(node, ast.AugAssign) and scope == "compute":
            env = self._env(node)
            if self._is_tensor(node.target, env) or self._is_tensor(node.value, env):
                op = BINOP_NAMES.get(type(node.op), "op")
                self._compute("torch_compute", node, op, f"in-place {op} on a tensor")

    # ----- calls ---------------------------------------------------------------------
    def _check_call(self, node: ast.Call, scope: str) -> None:
        func = self.resolve(node.func)
        if func in ("builtins.getattr", "builtins.__import__", "importlib.import_module"):
            target = self.resolve(node)  # getattr(torch, "compile"), __import__("os")
            if target:
                parent, field = self.parents.get(node, (None, ""))
                if not (isinstance(parent, ast.Attribute) and field == "value"):
                    called = isinstance(parent, ast.Call) and field == "func"
                    self._classify(target, node, scope, called)
        if func in ("builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.hasattr"):
            self._check_getattr(node, func, scope)
        if func and func.startswith("os.environ.") and func.split(".")[-1] in (
            "update", "setdefault", "pop", "popitem", "clear", "__setitem__",
        ):  # fmt: skip
            self.add("monkeypatch", node, f"modifies os.environ via {func}")
        if isinstance(node.func, ast.Attribute) and node.func.attr == "compile" and func is None:
            self.add("torch_compile", node, "calls .compile() (nn.Module.compile)")
        if scope != "compute":
            return
        layer = self._layer_called(node)
        if layer:
            self._compute("nn_compute_layer", node, layer.lower(), f"calls an nn.{layer} layer")
        elif func is None and isinstance(node.func, ast.Attribute):
            self._check_method_call(node)
        elif func and func.startswith("builtins.") and func[9:] in BUILTIN_COMPUTE:
            env = self._env(node)
            if any(self._is_tensor(a, env) for a in node.args):
                self._compute("torch_compute", node, func[9:], f"{func[9:]}() on a tensor")

    def _check_getattr(self, node: ast.Call, func: str, scope: str) -> None:
        if not node.args:
            return
        owner = self.resolve(node.args[0])
        literal = literal_str(node.args[1]) if len(node.args) > 1 else None
        if literal == "Model":
            self.add("reference_access", node, f"{func[9:]}(..., 'Model')")
        if literal in ATTR_FLAGS:
            self.add(ATTR_FLAGS[literal], node, f"{func[9:]}(..., {literal!r})")
        if func in ("builtins.setattr", "builtins.delattr") and owner:
            self.add("monkeypatch", node, f"{func[9:]} on {owner}")
        elif literal is None and len(node.args) > 1:
            tensor = scope == "compute" and self._is_tensor(node.args[0], self._env(node))
            if owner or tensor:
                what = owner or "a tensor"
                self.add("hidden_code", node, f"{func[9:]} on {what} with a computed name")

    def _check_method_call(self, node: ast.Call) -> None:
        attr = node.func
        receiver = attr.value
        if dotted_name(receiver) in self.layers and attr.attr in ("forward", "__call__"):
            layer = self.layers[dotted_name(receiver)]
            self._compute("nn_compute_layer", node, layer.lower(), f"calls {layer}.forward")
            return
        env = self._env(node)
        tensor = self._is_tensor(receiver, env)
        user = self._is_user_object(receiver)
        self._check_method_name(attr.attr, node, tensor_receiver=tensor, user_object=user)

    def _check_method_name(
        self,
        name: str,
        node: ast.AST,
        tensor_receiver: bool,
        user_object: bool = False,
        qn: str | None = None,
    ) -> None:
        base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
        if name in HOST_ROUNDTRIP:
            self._compute("torch_compute", node, name, f"host round-trip via .{name}()")
        elif name in DUNDER_COMPUTE:
            self._compute("torch_compute", node, name.strip("_"), f"calls .{name}()")
        elif base in ALLOWED_METHODS or user_object:
            return
        elif base in COMPUTE_METHODS and (
            tensor_receiver or base not in AMBIGUOUS_METHODS or name != base
        ):
            self._compute("torch_compute", node, base, f"calls {qn or '.' + name}()")
        elif qn is not None and not name.startswith("__"):
            self._compute("torch_compute", node, base, f"uses {qn}")

    def _is_user_object(self, node: ast.AST) -> bool:
        """`self`, `cls`, `super()`, or a class/function defined in the candidate."""
        if isinstance(node, ast.Name):
            return node.id in ("self", "cls") or node.id in self.classes or node.id in self.funcs
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and (node.func.id == "super" or node.func.id in self.classes)
        )

    # ----- class definitions ---------------------------------------------------------
    def _check_class(self, node: ast.ClassDef) -> None:
        import torch

        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in (
                "__torch_function__",
                "__torch_dispatch__",
            ):
                self.add("output_type", item, f"class {node.name} defines {item.name}")
        for base in node.bases:
            qn = self.resolve(base)
            obj = lookup(qn) if qn else MISSING
            if isinstance(obj, type) and issubclass(obj, torch.Tensor):
                self.add("output_type", node, f"class {node.name} subclasses {qn}")
            elif node.name == "ModelNew" and torch_layer_class(obj):
                self._compute(
                    "nn_compute_layer", node, obj.__name__.lower(), f"ModelNew subclasses {qn}"
                )

    # ----- operators and tensor inference ----------------------------------------------
    def _check_operator(self, node: ast.AST) -> None:
        env = self._env(node)
        if isinstance(node, ast.BinOp):
            op = BINOP_NAMES.get(type(node.op), "op")
            if isinstance(node.op, ast.MatMult) or self._is_tensor(node.left, env) or \
                    self._is_tensor(node.right, env):  # fmt: skip
                self._compute("torch_compute", node, op, f"operator {op} on tensors")
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, (ast.USub, ast.Invert)) and self._is_tensor(node.operand, env):
                op = "neg" if isinstance(node.op, ast.USub) else "bitwise_not"
                self._compute("torch_compute", node, op, f"unary {op} on a tensor")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op in node.ops:
                name = CMP_NAMES.get(type(op))
                if name and any(self._is_tensor(o, env) for o in operands):
                    self._compute("torch_compute", node, name, f"comparison {name} on tensors")
                    break
