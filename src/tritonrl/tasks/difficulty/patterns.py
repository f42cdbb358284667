"""Patterns of `forward` counted as one op, and the helpers that recognise them.

`Patterns` is a mixin of `forward.Forward`: a normalisation written out
(`x / torch.sqrt(torch.mean(x**2) + eps)`, `x * rsqrt(...)`, `(x - mean) / std`) counts
as one `normalize`; a residual (`f(g(x)) + x` around two or more weight layers) is noted;
`_scalar` tells arithmetic on plain numbers from arithmetic on tensors; `_key` gives an
expression a text key with names replaced by what they hold.

What it does NOT do: it does not walk statements or count calls (`Forward` does); it
relies on `Forward`'s state and on its `_visit`, `_called_sub` and `_heavy_count`.
"""

from __future__ import annotations

import ast

from tritonrl.tasks.difficulty.modules import Init, Module, Sub, dotted_name, is_self_attr
from tritonrl.tasks.difficulty.ops import REDUCTIONS, TORCH_CONSTANTS, OpSummary, is_heavy, op_name

_KEY_CAP = 4000  # longest expression key kept verbatim (longer ones are hashed)


class Patterns:
    """Pattern and value helpers over the state of a `Forward` walk."""

    module: Module
    init: Init
    summary: OpSummary
    bound: dict[int, ast.AST]  # id of a Name -> the value it holds there
    params: set[str]
    loop_vars: dict[str, Sub]  # loop variable -> the container it runs over
    seen: set[int]
    keys: dict[int, str]

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
        return any(f"attr='{r}'" in key for r in REDUCTIONS)

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
        dotted = dotted_name(node.func, self.module.aliases) or ""
        name = dotted.rsplit(".", 1)[-1] if dotted else getattr(node.func, "attr", "")
        return is_heavy(op_name(name)) if name else False

    def _check_residual(self, node: ast.BinOp) -> None:
        """`f(g(x)) + x` with two or more weight layers in between."""
        for a, b in ((node.left, node.right), (node.right, node.left)):
            ka, kb = self._key(a), self._key(b)
            wraps = not self._scalar(a) and ka != kb and ka in kb
            if wraps and self._heavy_count(b) - self._heavy_count(a) >= 2:
                self.summary.residual = True

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
            attr = is_self_attr(node)
            if attr is not None:
                return attr not in self.init.tensors and attr not in self.init.subs
            if node.attr in ("shape", "ndim", "dtype", "device"):
                return True
            dotted = dotted_name(node, self.module.aliases) or ""
            return dotted.startswith("math.") or dotted in TORCH_CONSTANTS
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
        dotted = dotted_name(func, self.module.aliases) or ""
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
