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
"""

from __future__ import annotations

import ast
import json
import logging
import re
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Compute ops from which a task around a weight layer is an architecture.
MANY_OPS = 8
_DEPTH = 4  # nesting of helper methods / local classes analysed
_KEY_CAP = 4000  # longest expression key kept verbatim (longer ones are hashed)

_DEFAULT_ALIASES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
_NO_OP_MODULES = frozenset({"Identity", "Flatten", "Unflatten", "ParameterList", "ParameterDict"})
_COMPOSITE = _words(
    "rnn lstm gru transformer transformerencoder transformerdecoder transformerencoderlayer "
    "transformerdecoderlayer multiheadattention"
)
# One recurrent step: two GEMMs and their gates, a fusion on its own (weighs 2 ops).
_CELLS = _words("rnncell lstmcell grucell")
# Weight layers and matrix products (convolutions: every name starting with "conv").
_HEAVY = _words(
    "linear bilinear lazylinear embedding embeddingbag matmul mm bmm mv einsum addmm baddbmm "
    "addbmm tensordot scaled_dot_product_attention"
)
_MATMULS = _words("matmul mm bmm einsum baddbmm tensordot")
_REDUCTIONS = _words("sum mean norm vector_norm var std max amax min amin logsumexp")
# torch functions and tensor methods that move or describe data without computing.
_NON_COMPUTE = _words(
    "size dim numel item tolist stride shape view view_as reshape reshape_as permute "
    "transpose t contiguous unsqueeze squeeze flatten unflatten expand expand_as broadcast_to "
    "repeat movedim moveaxis swapaxes to float double half bfloat16 type type_as detach clone "
    "chunk split unbind narrow select cat concat stack zeros ones empty full zeros_like "
    "ones_like empty_like full_like arange linspace tensor as_tensor cpu cuda new_zeros "
    "new_ones new_empty new_full new_tensor requires_grad is_contiguous get_device no_grad "
    "manual_seed pad identity randn rand randint randn_like rand_like"
)
# Tensor methods that compute (a method call is an op only when named here).
_METHODS = (
    _REDUCTIONS
    | _MATMULS
    | _words(
        "abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square pow sin cos tan sinh "
        "cosh tanh sigmoid relu erf erfc reciprocal sign floor ceil round trunc frac clamp "
        "clamp_min clamp_max add sub mul div floor_divide fmod remainder maximum minimum fmax "
        "fmin where masked_fill lerp addcmul addcdiv softmax log_softmax cumsum cumprod argmax "
        "argmin median topk sort argsort prod dot outer diag tril triu hardtanh gather scatter "
        "scatter_add index_add"
    )
)
_TORCH_CONSTANTS = _words("torch.inf torch.nan torch.pi torch.e")
_RENAME = {
    "clip": "clamp",
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "true_divide": "div",
    "amax": "max",
    "amin": "min",
}
_BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}


def _op_name(name: str) -> str:
    name = name.lower()
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]  # in-place variants: relu_ -> relu
    return _RENAME.get(name, name)


def _is_heavy(op: str) -> bool:
    return op in _HEAVY or op in _CELLS or op.startswith(("conv", "lazyconv"))


# --------------------------------------------------------------------------- summary


@dataclass
class OpSummary:
    """What `forward` computes: ops by kind and the structure around them."""

    ops: Counter = field(default_factory=Counter)
    loops: int = 0  # loops / comprehensions in forward running compute
    big_containers: int = 0  # Sequential / ModuleList / ModuleDict of several layers
    local_modules: int = 0  # submodules whose class is defined in the source
    residual: bool = False
    attention: bool = False

    @property
    def total(self) -> int:
        return sum(n * (2 if op in _CELLS else 1) for op, n in self.ops.items())

    @property
    def heavy(self) -> int:
        return sum(n * (2 if op in _CELLS else 1) for op, n in self.ops.items() if _is_heavy(op))

    @property
    def composite(self) -> int:
        return sum(n for op, n in self.ops.items() if op in _COMPOSITE)

    def merge(self, other: OpSummary) -> None:
        self.ops.update(other.ops)
        self.loops += other.loops
        self.big_containers += other.big_containers
        self.local_modules += other.local_modules
        self.residual |= other.residual
        self.attention |= other.attention


def level_of(s: OpSummary) -> int:
    """The label of a summary (the rules of the module docstring)."""
    matmuls = sum(s.ops[m] for m in _MATMULS)
    attention = s.attention or (s.ops["softmax"] > 0 and matmuls >= 2)
    structure = s.composite or s.loops or s.big_containers or s.local_modules >= 2
    if structure or s.residual or attention:
        return 3
    many = (s.heavy >= 1 and s.total >= MANY_OPS) or (s.heavy >= 2 and s.total >= 6)
    if s.heavy >= 3 or many:
        return 3
    return 2 if s.total >= 2 else 1


# --------------------------------------------------------------------------- __init__


@dataclass
class _Sub:
    """A submodule built in `__init__`: its layer kinds, or a local class."""

    layers: list[str] = field(default_factory=list)  # op names of its nn layers
    container: bool = False
    dynamic: bool = False  # built by a comprehension, a loop or `*args`
    local: str | None = None  # class name, for a class defined in the source

    @property
    def big(self) -> bool:
        heavy = sum(_is_heavy(op) or op.startswith("local:") for op in self.layers)
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


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`F.relu` -> `torch.nn.functional.relu` (None unless rooted at an imported name)."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_self_attr(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


class _Module:
    """The source's imports, local classes and functions."""

    def __init__(self, tree: ast.Module):
        self.aliases = _aliases(tree)
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def nn_class(self, call: ast.AST) -> str | None:
        """`nn.Linear(...)` -> "Linear"."""
        if not isinstance(call, ast.Call):
            return None
        name = _dotted(call.func, self.aliases) or ""
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
            if cls and cls not in _CONTAINERS and cls not in _NO_OP_MODULES:
                out.append(_op_name(cls))
            elif self.local_class(n):
                out.append(f"local:{self.local_class(n)}")
        return out


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
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


def _submodule(module: _Module, value: ast.AST) -> _Sub | None:
    cls = module.nn_class(value)
    if cls in _CONTAINERS:
        dynamic = _built_dynamically(value.args)
        return _Sub(module.layer_names(value), container=True, dynamic=dynamic)
    if cls and cls not in _NO_OP_MODULES and cls not in ("Parameter", "Buffer"):
        return _Sub([_op_name(cls)])
    local = module.local_class(value)
    return _Sub([f"local:{local}"], local=local) if local else None


class _Init:
    """What `__init__` registers on `self`: submodules and tensor attributes."""

    def __init__(self, module: _Module, cls: ast.ClassDef):
        self.module = module
        self.subs: dict[str, _Sub] = {}
        self.tensors: set[str] = set()
        init = _methods(cls).get("__init__")
        for node in ast.walk(init) if init else []:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._register(module, _is_self_attr(target), node.value)
            elif isinstance(node, ast.For):
                self._grown_in_loop(node)
            elif isinstance(node, ast.Call) and _is_self_attr(node.func) == "register_buffer":
                self._buffer(node)

    def _register(self, module: _Module, attr: str | None, value: ast.AST) -> None:
        if attr is None:
            return
        sub = _submodule(module, value)
        if sub is not None:
            self.subs[attr] = sub
        elif isinstance(value, ast.Call) and (_dotted(value.func, module.aliases) or "").startswith(
            "torch"
        ):
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
                attr = _is_self_attr(node.func.value)
                if attr in self.subs:
                    self.subs[attr].dynamic = True
                    self.subs[attr].layers += self.module.layer_names(node)


# --------------------------------------------------------------------------- forward


class _Forward:
    """Ops reached from the return values of one method (names followed to the value
    they hold at that point; each expression counted once)."""

    def __init__(self, module: _Module, cls: ast.ClassDef, init: _Init, depth: int = 0):
        self.module, self.cls, self.init, self.depth = module, cls, init, depth
        self.summary = OpSummary()
        self.env: dict[str, ast.AST] = {}
        self.bound: dict[int, ast.AST] = {}
        self.loop_vars: dict[str, _Sub] = {}
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
        sub = self.init.subs.get(_is_self_attr(iterable) or "")
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
        if isinstance(func, ast.Attribute) and _dotted(func, self.module.aliases) is None:
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
        attr = _is_self_attr(func)
        sub = self._called_sub(func)
        if sub is not None:
            return self._run_sub(sub, count)
        if attr in _methods(self.cls):
            return self._inline(_methods(self.cls)[attr], count)
        dotted = _dotted(func, self.module.aliases)
        if dotted is not None:
            return self._torch_call(dotted, count)
        if isinstance(func, ast.Name):
            return self._local_call(func.id, count)
        if isinstance(func, ast.Attribute):
            op = _op_name(func.attr)
            if op in _METHODS:
                if count:
                    self.summary.ops[op] += 1
                return True
        return False

    def _called_sub(self, func: ast.AST) -> _Sub | None:
        """The submodule a call runs: `self.fc(x)`, `self.layers[i](x)`, `layer(x)`."""
        if isinstance(func, ast.Subscript):
            func = func.value
        attr = _is_self_attr(func)
        if attr is not None:
            return self.init.subs.get(attr)
        if isinstance(func, ast.Name):
            return self.loop_vars.get(func.id)
        return None

    def _run_sub(self, sub: _Sub, count: bool) -> bool:
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
        child = _Forward(self.module, self.cls, self.init, self.depth + 1)
        sub = child.run(fn)
        if count:
            self.summary.merge(sub)
        return sub.total > 0

    def _local_module(self, cls: ast.ClassDef, count: bool) -> bool:
        """Ops of a submodule whose class is defined in the source."""
        if self.depth >= _DEPTH or "forward" not in _methods(cls):
            return False
        sub = _class_summary(self.module, cls, self.depth + 1)
        if count:
            self.summary.merge(sub)
        return sub.total > 0

    def _torch_call(self, dotted: str, count: bool) -> bool:
        if not dotted.startswith("torch"):
            return False  # math.sqrt, numpy, ...
        last = dotted.rsplit(".", 1)[1]
        if dotted.startswith("torch.nn.") and last[:1].isupper():
            ops = [] if last in _NO_OP_MODULES | _CONTAINERS else [_op_name(last)]
        else:
            ops = [] if _op_name(last) in _NON_COMPUTE else [_op_name(last)]
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
        kind = _BINOPS.get(type(node.op))
        if kind and self._normalisation(node):
            return
        if kind:
            self.summary.ops[kind] += 1
        if kind == "add" and not self.probe:
            self._check_residual(node)
        self._visit(node.left)
        self._visit(node.right)

    # ---- patterns

    def _normalisation(self, node: ast.BinOp) -> bool:
        """`a / f(reduce(a))` or `a * rsqrt(reduce(a))`: one op, `normalize`."""
        if isinstance(node.op, ast.Div):
            num, den = node.left, node.right
        elif isinstance(node.op, ast.Mult):
            sides = [(node.left, node.right), (node.right, node.left)]
            found = [(n, d) for n, d in sides if self._is_rsqrt(d)]
            if not found:
                return False
            num, den = found[0]
        else:
            return False
        if self._scalar(num) or not self._has_reduction(den):
            return False
        self.summary.ops["normalize"] += 1
        if self._key(num) in self._key(den):
            self._absorb(num)  # x / x.sum(): the numerator is part of the normalisation
        elif (
            isinstance(num, ast.BinOp)
            and isinstance(num.op, ast.Sub)
            and self._has_reduction(num.right)
        ):
            self.seen.add(id(num))  # (x - mean) / std: centring belongs to it too
            self._visit(num.left)
            self._absorb(num.right)
        else:
            self._visit(num)
        self._absorb(den)
        return True

    def _is_rsqrt(self, node: ast.AST) -> bool:
        while isinstance(node, ast.Name) and id(node) in self.bound:
            node = self.bound[id(node)]
        return isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "rsqrt"

    def _has_reduction(self, node: ast.AST) -> bool:
        key = self._key(node)
        return any(f"attr='{r}'" in key for r in _REDUCTIONS)

    def _absorb(self, node: ast.AST | None) -> None:
        """Mark a subtree as part of a pattern already counted; weight layers and
        submodules inside it still count."""
        if node is None or id(node) in self.seen:
            return
        if isinstance(node, ast.Call) and (
            self._called_sub(node.func) is not None or self._heavy_call(node)
        ):
            self._visit(node)
            return
        self.seen.add(id(node))
        if isinstance(node, ast.Name):
            self._absorb(self.bound.get(id(node)))
            return
        for child in ast.iter_child_nodes(node):
            self._absorb(child)

    def _heavy_call(self, node: ast.Call) -> bool:
        dotted = _dotted(node.func, self.module.aliases) or ""
        name = dotted.rsplit(".", 1)[-1] if dotted else getattr(node.func, "attr", "")
        return _is_heavy(_op_name(name)) if name else False

    def _check_residual(self, node: ast.BinOp) -> None:
        """`f(g(x)) + x` with two or more weight layers in between."""
        for a, b in ((node.left, node.right), (node.right, node.left)):
            ka, kb = self._key(a), self._key(b)
            wraps = not self._scalar(a) and ka != kb and ka in kb
            if wraps and self._heavy_count(b) - self._heavy_count(a) >= 2:
                self.summary.residual = True

    def _heavy_count(self, node: ast.AST) -> int:
        probe = _Forward(self.module, self.cls, self.init, self.depth)
        probe.bound, probe.params, probe.loop_vars = self.bound, self.params, self.loop_vars
        probe.keys, probe.probe = self.keys, True
        probe._visit(node)
        return probe.summary.heavy

    # ---- helpers

    def _scalar(self, node: ast.AST | None, depth: int = 0) -> bool:
        """True for expressions of plain numbers (constants, sizes, settings on self)."""
        if node is None or depth > 50:
            return True
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            bound = self.bound.get(id(node))
            if bound is not None:
                return self._scalar(bound, depth + 1)
            return node.id not in self.params and node.id not in self.loop_vars
        if isinstance(node, ast.Attribute):
            attr = _is_self_attr(node)
            if attr is not None:
                return attr not in self.init.tensors and attr not in self.init.subs
            if node.attr in ("shape", "ndim", "dtype", "device"):
                return True
            dotted = _dotted(node, self.module.aliases) or ""
            return dotted.startswith("math.") or dotted in _TORCH_CONSTANTS
        if isinstance(node, ast.Subscript):
            return self._scalar(node.value, depth + 1)
        if isinstance(node, ast.BinOp):
            return self._scalar(node.left, depth + 1) and self._scalar(node.right, depth + 1)
        if isinstance(node, ast.UnaryOp):
            return self._scalar(node.operand, depth + 1)
        if isinstance(node, ast.Call):
            return self._scalar_call(node, depth)
        return False

    def _scalar_call(self, node: ast.Call, depth: int) -> bool:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("size", "dim", "numel", "item"):
            return True
        dotted = _dotted(func, self.module.aliases) or ""
        if dotted.startswith("math."):
            return True
        if isinstance(func, ast.Name) and func.id in ("int", "float", "len", "min", "max", "abs"):
            return all(self._scalar(a, depth + 1) for a in node.args)
        return False

    def _key(self, node: ast.AST | None) -> str:
        """A text key of an expression with names replaced by what they hold."""
        if node is None:
            return "None"
        cached = self.keys.get(id(node))
        if cached is not None:
            return cached
        self.keys[id(node)] = "..."  # cycles (loop-carried names) end here
        if isinstance(node, ast.Name) and id(node) in self.bound:
            key = self._key(self.bound[id(node)])
        elif isinstance(node, ast.Name):
            key = f"Name(id={node.id!r})"
        else:
            parts = []
            for name, value in ast.iter_fields(node):
                if name == "ctx":
                    continue
                values = value if isinstance(value, list) else [value]
                inner = ",".join(
                    self._key(v) if isinstance(v, ast.AST) else repr(v) for v in values
                )
                parts.append(f"{name}={inner}")
            key = f"{type(node).__name__}({','.join(parts)})"
        if len(key) > _KEY_CAP:
            key = key[:200] + f"#{hash(key)}" + key[-_KEY_CAP // 2 :]
        self.keys[id(node)] = key
        return key


# --------------------------------------------------------------------------- labels


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for cls in classes:
        if cls.name == "Model":
            return cls
    with_forward = [c for c in classes if "forward" in _methods(c)]
    return with_forward[-1] if with_forward else None


def _class_summary(module: _Module, cls: ast.ClassDef, depth: int = 0) -> OpSummary:
    init = _Init(module, cls)
    summary = _Forward(module, cls, init, depth).run(_methods(cls)["forward"])
    summary.big_containers += sum(sub.big for sub in init.subs.values())
    summary.local_modules += sum(sub.local is not None for sub in init.subs.values())
    return summary


def analyze(source: str) -> OpSummary:
    """The `OpSummary` of a reference's `Model.forward`. Raises on unparseable source
    or a source with no model class (`label_level` turns that into level 1)."""
    tree = ast.parse(source)
    cls = _model_class(tree)
    if cls is None or "forward" not in _methods(cls):
        raise ValueError("no class Model with a forward method")
    return _class_summary(_Module(tree), cls)


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


# --------------------------------------------------------------------------- LLM labels


class LabelError(RuntimeError):
    """The LLM labeller could not get a level: the message says from where and why."""


LLM_PROMPT = (
    "You label GPU kernel-writing tasks by difficulty, as KernelBench does. The task is "
    "the PyTorch reference below; a solver must write a faster kernel for Model.forward.\n"
    "1 = a single operation (one activation, reduction, matmul, conv or norm layer).\n"
    "2 = a fusion of a few operations (e.g. a linear or conv layer followed by "
    "activations, scaling, reductions).\n"
    "3 = a whole architecture (several layers, loops over layers, residual or attention "
    "blocks, e.g. an MLP, a ResNet block, a transformer block).\n"
    "Answer with the digit alone: 1, 2 or 3."
)
_MAX_SOURCE = 12000


def _chat_url(endpoint: str) -> str:
    url = endpoint.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


def parse_level(text: str) -> int:
    """The level in an answer: the whole answer, `level N`, or the first 1-3 digit."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()
    for pattern in (r"^\s*([123])\s*\.?\s*$", r"level\s*([123])\b", r"(?<!\d)([123])(?!\d)"):
        m = re.search(pattern, text, flags=re.IGNORECASE)
        if m:
            return int(m.group(1))
    raise LabelError(f"no level 1-3 in the model's answer: {text[:200]!r}")


def _post_json(url: str, body: dict, api_key: str | None, timeout: float) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise LabelError(f"{url}: HTTP {e.code} {e.reason}: {detail}") from None
    except urllib.error.URLError as e:
        raise LabelError(f"{url}: cannot reach the endpoint: {e.reason}") from None
    except TimeoutError:
        raise LabelError(f"{url}: no answer within {timeout:g} s") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise LabelError(f"{url}: the answer is not JSON: {raw[:200]!r}") from None


def label_level_llm(
    source: str, endpoint: str, model: str, api_key: str | None = None, timeout: float = 60.0
) -> int:
    """Ask an OpenAI-compatible `/v1/chat/completions` endpoint for the level (1-3).

    `endpoint` is the server's base URL (`http://host:8000`, `.../v1`, or the full
    chat-completions URL). Raises `LabelError` on network errors, timeouts, HTTP errors
    and answers without a level.
    """
    url = _chat_url(endpoint)
    body = {
        "model": model,
        "temperature": 0,
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": LLM_PROMPT},
            {"role": "user", "content": source[:_MAX_SOURCE]},
        ],
    }
    payload = _post_json(url, body, api_key, timeout)
    try:
        text = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LabelError(f"{url}: no choices[0].message.content in {str(payload)[:200]}") from None
    return parse_level(str(text))
