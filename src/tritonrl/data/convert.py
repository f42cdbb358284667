"""One KernelBook row -> a task in our contract and its SFT example (`convert_row`).

A row holds a PyTorch module (`python_code`: the class named by `entry_point`,
`get_inputs()`, and `get_init_inputs()` returning `[args, kwargs]`) and the Triton code
Inductor made from it (`triton_code`, class `<entry_point>New`). The conversion:

* reference: the entry class renamed `Model` (every use of the name follows: `super(X,
  self)`, helpers that build it); `get_init_inputs()` rewritten to return positional
  arguments only, keywords mapped onto the `__init__` signature and the defaults of
  skipped parameters written out (`Model(*get_init_inputs())` is how tasks are built);
* solution: the `<entry_point>New` class renamed `ModelNew`, any `get_inputs` /
  `get_init_inputs` dropped (the output contract forbids them);
* both must parse, the task must validate, and `sft_example` must accept the pair.

A row that cannot be converted raises `RowDropped` with one of `DROP_REASONS`. Renaming
works on tokens (names in strings, comments and attributes are left alone) and keeps the
formatting and comments of the original code.

What it does NOT do: it never runs the code (the Inductor solutions are CUDA-only and
specialised to one shape), and it does not de-duplicate, label or split (`kernelbook`).
"""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize

from tritonrl.astlock import AST_LOCK
from tritonrl.data.prompts import sft_example
from tritonrl.tasks.task import Task, TaskLoadError

DROP_REASONS = {
    "missing_code": "python_code or triton_code is empty",
    "reference_syntax_error": "python_code does not parse",
    "no_entry_class": "python_code defines no top-level class named by entry_point",
    "no_get_inputs": "python_code defines no get_inputs()",
    "init_inputs_unsupported": "get_init_inputs() cannot be turned into positional arguments",
    "name_clash": "the code already uses the name Model / ModelNew for something else",
    "solution_syntax_error": "triton_code does not parse",
    "no_new_class": "triton_code defines no `<entry_point>New` class",
    "invalid_task": "the converted reference is not a valid task",
    "sft_rejected": "the solution does not survive extraction as an SFT target",
    "duplicate": "the same reference (normalised) came earlier",
}


class RowDropped(Exception):
    """A row that cannot become a task: `reason` is a key of `DROP_REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail or DROP_REASONS[reason]}")
        self.reason, self.detail = reason, detail or DROP_REASONS[reason]


# --------------------------------------------------------------------------- code edits


def _name_tokens(source: str, name: str) -> list[tuple[int, int]]:
    """(row, col) of every NAME token `name` that is not an attribute (`x.name`)."""
    hits, prev = [], None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            after_dot = prev is not None and prev.type == tokenize.OP and prev.string == "."
            if tok.type == tokenize.NAME and tok.string == name and not after_dot:
                hits.append(tok.start)
            if tok.type not in (tokenize.NL, tokenize.COMMENT):
                prev = tok
    except (tokenize.TokenError, SyntaxError) as e:
        raise RowDropped("reference_syntax_error", f"cannot tokenize: {e}") from None
    return hits


def rename(source: str, old: str, new: str) -> str:
    """`source` with every use of the name `old` (not attributes, strings or comments)
    replaced by `new`; formatting and comments are kept."""
    lines = source.split("\n")
    for row, col in reversed(_name_tokens(source, old)):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "\n".join(lines)


def _char_offset(lines: list[str], lineno: int, col_bytes: int) -> int:
    """ast positions (1-based line, UTF-8 byte column) -> index into "\\n".join(lines)."""
    before = sum(len(line) + 1 for line in lines[: lineno - 1])
    return before + len(lines[lineno - 1].encode()[:col_bytes].decode(errors="ignore"))


def _splice(source: str, node: ast.AST, text: str) -> str:
    lines = source.split("\n")
    start = _char_offset(lines, node.lineno, node.col_offset)
    end = _char_offset(lines, node.end_lineno, node.end_col_offset)
    return source[:start] + text + source[end:]


def _parse(source: str, reason: str) -> ast.Module:
    try:
        with AST_LOCK:
            return ast.parse(source)
    except (SyntaxError, ValueError) as e:
        where = f"line {e.lineno}: " if getattr(e, "lineno", None) else ""
        raise RowDropped(reason, f"{where}{getattr(e, 'msg', e)}") from None


def _top_level(tree: ast.Module, kind: type, name: str):
    return next((n for n in tree.body if isinstance(n, kind) and n.name == name), None)


def _segment(source: str, node: ast.AST) -> str:
    if isinstance(node, ast.Starred):
        raise RowDropped("init_inputs_unsupported", "a starred argument in get_init_inputs()")
    return ast.get_source_segment(source, node)


def _positional(source: str, args: list[str], kwargs: dict[str, str], cls: ast.ClassDef):
    """Positional init arguments: `args`, then `kwargs` in `__init__`'s parameter order
    (defaults written out for parameters skipped in between)."""
    init = _top_level(cls, ast.FunctionDef, "__init__")
    if init is None:
        if kwargs:
            raise RowDropped(
                "init_inputs_unsupported",
                f"keyword init arguments {sorted(kwargs)} but {cls.name} has no __init__",
            )
        return args
    params = (init.args.posonlyargs + init.args.args)[1:]
    defaults = dict(zip([p.arg for p in params][::-1], init.args.defaults[::-1], strict=False))
    if len(args) > len(params) and init.args.vararg is None:
        raise RowDropped("init_inputs_unsupported", f"{len(args)} args for {len(params)} params")
    out, left = list(args), dict(kwargs)
    for p in params[len(args) :]:
        if p.arg in left:
            out.append(left.pop(p.arg))
        elif p.arg in defaults and left:
            out.append(_segment(source, defaults[p.arg]))
        elif p.arg not in defaults:
            raise RowDropped("init_inputs_unsupported", f"init argument {p.arg!r} is not given")
    if left:
        raise RowDropped(
            "init_inputs_unsupported",
            f"init keyword(s) {sorted(left)} match no positional parameter of {cls.name}.__init__",
        )
    return out


def _rewrite_init_inputs(source: str, tree: ast.Module, cls: ast.ClassDef) -> str:
    """KernelBook's `return [[args], {kwargs}]` -> `return [positional args]`; a
    KernelBench-style list (or no get_init_inputs) is left alone."""
    fn = _top_level(tree, ast.FunctionDef, "get_init_inputs")
    if fn is None:
        return source
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if len(returns) != 1 or returns[0].value is None:
        raise RowDropped("init_inputs_unsupported", "get_init_inputs() needs exactly one return")
    value = returns[0].value
    seq = (ast.List, ast.Tuple)
    if not isinstance(value, seq):
        raise RowDropped("init_inputs_unsupported", "get_init_inputs() returns no list literal")
    if not (
        len(value.elts) == 2
        and isinstance(value.elts[0], seq)
        and isinstance(value.elts[1], ast.Dict)
    ):
        return source  # already positional (KernelBench style)
    args = [_segment(source, a) for a in value.elts[0].elts]
    kwargs = {}
    for key, val in zip(value.elts[1].keys, value.elts[1].values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise RowDropped("init_inputs_unsupported", "a non-string key in the init kwargs")
        kwargs[key.value] = _segment(source, val)
    positional = _positional(source, args, kwargs, cls)
    return _splice(source, value, "[" + ", ".join(positional) + "]")


def convert_reference(python_code: str, entry: str) -> str:
    """KernelBook `python_code` -> a KernelBench reference (`class Model`)."""
    source = python_code.replace("\r\n", "\n").replace("\r", "\n")
    tree = _parse(source, "reference_syntax_error")
    cls = _top_level(tree, ast.ClassDef, entry)
    if cls is None:
        raise RowDropped("no_entry_class", f"no top-level class {entry!r} in python_code")
    if _top_level(tree, ast.FunctionDef, "get_inputs") is None:
        raise RowDropped("no_get_inputs")
    if entry != "Model" and _name_tokens(source, "Model"):
        raise RowDropped("name_clash", "python_code already uses the name Model")
    return rename(_rewrite_init_inputs(source, tree, cls), entry, "Model")


def _strip_functions(source: str, tree: ast.Module, names: set[str]) -> str:
    lines = source.split("\n")
    for node in reversed(tree.body):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            del lines[first - 1 : node.end_lineno]
    return "\n".join(lines)


def convert_solution(triton_code: str, entry: str) -> str:
    """KernelBook `triton_code` -> a candidate (`class ModelNew`, no task helpers)."""
    source = triton_code.replace("\r\n", "\n").replace("\r", "\n")
    tree = _parse(source, "solution_syntax_error")
    names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    name = f"{entry}New" if f"{entry}New" in names else None
    if name is None:
        ending = [n for n in names if n.endswith("New")]
        name = ending[0] if len(ending) == 1 else None
    if name is None:
        raise RowDropped("no_new_class", f"no class {entry}New in triton_code (classes: {names})")
    if name != "ModelNew" and _name_tokens(source, "ModelNew"):
        raise RowDropped("name_clash", "triton_code already uses the name ModelNew")
    source = _strip_functions(source, tree, {"get_inputs", "get_init_inputs"})
    return rename(source, name, "ModelNew")


def code_key(source: str) -> str:
    """Hash of the code's AST without docstrings: equal for code that differs only in
    formatting, comments or docstrings."""
    with AST_LOCK:
        tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:20]


def convert_row(
    row: dict, policy: str = "strict", include_example: bool = True,
    allowed_torch_ops: list[str] | None = None,
) -> tuple[Task, dict]:  # fmt: skip
    """One KernelBook row -> (Task at level 1, SFT example), its prompt naming `policy`
    and `allowed_torch_ops` (the verifier's). Raises `RowDropped`."""
    uuid = str(row.get("uuid"))
    python_code, triton_code = row.get("python_code") or "", row.get("triton_code") or ""
    if not python_code.strip() or not triton_code.strip():
        raise RowDropped("missing_code")
    entry = str(row.get("entry_point") or row.get("module_name") or "").strip()
    if not entry.isidentifier():
        raise RowDropped("no_entry_class", f"entry_point {entry!r} is not a class name")
    reference = convert_reference(python_code, entry)
    solution = convert_solution(triton_code, entry)
    try:
        task = Task(
            id=f"kernelbook:{uuid}",
            level=1,
            name=entry,
            source=reference,
            origin=f"kernelbook:{uuid}",
            solution=solution,
        )
    except TaskLoadError as e:
        raise RowDropped("invalid_task", e.reason) from None
    try:
        example = sft_example(reference, solution, policy=policy, include_example=include_example,
                              allowed_torch_ops=allowed_torch_ops)  # fmt: skip
    except ValueError as e:
        raise RowDropped("sft_rejected", str(e)) from None
    return task, example
