"""The walk over a method's AST that counts the compute ops its return values reach.

`Forward.run` follows names to the values they hold, counts torch / `F.` calls, tensor
methods, arithmetic on tensors and calls of the submodules built in `__init__`, inlines
helper methods and local modules (up to `_DEPTH` deep), and notes loops that compute;
the patterns counted as one op and the scalar / expression-key helpers come from
`patterns.Patterns`. `class_summary` is the summary of one class's `forward`.

What it does NOT do: it never executes anything, and it does not decide the level
(`ops.level_of` does).
"""

from __future__ import annotations

import ast

from tritonrl.tasks.difficulty.modules import Init, Module, Sub, dotted_name, is_self_attr, methods
from tritonrl.tasks.difficulty.ops import (
    BINOPS,
    CONTAINERS,
    METHODS,
    NO_OP_MODULES,
    NON_COMPUTE,
    OpSummary,
    op_name,
)
from tritonrl.tasks.difficulty.patterns import Patterns

_DEPTH = 4  # nesting of helper methods / local classes analysed


class Forward(Patterns):
    """Ops reached from the return values of one method (names followed to the value
    they hold at that point; each expression counted once)."""

    def __init__(self, module: Module, cls: ast.ClassDef, init: Init, depth: int = 0):
        self.module, self.cls, self.init, self.depth = module, cls, init, depth
        self.summary = OpSummary()
        self.env: dict[str, ast.AST] = {}
        self.bound: dict[int, ast.AST] = {}
        self.loop_vars: dict[str, Sub] = {}
        self.params: set[str] = set()
        self.seen: set[int] = set()
        self.keys: dict[int, str] = {}
        self.synthetic: list[ast.AST] = []  # nodes made here, kept alive (ids are keys)
        self.probe = False  # counting inside a residual check: no nested checks

    # ---- statements

    def run(self, fn: ast.FunctionDef) -> OpSummary:
        args = fn.args.args[1:] if fn.args.args and fn.args.args[0].arg == "self" else fn.args.args
        defaults = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
        for arg, default in zip(args, defaults, strict=True):
            # An argument with a literal default (`dim=1`) is a setting, not a tensor.
            if not (isinstance(default, ast.Constant) and default.value is not None):
                self.params.add(arg.arg)
        if fn.args.vararg:
            self.params.add(fn.args.vararg.arg)
        roots: list[ast.AST] = []
        self._block(fn.body, roots)
        for root in roots:
            self._visit(root)
        return self.summary

    def _bind(self, node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in self.env:
                self.bound.setdefault(id(n), self.env[n.id])

    def _assign(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._assign(t.value if isinstance(t, ast.Starred) else t, value)

    def _block(self, body: list[ast.stmt], roots: list[ast.AST]) -> None:
        for stmt in body:
            self._statement(stmt, roots)

    def _statement(self, stmt: ast.stmt, roots: list[ast.AST]) -> None:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            self._bind(stmt.value)
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                self._assign(target, stmt.value)
                if not isinstance(target, (ast.Name, ast.Tuple, ast.List)):
                    roots.append(stmt.value)  # out[...] = value, self.cache = value
        elif isinstance(stmt, ast.AugAssign):
            self._augassign(stmt, roots)
        elif isinstance(stmt, (ast.Return, ast.Expr)) and stmt.value is not None:
            self._bind(stmt.value)
            roots.append(stmt.value)
        elif isinstance(stmt, (ast.For, ast.While)):
            self._loop(stmt, roots)
        elif isinstance(stmt, ast.If):
            self._bind(stmt.test)
            self._block(stmt.body, roots)
            self._block(stmt.orelse, roots)
        elif isinstance(stmt, ast.With):
            self._block(stmt.body, roots)

    def _augassign(self, stmt: ast.AugAssign, roots: list[ast.AST]) -> None:
        self._bind(stmt.value)
        if not isinstance(stmt.target, ast.Name):
            roots.append(stmt.value)
            return
        left = ast.Name(id=stmt.target.id, ctx=ast.Load())
        if stmt.target.id in self.env:
            self.bound[id(left)] = self.env[stmt.target.id]
        node = ast.BinOp(left=left, op=stmt.op, right=stmt.value)
        self.synthetic.append(node)
        self.env[stmt.target.id] = node

    def _loop(self, stmt: ast.For | ast.While, roots: list[ast.AST]) -> None:
        if isinstance(stmt, ast.For):
            self._bind(stmt.iter)
            self._loop_target(stmt.target, stmt.iter)
        self._block(stmt.body, roots)
        if self._computes(stmt.body):
            self.summary.loops += 1

    def _loop_target(self, target: ast.AST, iterable: ast.AST) -> None:
        """`for layer in self.layers` (or enumerate / zip of it): calls of `layer` run the
        container's layers."""
        if isinstance(iterable, ast.Call) and iterable.args:
            iterable = iterable.args[-1] if isinstance(iterable.func, ast.Name) else iterable
        sub = self.init.subs.get(is_self_attr(iterable) or "")
        if sub is None:
            return
        names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        if names:
            self.loop_vars[names[-1]] = sub

    def _computes(self, body: list[ast.stmt]) -> bool:
        for stmt in body:
            for n in ast.walk(stmt):
                if isinstance(n, ast.Call) and self._call_ops(n, count=False):
                    return True
                if isinstance(n, ast.BinOp) and not self._scalar(n):
                    return True
        return False

    # ---- expressions

    def _visit(self, node: ast.AST | None) -> None:
        if node is None or id(node) in self.seen:
            return
        self.seen.add(id(node))
        if isinstance(node, ast.Name):
            self._visit(self.bound.get(id(node)))
            return
        if isinstance(node, ast.Call):
            self._call(node)
            return
        if isinstance(node, ast.BinOp) and not self._scalar(node):
            self._binop(node)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            if not self._scalar(node.operand):
                self.summary.ops["neg"] += 1
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            self._comprehension(node)
        elif isinstance(node, ast.Subscript):
            self._visit(node.value)  # indices are not compute
            return
        elif isinstance(node, ast.Lambda):
            return
        for child in ast.iter_child_nodes(node):
            self._visit(child)

    def _comprehension(self, node: ast.AST) -> None:
        for gen in node.generators:
            self._visit(gen.iter)
            self._loop_target(gen.target, gen.iter)
        elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        calls = [n for e in elts for n in ast.walk(e) if isinstance(n, ast.Call)]
        if any(self._call_ops(n, count=False) for n in calls):
            self.summary.loops += 1

    def _call(self, node: ast.Call) -> None:
        self._call_ops(node, count=True)
        func = node.func
        if isinstance(func, ast.Attribute) and dotted_name(func, self.module.aliases) is None:
            self._visit(func.value)  # the tensor a method is called on
        for arg in node.args:
            self._visit(arg)
        for kw in node.keywords:
            self._visit(kw.value)

    def _call_ops(self, node: ast.Call, count: bool) -> bool:
        """Count the ops a call runs (when `count`); True when it runs any."""
        func = node.func
        if isinstance(func, ast.Call):  # nn.ReLU()(x)
            return self._call_ops(func, count)
        attr = is_self_attr(func)
        sub = self._called_sub(func)
        if sub is not None:
            return self._run_sub(sub, count)
        if attr in methods(self.cls):
            return self._inline(methods(self.cls)[attr], count)
        dotted = dotted_name(func, self.module.aliases)
        if dotted is not None:
            return self._torch_call(dotted, count)
        if isinstance(func, ast.Name):
            return self._local_call(func.id, count)
        if isinstance(func, ast.Attribute):
            op = op_name(func.attr)
            if op in METHODS:
                if count:
                    self.summary.ops[op] += 1
                return True
        return False

    def _called_sub(self, func: ast.AST) -> Sub | None:
        """The submodule a call runs: `self.fc(x)`, `self.layers[i](x)`, `layer(x)`."""
        if isinstance(func, ast.Subscript):
            func = func.value
        attr = is_self_attr(func)
        if attr is not None:
            return self.init.subs.get(attr)
        if isinstance(func, ast.Name):
            return self.loop_vars.get(func.id)
        return None

    def _run_sub(self, sub: Sub, count: bool) -> bool:
        if not count:
            return bool(sub.layers)
        for op in sub.layers:
            if op.startswith("local:"):
                self._local_module(self.module.classes[op.removeprefix("local:")], True)
            else:
                self.summary.ops[op] += 1
        return bool(sub.layers)

    def _inline(self, fn: ast.FunctionDef, count: bool) -> bool:
        """Ops of a helper method or function of this class, added to this summary."""
        if self.depth >= _DEPTH:
            return False
        child = Forward(self.module, self.cls, self.init, self.depth + 1)
        sub = child.run(fn)
        if count:
            self.summary.merge(sub)
        return sub.total > 0

    def _local_module(self, cls: ast.ClassDef, count: bool) -> bool:
        """Ops of a submodule whose class is defined in the source."""
        if self.depth >= _DEPTH or "forward" not in methods(cls):
            return False
        sub = class_summary(self.module, cls, self.depth + 1)
        if count:
            self.summary.merge(sub)
        return sub.total > 0

    def _torch_call(self, dotted: str, count: bool) -> bool:
        if not dotted.startswith("torch"):
            return False  # math.sqrt, numpy, ...
        last = dotted.rsplit(".", 1)[1]
        if dotted.startswith("torch.nn.") and last[:1].isupper():
            ops = [] if last in NO_OP_MODULES | CONTAINERS else [op_name(last)]
        else:
            ops = [] if op_name(last) in NON_COMPUTE else [op_name(last)]
        if count:
            self.summary.ops.update(ops)
        return bool(ops)

    def _local_call(self, name: str, count: bool) -> bool:
        if name in self.module.functions:
            return self._inline(self.module.functions[name], count)
        if name in self.module.classes:  # a local module built and called in forward
            return self._local_module(self.module.classes[name], count)
        return False

    def _binop(self, node: ast.BinOp) -> None:
        kind = BINOPS.get(type(node.op))
        if kind and self._normalisation(node):
            return
        if kind:
            self.summary.ops[kind] += 1
        if kind == "add" and not self.probe:
            self._check_residual(node)
        self._visit(node.left)
        self._visit(node.right)

    def _heavy_count(self, node: ast.AST) -> int:
        """Weight layers under `node`, by a probe walk sharing this walk's bindings."""
        probe = Forward(self.module, self.cls, self.init, self.depth)
        probe.bound, probe.params, probe.loop_vars = self.bound, self.params, self.loop_vars
        probe.keys, probe.probe = self.keys, True
        probe._visit(node)
        return probe.summary.heavy


def class_summary(module: Module, cls: ast.ClassDef, depth: int = 0) -> OpSummary:
    """The summary of `cls.forward`, with the containers and local modules of its `__init__`."""
    init = Init(module, cls)
    summary = Forward(module, cls, init, depth).run(methods(cls)["forward"])
    summary.big_containers += sum(sub.big for sub in init.subs.values())
    summary.local_modules += sum(sub.local is not None for sub in init.subs.values())
    return summary
