"""The vocabulary of the static checks: the flags, and the tables of names they apply to.

`FLAGS` maps each flag (a stable name that goes into `VerifyResult.flags`) to the
docs/hacks.md categories it answers. `rule_flag(qualname)` says which flag a fully
qualified name (`torch.compile`, `os.system`, `time.perf_counter`) raises, from the
ordered prefix rules; `ATTR_FLAGS` flags attribute names whatever object they are read
from (`__globals__`, `f_back`, `as_subclass`); the rest sort torch calls and tensor
methods into data movement (allowed under the strict policy) and compute. `Finding` is
what a check reports.

What it does NOT do: look at any source. The checks that apply these tables live in
`checker`; the policy decisions behind them are listed in the package docstring.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

POLICIES = ("strict", "partial")

# flag -> (docs/hacks.md categories, what it means)
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
ATTR_FLAGS: dict[str, str] = {
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
PROTECTED_NAMES = frozenset({"__name__", "__builtins__", "__file__", "__spec__", "__loader__"})

JIT_DECORATORS = frozenset(
    {"triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit", "triton.language.jit"}
)
KERNEL_DECORATORS = JIT_DECORATORS | frozenset(
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

# Tensor methods that compute. Those in AMBIGUOUS_METHODS also exist on Python objects
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
AMBIGUOUS_METHODS = frozenset({"add", "sort", "all", "any", "count", "index", "copy"})
HOST_ROUNDTRIP = frozenset({"numpy", "tolist", "__array__", "from_numpy", "frombuffer"})
DUNDER_COMPUTE = frozenset(
    f"__{n}__"
    for n in (
        "matmul", "rmatmul", "imatmul", "add", "radd", "iadd", "sub", "rsub", "isub", "mul",
        "rmul", "imul", "truediv", "rtruediv", "itruediv", "floordiv", "rfloordiv", "mod",
        "pow", "rpow", "neg", "abs", "and", "or", "xor", "invert", "lt", "le", "gt", "ge",
        "eq", "ne",
    )
)  # fmt: skip
# Methods and attributes whose result is not a tensor.
NON_TENSOR_METHODS = frozenset(
    {
        "stride", "size", "numel", "nelement", "dim", "ndimension", "data_ptr", "item",
        "is_contiguous", "element_size", "storage_offset", "get_device", "tolist",
        "is_floating_point", "is_complex", "untyped_storage", "numpy", "equal", "allclose",
    }
)  # fmt: skip
TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "weight", "bias", "grad", "real", "imag"})
NON_TENSOR_TORCH = frozenset(
    "torch." + n
    for n in (
        "is_tensor", "is_floating_point", "is_complex", "numel", "finfo", "iinfo",
        "get_default_dtype", "promote_types", "can_cast", "broadcast_shapes", "device", "Size",
        "manual_seed", "is_grad_enabled", "no_grad", "inference_mode", "enable_grad", "dtype",
        "equal", "allclose",
    )
)  # fmt: skip
# nn.Module subclasses that hold things without computing.
NN_CONTAINERS = frozenset({"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
# Builtins that compute on a tensor, or read all its values on the host (its text).
BUILTIN_COMPUTE = frozenset(
    {"sum", "max", "min", "abs", "pow", "round", "divmod", "sorted", "repr", "str", "format",
     "ascii", "bytes", "bytearray", "memoryview"}
)  # fmt: skip
BINOP_NAMES = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floor_divide",
    ast.Mod: "remainder", ast.Pow: "pow", ast.LShift: "bitwise_left_shift",
    ast.RShift: "bitwise_right_shift", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor",
    ast.BitAnd: "bitwise_and", ast.MatMult: "matmul",
}  # fmt: skip
CMP_NAMES = {
    ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"
}  # fmt: skip
NON_TENSOR_ANNOTS = frozenset({"int", "float", "bool", "str", "tuple", "list", "dict"})
ENTRY_HELPERS = frozenset({"get_inputs", "get_init_inputs"})


@dataclass(frozen=True)
class Finding:
    """One static finding: a `flag` from `FLAGS`, the source line, and what was seen;
    for a compute finding, `op` is the name `verify.allowed_torch_ops` would allow it by
    (`op_key`'s form, e.g. "conv2d"; "" otherwise; not part of equality)."""

    flag: str
    line: int
    detail: str
    op: str = field(default="", compare=False, repr=False)


def rule_flag(qualname: str) -> str | None:
    for prefix, flag in _RULES:
        if prefix.endswith("*"):
            if qualname.startswith(prefix[:-1]):
                return flag
        elif qualname == prefix or qualname.startswith(prefix + "."):
            return flag
    return None


def is_private(qualname: str) -> bool:
    parts = qualname.split(".")
    if parts[0] not in ("torch", "triton"):
        return False
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)
