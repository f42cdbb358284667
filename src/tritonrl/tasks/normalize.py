"""Normal forms of a task's reference program, for finding copies (decontamination).

    form = normal_form(task.source)
    form.program   # hash of the whole program, names and sizes abstracted
    form.forward   # hash of the forward computation's op sequence (None: no op)
    form.ops       # that sequence, e.g. ("linear", "relu")
    form.text      # the normalised program as source, to see what was compared

Two references are **program-equal** when their normalised ASTs are equal, after:

* docstrings, comments, bare constant statements (`...`), `pass`, type annotations,
  imports and `super().__init__()` calls (in any spelling) are dropped;
* import aliases are resolved and attribute chains flattened (`F.relu`, `nn.functional.relu`
  and `torch.nn.functional.relu` are one name; `nn.Module` is `torch.nn.Module`);
* every function's parameters and local variables are renamed `v0, v1, ...` in order of
  first appearance (a method's first parameter is `self`), so `x` or `input` is the same;
* the attributes `Model` stores on `self` are renamed `a0, a1, ...` in order of first
  appearance (`self.linear` or `self.fc`); attributes only read (`self.training`) stay;
* the module-level numeric constants (the sizes and scalar parameters: `batch_size = 16`,
  `N = 2048 * 2`, `h, w = 24, 48`, `eps = 1e-5`) are dropped and each name read becomes a
  placeholder `S0, S1, ...` in order of first use: two tasks that differ only in the
  values or names of their sizes are equal, but `randn(N, N)` (one size twice) is not
  `randn(M, K)` (two sizes);
* a function whose body is straight-line assignments to names and a `return`, each value
  read exactly once, is that one `return` with the values substituted
  (`y = self.fc(x); y = y * s; return softmax(y)` is `return softmax(self.fc(x) * s)`;
  `x = torch.rand(B, D); return [x]` is `return [torch.rand(B, D)]`);
* in `get_inputs` and `get_init_inputs`, every numeric
  literal is the placeholder `SIZE` (`torch.randn(16, 32)` is `torch.randn(SIZE, SIZE)`),
  and `torch.rand` is `torch.randn` (the verifier rescales and shifts every input's
  values anyway, so the draw's distribution is not part of the problem);
* harmless orders are sorted: the top-level functions and classes by name, `Model`'s
  methods by name, a call's keyword arguments by name.

What stays, and so tells programs apart: every op and its spelling (`x.relu()` is not
`torch.relu(x)`; `torch.randint` is not `torch.randn`), the literals inside `Model`
(`dim=1` is not `dim=0`, `x * 0.5` is not `x * 2.0`), parameters' defaults, keyword
names, the order of statements and of operands, and helper functions' names.

Two references are **forward-equal** when the op sequences of their `Model.forward` are
equal and not empty: every call, operator and module the forward evaluates, in evaluation
order (arguments before the call), each by its lower-cased last name with a trailing `_`
(in-place) dropped: `torch.relu(x)`, `F.relu(x)`, `x.relu_()` and a module
`self.act = nn.ReLU()` called are all `relu`; `x @ w`, `torch.matmul` and `torch.mm` are
`matmul`; `a + b` and `torch.add(a, b)` are `add`; `x.T`, `x.t()` and `x.transpose(..)`
are `t`. Arguments, constants, shapes and
`__init__`'s settings are not compared, so this form catches renamed near-copies, and
also programs that only share their ops (a sum over rows and a sum over columns).
Program-equal references are forward-equal.

What it does NOT do: run anything (it reads the AST), or see through rewrites that change
the ops (`x * torch.sigmoid(x)` is not `silu`), or compare solutions.
"""

from __future__ import annotations

import ast
import copy
import hashlib
from dataclasses import dataclass

from tritonrl.tasks.task import parse_source

PROGRAM, FORWARD = "program", "forward"
FORMS = (PROGRAM, FORWARD)  # from the strictest to the weakest
INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")
SIZE = "SIZE"  # a numeric literal of get_inputs / get_init_inputs

# Spellings of one op in the forward form (names lower-cased, `_` suffix dropped first).
OP_ALIASES = {
    "mm": "matmul", "matmult": "matmul", "mult": "mul", "multiply": "mul",
    "truediv": "div", "divide": "div", "true_divide": "div", "subtract": "sub",
    "usub": "neg", "negative": "neg", "uadd": "pos", "floordiv": "floor_divide",
    "absolute": "abs", "clip": "clamp", "greater": "gt", "less": "lt",
    "transpose": "t", "mt": "t",
}  # fmt: skip
TRANSPOSES = ("T", "mT")  # attributes read in forward that count as the op `t`
# The random draws of get_inputs that differ only in the values' distribution: the
# verifier redraws, rescales and shifts every input anyway (tritonrl.verify.inputs).
RANDOM_DRAWS = {"torch.rand": "torch.randn", "torch.rand_like": "torch.randn_like"}


@dataclass(frozen=True)
class NormalForm:
    """A reference's normal forms (see the module docstring)."""

    program: str  # hex digest of the normalised program
    forward: str | None  # hex digest of `ops`; None when forward evaluates no op
    ops: tuple[str, ...]
    text: str  # the normalised program, unparsed

    def key(self, form: str) -> str | None:
        """The digest of `form` (`program` or `forward`)."""
        if form not in FORMS:
            raise ValueError(f"form must be one of {', '.join(FORMS)}, not {form!r}")
        return self.program if form == PROGRAM else self.forward


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def normal_form(source: str, where: str = "<reference>") -> NormalForm:
    """The normal forms of a reference source; a `TaskLoadError` if it does not parse."""
    tree = parse_source(source, where)  # a fresh tree: changed in place
    _normalise(tree)
    ops = tuple(forward_ops(tree))
    return NormalForm(
        program=_digest(ast.dump(tree)),
        forward=_digest("|".join(ops)) if ops else None,
        ops=ops,
        text=ast.unparse(tree),
    )


# --------------------------------------------------------------------------- the program


def _normalise(tree: ast.Module) -> None:
    aliases = _drop_noise(tree)
    _sort_definitions(tree)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    methods = {
        id(item)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for item in cls.body
        if isinstance(item, functions)
    }
    done: set[int] = set()  # functions renamed (with the ones they enclose)
    for node in ast.walk(tree):  # outer functions first
        if isinstance(node, functions) and id(node) not in done:
            _rename_locals(node, id(node) in methods)
            done.update(id(n) for n in _in_order(node) if isinstance(n, functions))
    _rename_attributes(tree)
    _replace_constants(tree)
    _resolve_names(tree, aliases)
    for fn in tree.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in INPUT_FUNCTIONS:
            for n in ast.walk(fn):
                if isinstance(n, ast.Name) and n.id in RANDOM_DRAWS:
                    n.id = RANDOM_DRAWS[n.id]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            node.keywords.sort(key=lambda k: (k.arg is None, k.arg or ""))


def _is_super_init(stmt: ast.stmt) -> bool:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "__init__"
        and isinstance(call.func.value, ast.Call)
        and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "super"
    )


def _noise(stmt: ast.stmt) -> bool:
    """A statement that does not change the program: a docstring or any bare constant,
    `pass`, an import, `super().__init__()`."""
    bare = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    return bare or isinstance(stmt, (ast.Pass, ast.Import, ast.ImportFrom)) or _is_super_init(stmt)


def _drop_noise(tree: ast.Module) -> dict[str, str]:
    """Drop what `_noise` names and the annotations; return the import aliases
    (`{"nn": "torch.nn", "F": "torch.nn.functional"}`)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if not _noise(s)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
    # `x: T = v` -> `x = v`; a bare `x: T` declares nothing at run time.
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and any(isinstance(s, ast.AnnAssign) for s in body):
                new = [
                    ast.Assign(targets=[s.target], value=s.value) if isinstance(s, ast.AnnAssign)
                    else s
                    for s in body
                    if not (isinstance(s, ast.AnnAssign) and s.value is None)
                ]  # fmt: skip
                setattr(node, name, new or [ast.Pass()])
    return aliases


def _sort_definitions(tree: ast.Module) -> None:
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    rest = [s for s in tree.body if not isinstance(s, defs)]
    tree.body = rest + sorted((s for s in tree.body if isinstance(s, defs)), key=lambda s: s.name)
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        methods = [s for s in cls.body if isinstance(s, defs)]
        others = [s for s in cls.body if not isinstance(s, defs)]
        cls.body = others + sorted(methods, key=lambda s: s.name)


def _in_order(node: ast.AST):
    """`node` and everything below it, depth first in source order."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _in_order(child)


def _rename_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> None:
    """Parameters and locals of `fn` -> v0, v1, ... (a method's first parameter: self);
    a function defined inside `fn` is renamed with it, as one scope."""
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    declared = {
        name for n in _in_order(fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names
    }
    names: dict[str, str] = {}
    first = params[0].arg if params and is_method else None
    for p in params:
        if p.arg == first:
            names[p.arg] = "self"
        else:
            names.setdefault(p.arg, f"v{len(names) - (first is not None)}")
    for n in _in_order(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in declared:
            names.setdefault(n.id, f"v{len(names) - (first is not None)}")
        elif isinstance(n, ast.arg) and n.arg not in names:  # a lambda's parameters
            names[n.arg] = f"v{len(names) - (first is not None)}"
    for n in _in_order(fn):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]
        elif isinstance(n, ast.arg) and n.arg in names:
            n.arg = names[n.arg]
    _inline_locals(fn)


def _inline_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """A straight-line body (`name = expr` statements, then a `return`) becomes one
    `return` with each value substituted where it is read, when every value assigned is
    read exactly once: `y = self.fc(x); y = y * s; return softmax(y)` is
    `return softmax(self.fc(x) * s)`. Any other body is left as it is."""
    body = fn.body
    simple = all(
        isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        for s in body[:-1]
    )
    if len(body) < 2 or not isinstance(body[-1], ast.Return) or not simple:
        return
    values: dict[str, int] = {}  # a name -> the assignment whose value it holds now
    exprs: list[ast.expr] = []
    reads: list[int] = []

    class Inline(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id not in values:
                return node
            reads[values[node.id]] += 1
            return copy.deepcopy(exprs[values[node.id]])

    for stmt in body[:-1]:
        exprs.append(Inline().visit(copy.deepcopy(stmt.value)))  # the body stays as it is
        reads.append(0)
        values[stmt.targets[0].id] = len(exprs) - 1
    result = Inline().visit(copy.deepcopy(body[-1]))
    if all(n == 1 for n in reads):
        fn.body = [result]


def _rename_attributes(tree: ast.Module) -> None:
    """The attributes `class Model` stores on `self` -> a0, a1, ... by first appearance."""
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "Model"):
            continue
        attrs = [
            n
            for n in _in_order(cls)
            if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        ]
        stored = {n.attr for n in attrs if isinstance(n.ctx, ast.Store)}
        names: dict[str, str] = {}
        for n in attrs:
            if n.attr in stored:
                n.attr = names.setdefault(n.attr, f"a{len(names)}")


def _numeric(node: ast.expr, known: set[str]) -> bool:
    """A number, or arithmetic of numbers and known constants, or a tuple of those."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id in known
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand, known)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left, known) and _numeric(node.right, known)
    if isinstance(node, ast.Tuple):
        return all(_numeric(e, known) for e in node.elts)
    return False


def _targets(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
        return [e.id for e in node.elts]
    return None


def _replace_constants(tree: ast.Module) -> None:
    """Module-level numeric constants -> S0, S1, ... by first use; literals in the input
    functions -> SIZE."""
    constants: set[str] = set()
    kept = []
    for stmt in tree.body:
        names = None
        if isinstance(stmt, ast.Assign) and _numeric(stmt.value, constants):
            found = [_targets(t) for t in stmt.targets]
            if all(f is not None for f in found):
                names = [n for f in found for n in f]
        if names:
            constants.update(names)
        else:
            kept.append(stmt)
    tree.body = kept
    placeholders: dict[str, str] = {}
    for n in _in_order(tree):
        if isinstance(n, ast.Name) and n.id in constants:
            n.id = placeholders.setdefault(n.id, f"S{len(placeholders)}")
    for fn in tree.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in INPUT_FUNCTIONS:
            _literals_to_size(fn)


def _literals_to_size(fn: ast.AST) -> None:
    class Sizes(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant) -> ast.AST:
            number = isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
            return ast.Name(id=SIZE, ctx=ast.Load()) if number else node

    Sizes().visit(fn)


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` of an attribute chain rooted at a name; None otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _resolve_names(tree: ast.Module, aliases: dict[str, str]) -> None:
    """Import aliases resolved, attribute chains rooted at a name made one dotted name."""

    class Resolve(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            head, _, tail = node.id.partition(".")
            if head in aliases:
                node.id = aliases[head] + (f".{tail}" if tail else "")
            return node

        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            name = _dotted(node)
            if name is None:
                self.generic_visit(node)
                return node
            return self.visit_Name(ast.Name(id=name, ctx=node.ctx))

    Resolve().visit(tree)


# --------------------------------------------------------------------------- forward


def _op(name: str) -> str:
    name = name.rsplit(".", 1)[-1].lower()
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return OP_ALIASES.get(name, name)


def _modules(cls: ast.ClassDef) -> dict[str, str]:
    """`self.aK` -> the op of the module `__init__` stores there (`torch.nn.Linear(..)`)."""
    found = {}
    for n in _in_order(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            func = n.value.func
            if isinstance(func, ast.Name):
                for t in n.targets:
                    if isinstance(t, ast.Name) and t.id.startswith("self."):
                        found[t.id] = _op(func.id)
    return found


def forward_ops(tree: ast.Module) -> list[str]:
    """The op sequence of `Model.forward` in a normalised tree (see the module docstring);
    empty when there is no such method."""
    cls = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"), None)
    fn = cls and next((s for s in cls.body if getattr(s, "name", None) == "forward"), None)
    if fn is None:
        return []
    modules, ops = _modules(cls), []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):  # a method of a computed value
                visit(func.value)
            elif not isinstance(func, ast.Name):  # `nn.ReLU()(x)` and the like
                visit(func)
            for child in [*node.args, *(k.value for k in node.keywords)]:
                visit(child)
            if isinstance(func, ast.Name):
                ops.append(modules.get(func.id) or _op(func.id))
            elif isinstance(func, ast.Attribute):
                ops.append(_op(func.attr))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
            return  # a literal (`dim=-1`), not an op
        elif isinstance(node, (ast.BinOp, ast.UnaryOp)):
            for child in ast.iter_child_nodes(node):
                visit(child)
            if not isinstance(node.op, (ast.Not, ast.UAdd)):
                ops.append(_op(type(node.op).__name__))
        elif isinstance(node, ast.Name) and node.id.rpartition(".")[2] in TRANSPOSES:
            ops.append("t")
        elif isinstance(node, ast.AugAssign):
            visit(node.value)
            ops.append(_op(type(node.op).__name__))
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    for stmt in fn.body:
        visit(stmt)
    return ops
