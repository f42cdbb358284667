"""What counts as a compute op, `OpSummary`, and the rules that turn a summary into a level.

The vocabulary (weight layers, matmuls, reductions, tensor methods that compute, calls
that only move data) is shared by the walk over `forward` (`forward`, `patterns`) and the
reading of `__init__` (`modules`); `level_of` applies the rules of
`tritonrl.tasks.difficulty`.

What it does NOT do: it never reads source code; the AST walk lives in the other modules.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field

# Compute ops from which a task around a weight layer is an architecture.
MANY_OPS = 8


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
NO_OP_MODULES = frozenset({"Identity", "Flatten", "Unflatten", "ParameterList", "ParameterDict"})
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
REDUCTIONS = _words("sum mean norm vector_norm var std max amax min amin logsumexp")
# torch functions and tensor methods that move or describe data without computing.
NON_COMPUTE = _words(
    "size dim numel item tolist stride shape view view_as reshape reshape_as permute "
    "transpose t contiguous unsqueeze squeeze flatten unflatten expand expand_as broadcast_to "
    "repeat movedim moveaxis swapaxes to float double half bfloat16 type type_as detach clone "
    "chunk split unbind narrow select cat concat stack zeros ones empty full zeros_like "
    "ones_like empty_like full_like arange linspace tensor as_tensor cpu cuda new_zeros "
    "new_ones new_empty new_full new_tensor requires_grad is_contiguous get_device no_grad "
    "manual_seed pad identity randn rand randint randn_like rand_like"
)
# Tensor methods that compute (a method call is an op only when named here).
METHODS = (
    REDUCTIONS
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
TORCH_CONSTANTS = _words("torch.inf torch.nan torch.pi torch.e")
_RENAME = {
    "clip": "clamp",
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "true_divide": "div",
    "amax": "max",
    "amin": "min",
}
BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}


def op_name(name: str) -> str:
    name = name.lower()
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]  # in-place variants: relu_ -> relu
    return _RENAME.get(name, name)


def is_heavy(op: str) -> bool:
    return op in _HEAVY or op in _CELLS or op.startswith(("conv", "lazyconv"))


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
        return sum(n * (2 if op in _CELLS else 1) for op, n in self.ops.items() if is_heavy(op))

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
