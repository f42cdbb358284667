"""Cheap tensor inference for the static checks: which expressions hold tensors or nn layers.

`TensorInference` knows the names bound to torch nn layers (or containers of them, and
the loop variables over those), the `self.x` attributes assigned tensors or registered
as buffers and parameters, and, per function, the names that hold tensors: parameters
annotated as tensors, `ModelNew.forward`'s arguments (unless annotated or defaulted as
plain values), and names assigned from torch calls, tensor methods or operators on
tensors (flow-insensitive, closures included). `_is_tensor(node, env)` answers for one
expression.

What it does NOT do: real type inference. A tensor returned by a candidate's own
function, bound by a loop or kept in a container is not known to be one; compute on it
is then only flagged where the method or operator cannot mean anything else (the
run-time op audit sees the rest).
"""

from __future__ import annotations

import ast

from tritonrl.verify.static.names import dotted_name, literal_str, lookup, torch_layer_class
from tritonrl.verify.static.rules import (
    NON_TENSOR_ANNOTS,
    NON_TENSOR_METHODS,
    NON_TENSOR_TORCH,
    TENSOR_ATTRS,
)
from tritonrl.verify.static.scopes import ScopeAnalysis


class TensorInference(ScopeAnalysis):
    """Nn layers and tensors known by name; `_is_tensor` for one expression."""

    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.layers = self._layer_attributes()
        self.self_tensors: set[str] = set()
        self.self_tensors = self._self_tensor_attributes()
        self._envs: dict[ast.AST, set[str]] = {}

    def _layer_called(self, node: ast.Call) -> str | None:
        """Name of the torch nn layer this call runs (`self.linear(x)`,
        `nn.Linear(a, b)(x)`, `self.seq[0](x)`), else None."""
        func = node.func
        key = dotted_name(func)
        if key in self.layers:
            return self.layers[key]
        if isinstance(func, ast.Subscript) and dotted_name(func.value) in self.layers:
            return self.layers[dotted_name(func.value)]
        if isinstance(func, ast.Call):
            qn = self.resolve(func.func)
            if qn and qn.startswith("torch."):
                return torch_layer_class(lookup(qn))
        return None

    def _layer_attributes(self) -> dict[str, str]:
        """Names and `self.x` attributes bound to torch nn layers (or to containers of
        them): name -> layer class name."""
        layers: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            layer = self._constructed_layer(node.value)
            if layer:
                for t in node.targets:
                    if dotted_name(t):
                        layers[dotted_name(t)] = layer
        for node in ast.walk(self.tree):  # `for layer in self.layers:` binds a layer
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                it = node.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                    it = it.func.value  # self.layers.values(), .children(), ...
                if dotted_name(it) in layers:
                    layers[node.target.id] = layers[dotted_name(it)]
        return layers

    def _constructed_layer(self, call: ast.Call) -> str | None:
        qn = self.resolve(call.func)
        if not (qn and qn.startswith("torch.")):
            return None
        obj = lookup(qn)
        layer = torch_layer_class(obj)
        if layer:
            return layer
        if isinstance(obj, type) and obj.__name__ in ("ModuleList", "ModuleDict"):
            for inner in ast.walk(call):
                if inner is not call and isinstance(inner, ast.Call):
                    found = self._constructed_layer(inner)
                    if found:
                        return found
        return None

    def _env(self, node: ast.AST) -> set[str]:
        """Names known to hold tensors in the function around `node` (flow-insensitive,
        closures included)."""
        fn = self._enclosing_fn(node)
        if fn is None:
            return set()
        if fn not in self._envs:
            self._envs[fn] = set()  # guards recursion through closures
            env = set(self._env(fn))
            env |= self._tensor_params(fn)
            for _ in range(3):
                for stmt in ast.walk(fn):
                    if isinstance(stmt, ast.Assign):
                        for t in stmt.targets:
                            self._bind(t, stmt.value, env)
                    elif isinstance(stmt, (ast.AnnAssign, ast.NamedExpr)) and stmt.value:
                        self._bind(stmt.target, stmt.value, env)
            self._envs[fn] = env
        return self._envs[fn]

    def _tensor_params(self, fn: ast.AST) -> set[str]:
        if isinstance(fn, ast.Lambda):
            return set()
        args = fn.args
        positional = args.posonlyargs + args.args
        defaults = dict(zip([a.arg for a in positional][::-1], args.defaults[::-1], strict=False))
        is_forward = fn.name == "forward" and self._in_model(fn)
        out = set()
        for a in positional + args.kwonlyargs:
            ann = ast.unparse(a.annotation) if a.annotation else ""
            if "Tensor" in ann:
                out.add(a.arg)
            elif is_forward and a.arg != "self" and ann.split("[")[0] not in NON_TENSOR_ANNOTS:
                default = defaults.get(a.arg)
                if not (isinstance(default, ast.Constant) and default.value is not None):
                    out.add(a.arg)
        if is_forward and args.vararg:
            out.add(args.vararg.arg)
        return out

    def _in_model(self, fn: ast.AST) -> bool:
        parent = self.parents.get(fn, (None,))[0]
        model = self.classes.get("ModelNew")
        return model is not None and any(parent is c for c in self._class_chain(model))

    def _bind(self, target: ast.AST, value: ast.AST, env: set[str]) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self._bind(t, v, env)
            return
        if isinstance(target, ast.Name) and self._is_tensor(value, env):
            env.add(target.id)

    def _is_tensor(self, node: ast.AST, env: set[str]) -> bool:
        """Whether `node` evaluates to a tensor, as far as a cheap inference can tell."""
        if isinstance(node, ast.Name):
            return node.id in env
        if isinstance(node, ast.Attribute):
            if node.attr in TENSOR_ATTRS:
                return True
            return dotted_name(node) in self.self_tensors
        if isinstance(node, ast.Subscript):
            return self._is_tensor(node.value, env)
        if isinstance(node, ast.BinOp):
            return self._is_tensor(node.left, env) or self._is_tensor(node.right, env)
        if isinstance(node, ast.UnaryOp):
            return self._is_tensor(node.operand, env)
        if isinstance(node, ast.IfExp):
            return self._is_tensor(node.body, env) or self._is_tensor(node.orelse, env)
        if isinstance(node, ast.Call):
            return self._call_returns_tensor(node, env)
        return False

    def _call_returns_tensor(self, node: ast.Call, env: set[str]) -> bool:
        qn = self.resolve(node.func)
        if qn:
            if not qn.startswith("torch.") or qn in NON_TENSOR_TORCH:
                return False
            if qn.startswith(("torch.cuda.", "torch.backends.")):
                return False
            obj = lookup(qn)
            if isinstance(obj, type):
                import torch

                return issubclass(obj, torch.Tensor)
            return True
        if self._layer_called(node):
            return True
        if isinstance(node.func, ast.Attribute):
            name = node.func.attr
            return name not in NON_TENSOR_METHODS and self._is_tensor(node.func.value, env)
        return False

    def _self_tensor_attributes(self) -> set[str]:
        """`self.x` attributes assigned tensors or parameters anywhere, plus buffers and
        parameters registered by name."""
        out: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if self._call_returns_tensor(node.value, set()):
                    out |= {dotted_name(t) for t in node.targets if isinstance(t, ast.Attribute)}
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("register_buffer", "register_parameter")
                and node.args
                and literal_str(node.args[0])
            ):
                out.add(f"self.{literal_str(node.args[0])}")
        out.discard(None)
        return out
