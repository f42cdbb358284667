"""Static (AST) checks on a candidate kernel's source: the verifier's first cheating filter.

`static_check(source)` parses the candidate, resolves what its names really refer to
(import aliases such as `import torch as T`, `from torch import compile as c`,
`import torch.nn.functional as F`, plain re-bindings such as `c = torch.compile` or
`self.fn = torch.matmul`, `getattr(torch, "compile")` with a literal string, star
imports of allowed modules) and reports `Finding`s whose `flag` names one HACKS.md
category. The flags (stable names, they go into `VerifyResult.flags`) are listed in
`FLAGS` below with the HACKS.md rows they answer.

Scopes. Torch compute is only an offence where it can see the inputs: in `ModelNew`'s
methods other than `__init__`, in every module function, class or lambda they reach, in
lambdas (grid and heuristics callables run at launch time), and in the decorators of
kernels. `ModelNew.__init__` (parameter initialisation), `get_inputs`-style helpers that
nothing reaches, module-level code and `if __name__ == "__main__":` blocks (never run
when the verifier imports the module) may call torch freely; module-level code may not
store torch compute functions for later (`OPS = [torch.relu]`). `@triton.jit` bodies are
never checked for torch compute (`tl.*` and operators there are the kernel), but any
`torch.*` callable used inside one is flagged: it can only run under the interpreter.

Decisions (documented here because the tests pin them):
* Allowed in strict policy: allocation (`torch.empty*`, `zeros*`, `ones*`, `full*`,
  `arange`, `tensor`, `as_tensor`), views and layout (`view`, `reshape`, `t`,
  `transpose`, `permute`, `contiguous`, `flatten`, `(un)squeeze`, `expand`, `narrow`,
  `split`, `chunk`, indexing), metadata (`shape`, `size`, `stride`, `numel`, `dim`,
  `dtype`, `device`, `data_ptr`, `is_contiguous`, `item`), copies and dtype/device
  casts (`clone`, `copy_`, `to`, `float`, `half`, ...: data movement, not compute;
  precision games are answered by per-dtype tolerances), `zero_`/`fill_`,
  `nn.Parameter`, `nn.Module` construction, `torch.manual_seed`, `torch.cuda` queries
  (device properties, `synchronize`, `current_stream`), `triton.*` helpers
  (`cdiv`, `next_power_of_2`, `Config`, `autotune`, `heuristics`,
  `runtime.driver`), `math.*`.
* Imports are allowed from an allow-list (`ALLOWED_IMPORTS`: torch, triton, math, typing,
  functools, dataclasses, itertools, collections, enum, abc, numbers, warnings, random,
  copy, string, re, os, sys, time, builtins); dangerous *uses* of `os`, `sys`, `time`
  are flagged individually. Anything else (numpy included: host compute the op audit
  cannot see) is flagged `reference_access` ("import outside the allow-list").
* Private torch/triton API (`torch._C`, `torch.utils._python_dispatch`, ...) is flagged
  `introspection`: it is how the run-time op audit would be switched off.

What this does NOT do: prove anything. Python is dynamic and a determined author can
spell around any AST check; that is why HACKS.md asks for run-time checks as well
(`tritonrl.verify.guards`) and why verdicts are computed on the trusted side. The checks
lean towards flagging odd code rather than missing a cheat, while honest kernels
(including the builtin solutions, which the test suite scans) must give no findings.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import logging
import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

POLICIES = ("strict", "partial")

# flag -> (HACKS.md rows, what it means)
FLAGS: dict[str, str] = {
    "torch_compile": "#20: torch.compile / Inductor / Dynamo / TorchScript / fx / export",
    "hidden_code": "#21: exec, eval, compile(), __import__, importlib, decoding modules, "
    "getattr with a computed name on a module, torch.library, triton pre-run hooks",
    "ctypes": "#21/#23: native code: ctypes, cffi, cpp_extension, load_library, triton.compile",
    "subprocess": "#23/#24: subprocess, os.system/popen/exec*/spawn*/fork/kill, pty, "
    "multiprocessing, signal, pip",
    "threading": "#10: threading, _thread, concurrent.futures, asyncio, torch.jit.fork",
    "introspection": "#4/#13: sys.modules, frames, gc, inspect, globals(), __dict__, "
    "__subclasses__, private torch/triton API (dispatch-mode tampering)",
    "monkeypatch": "#12/#13: assignment, setattr or delattr on torch, triton, time, os, sys, "
    "builtins or any other imported module; os.environ writes",
    "try_except_launch": "#3: try/except in code that launches kernels; exception-swallowing "
    "context managers",
    "torch_compute": "#1: torch compute (functions, tensor methods, operators on tensors, "
    "host round-trips via .numpy()/.tolist()) where inputs are visible",
    "nn_compute_layer": "#1: calling an nn layer or torch.nn.functional in the forward path",
    "io": "#23: open(), pathlib, shutil, tempfile, sockets, urllib, requests, torch.save/load",
    "reference_access": "#4: the name Model, reference/harness imports, imports outside the "
    "allow-list, relative imports",
    "no_triton_kernel": "#2: no @triton.jit function is defined",
    "timing_tamper": "#12: time.*, timeit, torch.cuda.Event, triton.testing, profilers",
    "side_stream": "#9: CUDA streams and graphs",
    "forged_verdict": "#14: sys.exit, exit(), quit(), os._exit, atexit, raise SystemExit",
    "output_type": "#11: tensor subclasses, __torch_function__/__torch_dispatch__, as_subclass",
    "syntax_error": "not a cheat: the source does not parse (the compile stage fails anyway)",
}

ALLOWED_IMPORTS = frozenset(
    {
        "torch", "triton", "math", "typing", "typing_extensions", "functools", "dataclasses",
        "itertools", "collections", "__future__", "enum", "abc", "numbers", "warnings",
        "random", "copy", "string", "re", "os", "sys", "time", "builtins",
    }
)  # fmt: skip

# Imports that look like a way to the reference model or the verifier itself.
REFERENCE_MODULES = frozenset(
    {
        "reference", "ref", "model", "models", "task", "tasks", "harness", "tritonrl",
        "__main__", "main", "solution", "verify", "conftest", "kernelbench", "src",
    }
)  # fmt: skip

# (flag, qualified-name prefixes); the first matching prefix wins, in this order. "x"
# matches x and x.*; "x*" matches any name starting with x.
_RULE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("threading", ("torch.jit.fork", "torch.jit.wait")),
    (
        "torch_compile",
        (
            "torch.compile", "torch._dynamo", "torch._inductor", "torch._export",
            "torch._functorch", "torch.compiler", "torch.jit", "torch.export", "torch.fx",
            "torch.onnx", "functorch",
        ),
    ),
    (
        "ctypes",
        (
            "torch.utils.cpp_extension", "torch.ops.load_library", "torch.classes", "ctypes",
            "_ctypes", "cffi", "triton.compile", "triton.compiler", "triton._C",
        ),
    ),
    ("hidden_code", ("torch.library",)),
    ("introspection", ("torch.utils._python_dispatch", "torch.overrides")),
    ("subprocess", ("torch.multiprocessing",)),
    ("io", ("torch.hub", "torch.save", "torch.load", "torch.distributed")),
    ("timing_tamper", ("torch.cuda.Event", "torch.Event")),
    (
        "side_stream",
        (
            "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.streams",
            "torch.cuda.set_stream", "torch.cuda.ExternalStream", "torch.cuda.graph",
            "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
            "torch.Stream",
        ),
    ),
    (
        "timing_tamper",
        (
            "torch.profiler", "torch.autograd.profiler", "torch.utils.benchmark", "triton.testing",
            "time.*", "timeit",
        ),
    ),
    (
        "hidden_code",
        (
            "builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__",
            "importlib", "base64", "codecs", "binascii", "zlib", "marshal", "pickle", "_pickle",
            "dill", "cloudpickle", "types", "runpy", "imp", "zipimport", "lzma", "bz2", "gzip",
        ),
    ),
    (
        "forged_verdict",
        (
            "builtins.exit", "builtins.quit", "builtins.SystemExit", "sys.exit", "os._exit",
            "atexit",
        ),
    ),
    (
        "subprocess",
        (
            "subprocess", "os.system", "os.popen", "os.exec*", "os.spawn*", "os.fork*",
            "os.posix_spawn*", "os.kill*", "os.abort", "os.setsid", "pty", "multiprocessing",
            "signal", "pip", "ensurepip", "setuptools", "distutils",
        ),
    ),
    ("threading", ("threading", "_thread", "concurrent", "asyncio", "sched")),
    (
        "introspection",
        (
            "sys.modules", "sys._*", "sys.settrace", "sys.setprofile", "sys.meta_path",
            "sys.path_hooks", "sys.path_importer_cache", "sys.path", "sys.addaudithook",
            "sys.monitoring", "gc", "inspect", "traceback", "dis", "builtins.globals",
            "builtins.locals", "builtins.vars", "builtins.breakpoint", "builtins.__build_class__",
        ),
    ),
    ("monkeypatch", ("os.putenv", "os.unsetenv")),
    (
        "io",
        (
            "builtins.open", "builtins.input", "io", "pathlib", "shutil", "tempfile", "glob",
            "fileinput", "socket", "ssl", "urllib", "requests", "http", "httpx", "aiohttp",
            "ftplib", "smtplib", "telnetlib", "xmlrpc", "webbrowser", "sqlite3", "mmap", "os.path",
            "os.open", "os.fdopen", "os.read", "os.write", "os.remove", "os.unlink", "os.rename",
            "os.replace", "os.mkdir", "os.makedirs", "os.rmdir", "os.removedirs", "os.listdir",
            "os.scandir", "os.walk", "os.chdir", "os.symlink", "os.link", "os.truncate",
            "os.chmod", "os.chown", "os.mkfifo", "os.pipe", "os.dup", "os.dup2", "os.sendfile",
        ),
    ),
)  # fmt: skip
_RULES = tuple((p, flag) for flag, prefixes in _RULE_GROUPS for p in prefixes)

# Attribute names flagged whatever object they are read from.
_ATTR_FLAGS: dict[str, str] = {
    **dict.fromkeys(
        (
            "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame", "cr_frame",
            "ag_frame", "tb_frame", "tb_next", "gi_code", "__globals__", "__builtins__",
            "__subclasses__", "__code__", "__closure__", "__dict__", "__class__", "__bases__",
            "__base__", "__mro__", "__self__", "__func__", "__wrapped__", "__defaults__",
            "__kwdefaults__", "__getattribute__", "__reduce__", "__reduce_ex__", "__loader__",
            "__spec__",
        ),
        "introspection",
    ),
    "__setattr__": "monkeypatch",
    "__delattr__": "monkeypatch",
    "__import__": "hidden_code",
    "add_pre_run_hook": "hidden_code",
    "pre_run_hooks": "hidden_code",
    "__torch_function__": "output_type",
    "__torch_dispatch__": "output_type",
    "as_subclass": "output_type",
    "_make_subclass": "output_type",
    "_make_wrapper_subclass": "output_type",
    "Model": "reference_access",
}  # fmt: skip

# Names a Name/target may not rebind (an import under another name would be harmless,
# these change how the module is seen by the harness).
_PROTECTED_NAMES = frozenset({"__name__", "__builtins__", "__file__", "__spec__", "__loader__"})

_JIT_DECORATORS = frozenset(
    {"triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit", "triton.language.jit"}
)
_KERNEL_DECORATORS = _JIT_DECORATORS | frozenset(
    {
        "triton.autotune", "triton.heuristics", "triton.runtime.autotune",
        "triton.runtime.heuristics", "triton.runtime.autotuner.autotune",
        "triton.runtime.autotuner.heuristics",
    }
)  # fmt: skip

# torch.* callables allowed in the forward path under the strict policy.
ALLOWED_TORCH_CALLS = frozenset(
    "torch." + n
    for n in (
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
        "full", "full_like", "arange", "tensor", "as_tensor", "scalar_tensor", "manual_seed",
        "is_tensor", "is_floating_point", "is_complex", "numel", "finfo", "iinfo",
        "get_default_dtype", "get_default_device", "promote_types", "can_cast",
        "broadcast_shapes", "is_grad_enabled", "is_inference_mode_enabled", "as_strided",
        "reshape", "transpose", "permute", "t", "flatten", "unflatten", "unsqueeze",
        "squeeze", "narrow", "split", "chunk", "unbind", "movedim", "moveaxis", "swapaxes",
        "swapdims", "select", "view_as_real", "view_as_complex", "broadcast_to", "clone",
        "set_grad_enabled", "no_grad", "inference_mode", "enable_grad", "get_device",
    )
)  # fmt: skip

# Tensor methods (and attributes) that allocate, view, copy, cast or read metadata.
ALLOWED_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "contiguous", "t", "transpose", "permute",
        "flatten", "unflatten", "unsqueeze", "squeeze", "expand", "expand_as", "narrow",
        "split", "chunk", "unbind", "select", "unfold", "movedim", "moveaxis", "swapaxes",
        "swapdims", "as_strided", "stride", "size", "numel", "nelement", "dim", "ndimension",
        "data_ptr", "is_contiguous", "element_size", "storage_offset", "untyped_storage",
        "get_device", "is_floating_point", "is_complex", "to", "cpu", "cuda", "float", "half",
        "double", "bfloat16", "int", "long", "short", "bool", "byte", "char", "type",
        "type_as", "clone", "copy", "detach", "requires_grad", "new_empty", "new_zeros",
        "new_ones", "new_full", "new_empty_strided", "new_tensor", "item", "zero", "fill",
        "pin_memory", "is_pinned", "resize", "view_as_real", "register_buffer",
        "register_parameter", "parameters", "named_parameters", "buffers", "modules",
        "children", "state_dict", "load_state_dict", "eval", "train", "apply",
        "save_for_backward", "mark_dirty", "mark_non_differentiable",
    }
)  # fmt: skip

# Tensor methods that compute. Those in _AMBIGUOUS_METHODS also exist on Python objects
# (set.add, list.sort, ...), so they count only when the receiver is known to be a tensor.
COMPUTE_METHODS = frozenset(
    {
        "matmul", "mm", "bmm", "mv", "addmm", "addmv", "addbmm", "baddbmm", "addr", "einsum",
        "relu", "relu6", "sigmoid", "tanh", "softmax", "log_softmax", "logsumexp", "exp",
        "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sin",
        "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "atan2", "erf", "erfc", "erfinv",
        "clamp", "clamp_min", "clamp_max", "clip", "cumsum", "cumprod", "cummax", "cummin",
        "logcumsumexp", "amax", "amin", "aminmax", "argmax", "argmin", "topk", "kthvalue",
        "median", "nanmedian", "mode", "norm", "var", "std", "nansum", "nanmean", "sum",
        "mean", "prod", "max", "min", "masked_fill", "masked_scatter", "masked_select",
        "index_select", "index_add", "index_copy", "index_fill", "index_put", "index_reduce",
        "scatter", "scatter_add", "scatter_reduce", "gather", "take", "take_along_dim",
        "where", "lerp", "addcmul", "addcdiv", "fmod", "remainder", "floor_divide",
        "true_divide", "sign", "sgn", "neg", "negative", "abs", "absolute", "square", "pow",
        "float_power", "mul", "multiply", "div", "divide", "sub", "subtract", "tril", "triu",
        "diag", "diag_embed", "diagonal", "trace", "outer", "ger", "dot", "vdot", "inner",
        "cross", "kron", "tensordot", "maximum", "minimum", "fmax", "fmin", "floor", "ceil",
        "trunc", "frac", "round", "nan_to_num", "logit", "repeat", "repeat_interleave", "tile",
        "flip", "fliplr", "flipud", "roll", "rot90", "argsort", "msort", "unique", "bincount",
        "histc", "renorm", "dist", "eq", "ne", "lt", "gt", "le", "ge", "equal", "isclose",
        "allclose", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
        "logical_and", "logical_or", "logical_xor", "logical_not", "nonzero", "count_nonzero",
        "conv1d", "conv2d", "conv3d", "linear", "hardtanh", "softplus", "gelu",
        "silu", "mish", "elu", "selu", "leaky_relu", "hardswish", "hardsigmoid",
        "sort", "add", "all", "any", "cov", "corrcoef", "lu", "cholesky",
        "inverse", "pinverse", "det", "logdet", "slogdet", "svd", "qr", "matrix_power",
        "matrix_exp", "triangular_solve", "cholesky_solve", "lstsq", "pinv",
    }
)  # fmt: skip
_AMBIGUOUS_METHODS = frozenset({"add", "sort", "all", "any", "count", "index", "copy"})
_HOST_ROUNDTRIP = frozenset({"numpy", "tolist", "__array__", "from_numpy", "frombuffer"})
_DUNDER_COMPUTE = frozenset(
    f"__{n}__"
    for n in (
        "matmul", "rmatmul", "imatmul", "add", "radd", "iadd", "sub", "rsub", "isub", "mul",
        "rmul", "imul", "truediv", "rtruediv", "itruediv", "floordiv", "rfloordiv", "mod",
        "pow", "rpow", "neg", "abs", "and", "or", "xor", "invert", "lt", "le", "gt", "ge",
        "eq", "ne",
    )
)  # fmt: skip
# Methods and attributes whose result is not a tensor.
_NON_TENSOR_METHODS = frozenset(
    {
        "stride", "size", "numel", "nelement", "dim", "ndimension", "data_ptr", "item",
        "is_contiguous", "element_size", "storage_offset", "get_device", "tolist",
        "is_floating_point", "is_complex", "untyped_storage", "numpy", "equal", "allclose",
    }
)  # fmt: skip
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "weight", "bias", "grad", "real", "imag"})
_NON_TENSOR_TORCH = frozenset(
    "torch." + n
    for n in (
        "is_tensor", "is_floating_point", "is_complex", "numel", "finfo", "iinfo",
        "get_default_dtype", "promote_types", "can_cast", "broadcast_shapes", "device", "Size",
        "manual_seed", "is_grad_enabled", "no_grad", "inference_mode", "enable_grad", "dtype",
        "equal", "allclose",
    )
)  # fmt: skip
# nn.Module subclasses that hold things without computing.
_NN_CONTAINERS = frozenset({"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
# Builtins that compute on a tensor, or read all its values on the host (its text).
_BUILTIN_COMPUTE = frozenset(
    {"sum", "max", "min", "abs", "pow", "round", "divmod", "sorted", "repr", "str", "format",
     "ascii", "bytes", "bytearray", "memoryview"}
)  # fmt: skip
_BINOP_NAMES = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floor_divide",
    ast.Mod: "remainder", ast.Pow: "pow", ast.LShift: "bitwise_left_shift",
    ast.RShift: "bitwise_right_shift", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor",
    ast.BitAnd: "bitwise_and", ast.MatMult: "matmul",
}  # fmt: skip
_CMP_NAMES = {
    ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"
}  # fmt: skip
_NON_TENSOR_ANNOTS = frozenset({"int", "float", "bool", "str", "tuple", "list", "dict"})
_ENTRY_HELPERS = frozenset({"get_inputs", "get_init_inputs"})
_MISSING = object()


@dataclass(frozen=True)
class Finding:
    """One static finding: a `flag` from `FLAGS`, the source line, and what was seen."""

    flag: str
    line: int
    detail: str


def static_check(
    source: str, policy: str = "strict", allowed_torch_ops: frozenset[str] = frozenset()
) -> list[Finding]:
    """Check candidate source; `[]` means nothing suspicious was found.

    `policy` is "strict" (all computation in Triton) or "partial" (torch/nn ops named in
    `allowed_torch_ops` are allowed, e.g. {"matmul", "relu"}; "torch."/"F." prefixes are
    ignored). Findings are sorted by line and deduplicated.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {POLICIES}")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Finding("syntax_error", e.lineno or 0, str(e.msg))]
    allowed = frozenset(_op_key(a) for a in allowed_torch_ops) if policy == "partial" else None
    findings = _Checker(tree, allowed).run()
    log.debug("static_check: %d findings (%s)", len(findings), sorted({f.flag for f in findings}))
    return findings


def _op_key(name: str) -> str:
    for prefix in ("torch.nn.functional.", "torch.", "nn.functional.", "F.", "aten::", "aten."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.lower()


def _rule_flag(qualname: str) -> str | None:
    for prefix, flag in _RULES:
        if prefix.endswith("*"):
            if qualname.startswith(prefix[:-1]):
                return flag
        elif qualname == prefix or qualname.startswith(prefix + "."):
            return flag
    return None


def _is_private(qualname: str) -> bool:
    parts = qualname.split(".")
    if parts[0] not in ("torch", "triton"):
        return False
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


def _lookup(qualname: str) -> object:
    """The object `qualname` names in an allowed module, without triggering lazy imports
    (attributes are read statically); `_MISSING` when unknown."""
    parts = qualname.split(".")
    if parts[0] not in ALLOWED_IMPORTS or parts[0] in ("os", "sys", "builtins"):
        return _MISSING
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return _MISSING
    for i, part in enumerate(parts[1:], start=1):
        if isinstance(obj, types.ModuleType):
            nxt = vars(obj).get(part, _MISSING)
            if nxt is _MISSING:
                nxt = sys.modules.get(".".join(parts[: i + 1]), _MISSING)
        else:
            nxt = inspect.getattr_static(obj, part, _MISSING)
        if nxt is _MISSING:
            return _MISSING
        obj = nxt
    return obj


def _torch_layer_class(obj: object) -> str | None:
    """Name of an nn layer class (nn.Module subclass that computes), else None."""
    if not isinstance(obj, type):
        return None
    import torch

    if issubclass(obj, torch.nn.Module) and obj.__name__ not in _NN_CONTAINERS:
        return obj.__name__
    return None


def _literal_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain (also `getattr(a, "b")`), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if _is_getattr_literal(node):
        base = _dotted(node.args[0])
        return f"{base}.{_literal_str(node.args[1])}" if base else None
    return None


def _is_getattr_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and _literal_str(node.args[1]) is not None
    )


def _is_reference_like(node: ast.AST) -> bool:
    """Expressions that merely name something (candidates for an alias)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        name = _dotted(node.func) or ""
        return _is_getattr_literal(node) or name in ("__import__", "importlib.import_module")
    return False


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":` exactly (its body never runs when imported)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    parts = [test.left, *test.comparators]
    names = {p.id for p in parts if isinstance(p, ast.Name)}
    return names == {"__name__"} and any(_literal_str(p) == "__main__" for p in parts)


def _func_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


class _Checker:
    """One pass of analysis over one module; `run()` returns the findings."""

    def __init__(self, tree: ast.Module, allowed: frozenset[str] | None):
        self.tree = tree
        self.allowed = allowed  # None: strict
        self.found: dict[tuple[str, int, str], Finding] = {}
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
        self.layers = self._layer_attributes()
        self.self_tensors: set[str] = set()
        self.self_tensors = self._self_tensor_attributes()
        self._envs: dict[ast.AST, set[str]] = {}
        self._scopes: dict[ast.AST, str] = {}

    # ----- results -------------------------------------------------------------------
    def add(self, flag: str, node: ast.AST | None, detail: str) -> None:
        line = getattr(node, "lineno", 0) if node is not None else 0
        self.found.setdefault((flag, line, detail), Finding(flag, line, detail))

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

    # ----- names ---------------------------------------------------------------------
    def _collect_names(self) -> None:
        """Import aliases, plain re-bindings (aliases of aliases, in any order) and the
        names bound otherwise (which then shadow builtins)."""
        alias_assigns = self._collect_imports()
        alias_targets = {id(t) for n in ast.walk(self.tree) if isinstance(n, ast.Assign)
                         and _is_reference_like(n.value) for t in n.targets}  # fmt: skip
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
            elif isinstance(node, ast.Assign) and _is_reference_like(node.value):
                in_class = isinstance(self.parents.get(node, (None,))[0], ast.ClassDef)
                for key in filter(None, map(_dotted, node.targets)):
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
            dotted = _dotted(node)
            if dotted and dotted != exclude and dotted in self.aliases:
                return self.aliases[dotted]
            base = self.resolve(node.value, exclude)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            if _is_getattr_literal(node) and self.resolve(node.func) == "builtins.getattr":
                dotted = _dotted(node)
                if dotted and dotted != exclude and dotted in self.aliases:
                    return self.aliases[dotted]
                base = self.resolve(node.args[0], exclude)
                return f"{base}.{_literal_str(node.args[1])}" if base else None
            func = self.resolve(node.func, exclude)
            if func in ("builtins.__import__", "importlib.import_module") and node.args:
                return _literal_str(node.args[0])
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
        obj = _lookup(module)
        if obj is _MISSING:
            return False
        exported = getattr(obj, "__all__", None)
        if exported is None:
            return not name.startswith("_") and name in vars(obj)
        return name in exported

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
                and _is_main_guard(parent)
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
                    if self.resolve(target) in _KERNEL_DECORATORS:
                        found.add(node)
            elif isinstance(node, ast.Call) and self.resolve(node.func) in _JIT_DECORATORS:
                for arg in node.args:  # kernel = triton.jit(fn)
                    if isinstance(arg, ast.Name) and arg.id in self.funcs:
                        found.add(self.funcs[arg.id])
        return found

    def _has_jit_call(self) -> bool:
        return any(
            isinstance(n, ast.Call) and self.resolve(n.func) in _JIT_DECORATORS
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
            todo = [f for n, f in self.funcs.items() if n not in _ENTRY_HELPERS]
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
        all_fns = [f for f in _func_nodes(self.tree) if f not in self.jit_fns]
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
        flag = _rule_flag(qn)
        if flag:
            self.add(flag, node, f"imports {qn}")
        elif _is_private(qn):
            self.add("introspection", node, f"private API {qn}")
        elif top in REFERENCE_MODULES or qn.split(".")[-1] == "Model":
            self.add("reference_access", node, f"imports {qn}")
        elif top not in ALLOWED_IMPORTS:
            self.add("reference_access", node, f"import of {top} is outside the allow-list")

    def _check_reference(self, node: ast.Name | ast.Attribute, scope: str) -> None:
        if isinstance(node, ast.Attribute) and node.attr in _ATTR_FLAGS:
            self.add(_ATTR_FLAGS[node.attr], node, f"attribute .{node.attr}")
        if isinstance(node, ast.Name):
            if node.id == "Model" and isinstance(node.ctx, ast.Load):
                self.add("reference_access", node, "uses the name Model")
            if node.id in _PROTECTED_NAMES and not isinstance(node.ctx, ast.Load):
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
        flag = _rule_flag(qn)
        if flag:
            self.add(flag, node, f"uses {qn}")
        elif _is_private(qn):
            self.add("introspection", node, f"private API {qn}")
        elif qn.startswith("torch.") and qn.split(".")[-1] == "compile":
            self.add("torch_compile", node, f"uses {qn}")
        stored = scope == "other" and not called and self._enclosing_fn(node) is None
        if flag is None and qn.startswith("torch.") and (scope == "compute" or stored):
            # module/class level: `OPS = [torch.relu]` keeps a compute function for later
            self._check_torch_use(qn, node, called)
        elif scope == "jit" and qn.startswith("torch.") and callable(_lookup(qn)):
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
        if name in _HOST_ROUNDTRIP:
            self._compute("torch_compute", node, name, f"host round-trip via {qn}")
            return
        obj = _lookup(qn)
        if obj is _MISSING:
            if called:
                self._compute("torch_compute", node, name, f"calls {qn}")
            return
        if isinstance(obj, (type, types.ModuleType)) or not callable(obj):
            return
        owner = _lookup(qn.rsplit(".", 1)[0])
        layer = _torch_layer_class(owner)
        if layer:
            self._compute("nn_compute_layer", node, layer.lower(), f"uses {qn}")
        else:
            self._compute("torch_compute", node, name, f"uses {qn}")

    def _compute(self, flag: str, node: ast.AST, op: str, detail: str) -> None:
        """Record a compute finding unless the partial policy allows `op`."""
        if self.allowed is not None and _op_key(op) in self.allowed:
            return
        self.add(flag, node, detail)

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
                op = _BINOP_NAMES.get(type(node.op), "op")
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
        elif func and func.startswith("builtins.") and func[9:] in _BUILTIN_COMPUTE:
            env = self._env(node)
            if any(self._is_tensor(a, env) for a in node.args):
                self._compute("torch_compute", node, func[9:], f"{func[9:]}() on a tensor")

    def _check_getattr(self, node: ast.Call, func: str, scope: str) -> None:
        if not node.args:
            return
        owner = self.resolve(node.args[0])
        literal = _literal_str(node.args[1]) if len(node.args) > 1 else None
        if literal == "Model":
            self.add("reference_access", node, f"{func[9:]}(..., 'Model')")
        if literal in _ATTR_FLAGS:
            self.add(_ATTR_FLAGS[literal], node, f"{func[9:]}(..., {literal!r})")
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
        if _dotted(receiver) in self.layers and attr.attr in ("forward", "__call__"):
            layer = self.layers[_dotted(receiver)]
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
        if name in _HOST_ROUNDTRIP:
            self._compute("torch_compute", node, name, f"host round-trip via .{name}()")
        elif name in _DUNDER_COMPUTE:
            self._compute("torch_compute", node, name.strip("_"), f"calls .{name}()")
        elif base in ALLOWED_METHODS or user_object:
            return
        elif base in COMPUTE_METHODS and (
            tensor_receiver or base not in _AMBIGUOUS_METHODS or name != base
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

    def _layer_called(self, node: ast.Call) -> str | None:
        """Name of the torch nn layer this call runs (`self.linear(x)`,
        `nn.Linear(a, b)(x)`, `self.seq[0](x)`), else None."""
        func = node.func
        key = _dotted(func)
        if key in self.layers:
            return self.layers[key]
        if isinstance(func, ast.Subscript) and _dotted(func.value) in self.layers:
            return self.layers[_dotted(func.value)]
        if isinstance(func, ast.Call):
            qn = self.resolve(func.func)
            if qn and qn.startswith("torch."):
                return _torch_layer_class(_lookup(qn))
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
                    if _dotted(t):
                        layers[_dotted(t)] = layer
        for node in ast.walk(self.tree):  # `for layer in self.layers:` binds a layer
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                it = node.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                    it = it.func.value  # self.layers.values(), .children(), ...
                if _dotted(it) in layers:
                    layers[node.target.id] = layers[_dotted(it)]
        return layers

    def _constructed_layer(self, call: ast.Call) -> str | None:
        qn = self.resolve(call.func)
        if not (qn and qn.startswith("torch.")):
            return None
        obj = _lookup(qn)
        layer = _torch_layer_class(obj)
        if layer:
            return layer
        if isinstance(obj, type) and obj.__name__ in ("ModuleList", "ModuleDict"):
            for inner in ast.walk(call):
                if inner is not call and isinstance(inner, ast.Call):
                    found = self._constructed_layer(inner)
                    if found:
                        return found
        return None

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
            obj = _lookup(qn) if qn else _MISSING
            if isinstance(obj, type) and issubclass(obj, torch.Tensor):
                self.add("output_type", node, f"class {node.name} subclasses {qn}")
            elif node.name == "ModelNew" and _torch_layer_class(obj):
                self._compute(
                    "nn_compute_layer", node, obj.__name__.lower(), f"ModelNew subclasses {qn}"
                )

    # ----- operators and tensor inference ----------------------------------------------
    def _check_operator(self, node: ast.AST) -> None:
        env = self._env(node)
        if isinstance(node, ast.BinOp):
            op = _BINOP_NAMES.get(type(node.op), "op")
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
                name = _CMP_NAMES.get(type(op))
                if name and any(self._is_tensor(o, env) for o in operands):
                    self._compute("torch_compute", node, name, f"comparison {name} on tensors")
                    break

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
            elif is_forward and a.arg != "self" and ann.split("[")[0] not in _NON_TENSOR_ANNOTS:
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
            if node.attr in _TENSOR_ATTRS:
                return True
            return _dotted(node) in self.self_tensors
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
            if not qn.startswith("torch.") or qn in _NON_TENSOR_TORCH:
                return False
            if qn.startswith(("torch.cuda.", "torch.backends.")):
                return False
            obj = _lookup(qn)
            if isinstance(obj, type):
                import torch

                return issubclass(obj, torch.Tensor)
            return True
        if self._layer_called(node):
            return True
        if isinstance(node.func, ast.Attribute):
            name = node.func.attr
            return name not in _NON_TENSOR_METHODS and self._is_tensor(node.func.value, env)
        return False

    def _self_tensor_attributes(self) -> set[str]:
        """`self.x` attributes assigned tensors or parameters anywhere, plus buffers and
        parameters registered by name."""
        out: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if self._call_returns_tensor(node.value, set()):
                    out |= {_dotted(t) for t in node.targets if isinstance(t, ast.Attribute)}
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("register_buffer", "register_parameter")
                and node.args
                and _literal_str(node.args[0])
            ):
                out.add(f"self.{_literal_str(node.args[0])}")
        out.discard(None)
        return out
