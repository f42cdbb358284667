"""Scopes and reachability for the static checks: where torch compute is an offence.

`ScopeAnalysis` finds the kernels (functions decorated with `triton.jit`, `autotune` or
`heuristics`, and `triton.jit(fn)` calls), the functions whose bodies run with the
inputs in reach (`ModelNew`'s methods other than `__init__`, and the module functions,
classes and lambdas they reach or that `__init__` stores for later; with no `ModelNew`,
everything but `get_inputs`-style helpers), and the functions that launch kernels,
directly or through other functions. `scope(node)` is then one of: compute (torch
compute is an offence), jit (a kernel body), skip (an `if __name__ == "__main__":` body,
never run on import), other.

What it does NOT do: flag anything (see `checker`). Reachability follows plain names of
module functions and classes; a function reached only through a container or an alias
is not followed (the run-time op audit still sees what it runs).
"""

from __future__ import annotations

import ast

from tritonrl.verify.static.names import NameResolver, func_nodes, is_main_guard
from tritonrl.verify.static.rules import ENTRY_HELPERS, JIT_DECORATORS, KERNEL_DECORATORS


class ScopeAnalysis(NameResolver):
    """Kernels, what `ModelNew` reaches, launching functions and the scope of each node."""

    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.funcs = {
            n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for n in tree.body:  # module-level `name = lambda ...`
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        self.funcs[t.id] = n.value
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.jit_fns = self._find_jit_functions()
        self.compute_fns = self._compute_functions()
        self.launchers = self._launching_functions()
        self._scopes: dict[ast.AST, str] = {}

    # ----- scopes --------------------------------------------------------------------
    def _enclosing_fn(self, node: ast.AST) -> ast.AST | None:
        """The function or lambda whose body holds `node` (None at module/class level).
        Default values and annotations count as the function's own (a default such as
        `op=torch.matmul` is used by the body); decorators belong to the enclosing scope."""
        cur = node
        while cur in self.parents:
            parent, field = self.parents[cur]
            if field in ("body", "args") and isinstance(
                parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            ):
                return parent
            cur = parent
        return None

    def _in_main_block(self, node: ast.AST) -> bool:
        """Inside the body (not the else) of a module-level `if __name__ == "__main__":`."""
        cur = node
        while cur in self.parents:
            parent, field = self.parents[cur]
            if (
                field == "body"
                and is_main_guard(parent)
                and self.parents.get(parent, (None,))[0] is self.tree
            ):
                return True
            cur = parent
        return False

    def scope(self, node: ast.AST) -> str:
        """One of: compute (torch compute is an offence), jit (a kernel body), skip (a
        `__main__` block, not checked at all), other."""
        if node in self._scopes:
            return self._scopes[node]
        fn = self._enclosing_fn(node)
        if self._in_main_block(node):
            result = "skip"
        elif fn is None:
            result = "other"
        elif fn in self.jit_fns:
            result = "jit"
        elif fn in self.compute_fns:
            result = "compute"
        elif isinstance(fn, ast.Lambda):
            result = self._lambda_scope(fn)
        else:
            result = "other"
        self._scopes[node] = result
        return result

    def _lambda_scope(self, fn: ast.Lambda) -> str:
        """Lambdas run when called, typically at launch time (grid and heuristics
        callables): compute, unless written inside a kernel or a non-compute function
        other than an __init__."""
        outer = self.scope(fn)
        if outer != "other":
            return outer
        around = self._enclosing_fn(fn)
        return "compute" if around is None or getattr(around, "name", "") == "__init__" else outer

    def _find_jit_functions(self) -> set[ast.AST]:
        found: set[ast.AST] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    if self.resolve(target) in KERNEL_DECORATORS:
                        found.add(node)
            elif isinstance(node, ast.Call) and self.resolve(node.func) in JIT_DECORATORS:
                for arg in node.args:  # kernel = triton.jit(fn)
                    if isinstance(arg, ast.Name) and arg.id in self.funcs:
                        found.add(self.funcs[arg.id])
        return found

    def _has_jit_call(self) -> bool:
        return any(
            isinstance(n, ast.Call) and self.resolve(n.func) in JIT_DECORATORS
            for n in ast.walk(self.tree)
        )

    def _class_chain(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        chain, todo = [], [cls]
        while todo:
            c = todo.pop()
            if c in chain:
                continue
            chain.append(c)
            todo += [self.classes[b.id] for b in c.bases
                     if isinstance(b, ast.Name) and b.id in self.classes]  # fmt: skip
        return chain

    def _methods(self, cls: ast.ClassDef, with_init: bool) -> list[ast.AST]:
        return [
            m
            for c in self._class_chain(cls)
            for m in c.body
            if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (with_init or m.name != "__init__")
        ]

    def _compute_functions(self) -> set[ast.AST]:
        """Functions whose bodies run with the inputs in reach: ModelNew's methods other
        than __init__ and whatever module functions/classes they reach."""
        model = self.classes.get("ModelNew")
        todo: list[ast.AST] = []
        if model is None:  # no ModelNew (the compile stage will say so): check everything
            todo = [f for n, f in self.funcs.items() if n not in ENTRY_HELPERS]
            todo += [m for c in self.classes.values() for m in self._methods(c, False)]
        else:
            todo = self._methods(model, with_init=False)
            for init in [m for m in self._methods(model, True) if m.name == "__init__"]:
                todo += self._stored_references(init)
        done: set[ast.AST] = set()
        while todo:
            fn = todo.pop()
            if fn in done or fn in self.jit_fns:
                continue
            done.add(fn)
            for node in ast.walk(fn):
                if node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    todo.append(node)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    if node.id in self.funcs:
                        todo.append(self.funcs[node.id])
                    elif node.id in self.classes:
                        todo += self._methods(self.classes[node.id], with_init=True)
        return done

    def _stored_references(self, init: ast.AST) -> list[ast.AST]:
        """Module functions referenced but not called in __init__ (stored for forward),
        and the non-__init__ methods of module classes instantiated there."""
        out: list[ast.AST] = []
        for node in ast.walk(init):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                continue
            parent, field = self.parents.get(node, (None, ""))
            called = isinstance(parent, ast.Call) and field == "func"
            if node.id in self.funcs and not called:
                out.append(self.funcs[node.id])
            elif node.id in self.classes:
                out += self._methods(self.classes[node.id], with_init=False)
        return out

    # ----- launches and try/except ---------------------------------------------------
    @staticmethod
    def _is_launch(node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        if isinstance(node.func, ast.Subscript):  # kernel[grid](...)
            return True
        return (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "run"
            and any(k.arg == "grid" for k in node.keywords)
        )

    def _launching_functions(self) -> set[ast.AST]:
        """Non-jit functions that launch a kernel, directly or through module functions,
        classes or methods (by name)."""
        all_fns = [f for f in func_nodes(self.tree) if f not in self.jit_fns]
        by_name: dict[str, list[ast.AST]] = {}
        for f in all_fns:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                by_name.setdefault(f.name, []).append(f)
        for name, f in self.funcs.items():
            by_name.setdefault(name, []).append(f)
        launching = {f for f in all_fns if any(self._is_launch(n) for n in ast.walk(f))}
        changed = True
        while changed:
            changed = False
            for f in all_fns:
                if f in launching:
                    continue
                for n in ast.walk(f):
                    if not isinstance(n, ast.Call):
                        continue
                    name = n.func.id if isinstance(n.func, ast.Name) else (
                        n.func.attr if isinstance(n.func, ast.Attribute) else None)  # fmt: skip
                    if name in self.classes:
                        targets = self._methods(self.classes[name], with_init=True)
                    else:
                        targets = by_name.get(name or "", [])
                    if any(t in launching for t in targets):
                        launching.add(f)
                        changed = True
                        break
        return launching
