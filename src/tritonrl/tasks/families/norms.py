"""Norms family: layer norm, RMS norm, L1 / L2 normalisation of rows, Frobenius
normalisation of the whole tensor, group norm and instance norm.

Signature: `norms:<kind>[:affine|plain][:moved]` (kind: layer, rms, l1, l2, fro, group,
instance; layer and rms with or without their learned scale; `moved`: a row kind in
`axis`'s moved style, rows of contiguous elements). Held out: `HELDOUT` (layer norm
without affine parameters, the L1 normalisation; in both styles).

Solutions, all fp32 accumulation:
* layer / rms / l1 / l2 along the last dim: one stats pass over each row (sum and sum of
  squares, or of |x|) and one write pass, tiles of `BLOCK_O` rows (`axis`). The variance
  is E[x^2] - E[x]^2, exact enough in fp32 for rows whose mean is not far larger than
  their spread (PyTorch uses Welford; a row of 1e4 + noise would lose digits here).
* group / instance: one program per (sample, group), whose channels are contiguous in
  NCHW: a stats pass and a write pass applying the per-channel weight and bias. With few
  (sample, group) pairs and large images that is few programs for the whole GPU, where
  PyTorch's split reductions do better.
* fro: a partial sum of squares per block (no atomics, so deterministic), then a second
  kernel that sums the partials and scales its block: two reads of the input, as eager.
"""

from __future__ import annotations

import random

from tritonrl.tasks.families import axis
from tritonrl.tasks.families.base import (
    Drawn,
    indent,
    launch,
    reference_source,
    size,
    solution_source,
)

NAME = "norms"
POLICY = "strict"
KINDS = ("layer", "rms", "l1", "l2", "fro", "group", "instance")
HELDOUT = frozenset(
    sig + style for sig in ("norms:layer:plain", "norms:l1") for style in ("", ":moved")
)
EPS = 1e-5

_ROW_KERNEL = """
@triton.jit
def {kind}_norm_kernel(x_ptr, {w_ptrs}y_ptr, {params}, eps):
{preamble}
    s = tl.zeros((BLOCK_O,), tl.float32)
    ss = tl.zeros((BLOCK_O,), tl.float32)
    for r0 in range(0, R, BLOCK_R):
{load}
{stats}
{scale}
    for r0 in range(0, R, BLOCK_R):
{load}
{write}
        tl.store(y_ptr + offs, v, mask=mask)
"""
_ROW = {  # kind -> (stats lines, scale lines, write lines)
    "layer": ("s += tl.sum(x, axis=1)\nss += tl.sum(x * x, axis=1)",
              "mean = s / R\nvar = tl.maximum(ss / R - mean * mean, 0.0)\n"
              "rstd = 1.0 / tl.sqrt(var + eps)",
              "v = (x - mean[:, None]) * rstd[:, None]"),
    "rms": ("ss += tl.sum(x * x, axis=1)", "rstd = 1.0 / tl.sqrt(ss / R + eps)",
            "v = x * rstd[:, None]"),
    "l1": ("s += tl.sum(tl.abs(x), axis=1)", "inv = 1.0 / tl.where(o_ok, s, 1.0)",
           "v = x * inv[:, None]"),
    "l2": ("ss += tl.sum(x * x, axis=1)", "inv = 1.0 / tl.sqrt(tl.where(o_ok, ss, 1.0))",
           "v = x * inv[:, None]"),
}  # fmt: skip
_ROW_TORCH = {
    "layer": "torch.nn.functional.layer_norm(x, (x.shape[-1],), {wb}eps=self.eps)",
    "rms": "x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps){w}",
    "l1": "x / torch.sum(torch.abs(x), dim=1, keepdim=True)",
    "l2": "x / torch.norm(x, p=2, dim=1, keepdim=True)",
}

_GROUP_KERNEL = """
@triton.jit
def group_norm_kernel(x_ptr, {w_ptrs}y_ptr, n_groups, C, HW, eps{affine},
                      BLOCK: tl.constexpr):
    # One program per (sample, group): its channels are contiguous in NCHW.
    pid = tl.program_id(0)
    per_group = C // n_groups
    L = per_group * HW
    start = pid.to(tl.int64) * L
    g = pid % n_groups
    idx = tl.arange(0, BLOCK)
    s = tl.zeros((BLOCK,), tl.float32)
    ss = tl.zeros((BLOCK,), tl.float32)
    for i0 in range(0, L, BLOCK):
        i = i0 + idx
        x = tl.load(x_ptr + start + i, mask=i < L, other=0.0).to(tl.float32)
        s += x
        ss += x * x
    mean = tl.sum(s, axis=0) / L
    var = tl.maximum(tl.sum(ss, axis=0) / L - mean * mean, 0.0)
    rstd = 1.0 / tl.sqrt(var + eps)
    for i0 in range(0, L, BLOCK):
        i = i0 + idx
        ok = i < L
        x = tl.load(x_ptr + start + i, mask=ok, other=0.0).to(tl.float32)
        v = (x - mean) * rstd
{affine_lines}
        tl.store(y_ptr + start + i, v, mask=ok)
"""

_FRO_KERNELS = """
@triton.jit
def sum_squares_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(x * x, axis=0))


@triton.jit
def fro_scale_kernel(x_ptr, partial_ptr, y_ptr, n, n_partials, BLOCK: tl.constexpr,
                     BLOCK_P: tl.constexpr):
    # Every program sums the partials itself: no third launch, no atomics.
    acc = tl.zeros((BLOCK_P,), tl.float32)
    for p0 in range(0, n_partials, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        acc += tl.load(partial_ptr + p, mask=p < n_partials, other=0.0)
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0))
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, x * inv, mask=ok)
"""


def _row(kind, affine, rng, seed, small) -> tuple[str, str]:
    batch = size(rng, small, (256, 4096), (3, 24))
    dim = size(rng, small, (1024, 8192), (16, 300))
    params = affine and kind in ("layer", "rms")
    init = ["self.eps = eps"]
    if params:
        init.append("self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))")
        if kind == "layer":
            init.append("self.bias = nn.Parameter(0.1 * torch.randn(dim))")
    wb = "self.weight, self.bias, " if params else ""
    expr = _ROW_TORCH[kind].format(wb=wb, w=" * self.weight" if params else "")
    init_params = "dim: int, eps: float" if params else "eps: float"
    init_inputs = "dim, eps" if params else "eps"
    source = reference_source(
        doc=f"Task family norms (seed {seed}): {kind} normalisation of each row"
        + (" with learned parameters." if params else "."),
        forward_args="x: torch.Tensor",
        forward=[f"return {expr}"],
        constants=[("batch_size", batch), ("dim", dim), ("eps", EPS)],
        inputs=["return [torch.randn(batch_size, dim)]"],
        init_params=init_params,
        init=init,
        init_inputs=init_inputs,
        dtypes=("float16", "bfloat16") if kind in ("layer", "rms") and rng.random() < 0.5 else (),
    )
    stats, scale, write = _ROW[kind]
    if params:
        write += "\nw = tl.load(w_ptr + r, mask=r < R, other=0.0)\nv = v * w[None, :]"
        if kind == "layer":
            write += "\nb = tl.load(b_ptr + r, mask=r < R, other=0.0)\nv = v + b[None, :]"
    w_ptrs = ("w_ptr, b_ptr, " if kind == "layer" else "w_ptr, ") if params else ""
    moved = axis.style(NAME, seed) == "moved"
    preamble, kernel_params, kernel_args = axis.parts(moved)
    kernel = _ROW_KERNEL.format(
        kind=kind, w_ptrs=w_ptrs, params=kernel_params, preamble=indent(preamble, 4),
        load=indent(axis.chunk("0.0", moved=moved), 8), stats=indent(stats, 8),
        scale=indent(scale, 4), write=indent(write, 8),
    )  # fmt: skip
    launch_w = ("self.weight, self.bias, " if kind == "layer" else "self.weight, ") * params
    lines = axis.moved_launch_lines if moved else axis.launch_lines
    forward = [
        *lines("-1", tile=4096),
        "y = torch.empty_like(x)",
        *launch(f"{kind}_norm_kernel[grid]", f"x, {launch_w}y, {kernel_args}, eps=self.eps"),
        "return y",
    ]
    solution = solution_source(
        doc=f"Triton solution: {kind} norm of rows, a stats pass then a write pass.",
        kernels=kernel, forward_args="x: torch.Tensor", forward=forward,
        init_params=init_params, init=init,
    )  # fmt: skip
    return source, solution


def _grouped(kind, rng, seed, small) -> tuple[str, str]:
    batch = size(rng, small, (8, 32), (2, 3))
    per_group = rng.choice((2, 4, 8))
    groups = rng.choice((2, 4, 8)) if kind == "group" else 1
    channels = per_group * groups
    height = size(rng, small, (64, 256), (8, 14))
    width = size(rng, small, (64, 256), (8, 14))
    if kind == "group":
        layer = "nn.GroupNorm(num_groups, channels, eps=eps)"
        init_params, init_inputs = "num_groups: int, channels: int, eps: float", \
            "num_groups, channels, eps"  # fmt: skip
        init = [f"self.norm = {layer}",
                "nn.init.normal_(self.norm.weight, 1.0, 0.1)",
                "nn.init.normal_(self.norm.bias, 0.0, 0.1)"]  # fmt: skip
        constants = [("num_groups", groups)]
    else:
        init_params, init_inputs = "channels: int, eps: float", "channels, eps"
        init = ["self.norm = nn.InstanceNorm2d(channels, eps=eps)"]
        constants = []
    source = reference_source(
        doc=f"Task family norms (seed {seed}): {kind} norm of an (N, C, H, W) tensor.",
        forward_args="x: torch.Tensor",
        forward=["return self.norm(x)"],
        constants=[
            ("batch_size", batch),
            ("channels", channels),
            ("height", height),
            ("width", width),
            *constants,
            ("eps", EPS),
        ],  # fmt: skip
        inputs=["return [torch.randn(batch_size, channels, height, width)]"],
        init_params=init_params,
        init=init,
        init_inputs=init_inputs,
    )
    affine = kind == "group"
    affine_lines = (
        "        ch = g * per_group + i // HW\n"
        "        w = tl.load(w_ptr + ch, mask=ok, other=0.0)\n"
        "        b = tl.load(b_ptr + ch, mask=ok, other=0.0)\n"
        "        v = v * w + b"
    ) if affine else ""  # fmt: skip
    kernel = _GROUP_KERNEL.format(
        w_ptrs="w_ptr, b_ptr, " if affine else "", affine="", affine_lines=affine_lines
    )
    groups_expr = "self.norm.num_groups" if affine else "C"
    forward = [
        "x = x.contiguous()",
        "N, C, H, W = x.shape",
        "y = torch.empty_like(x)",
        f"n_groups = {groups_expr}",
        "BLOCK = min(4096, 1 << ((C // n_groups) * H * W - 1).bit_length())",
        "grid = (N * n_groups,)",
        *launch(
            "group_norm_kernel[grid]",
            "x, "
            + ("self.norm.weight, self.norm.bias, " if affine else "")
            + "y, n_groups, C, H * W, self.norm.eps, BLOCK=BLOCK",
        ),
        "return y",
    ]
    solution = solution_source(
        doc=f"Triton solution: {kind} norm, one program per (sample, group).",
        kernels=kernel, forward_args="x: torch.Tensor", forward=forward,
        init_params=init_params, init=init,
    )  # fmt: skip
    return source, solution


def _fro(rng, seed, small) -> tuple[str, str]:
    batch = size(rng, small, (8, 32), (2, 4))
    features = size(rng, small, (64, 256), (8, 16))
    dim = size(rng, small, (256, 2048), (8, 40))
    source = reference_source(
        doc=f"Task family norms (seed {seed}): the tensor divided by its Frobenius norm.",
        forward_args="x: torch.Tensor",
        forward=['return x / torch.norm(x, p="fro")'],
        constants=[("batch_size", batch), ("features", features), ("dim", dim)],
        inputs=["return [torch.randn(batch_size, features, dim)]"],
    )
    forward = [
        "x = x.contiguous()",
        "n = x.numel()",
        "BLOCK = 4096",
        "n_partials = (n + BLOCK - 1) // BLOCK",
        "partials = torch.empty(n_partials, device=x.device, dtype=torch.float32)",
        "y = torch.empty_like(x)",
        "sum_squares_kernel[(n_partials,)](x, partials, n, BLOCK=BLOCK)",
        "BLOCK_P = min(1024, 1 << (n_partials - 1).bit_length())",
        *launch(
            "fro_scale_kernel[(n_partials,)]",
            "x, partials, y, n, n_partials, BLOCK=BLOCK, BLOCK_P=BLOCK_P",
        ),
        "return y",
    ]
    solution = solution_source(
        doc="Triton solution: Frobenius normalisation, block partial sums then a scale pass.",
        kernels=_FRO_KERNELS, forward_args="x: torch.Tensor", forward=forward,
    )  # fmt: skip
    return source, solution


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    kind = rng.choice(KINDS)
    affine = rng.random() < 0.6
    if kind in ("layer", "rms", "l1", "l2"):
        source, solution = _row(kind, affine, rng, seed, small)
    elif kind == "fro":
        source, solution = _fro(rng, seed, small)
    else:
        source, solution = _grouped(kind, rng, seed, small)
    if kind in ("layer", "rms"):
        sig = f"norms:{kind}:{'affine' if affine else 'plain'}"
    else:
        sig = f"norms:{kind}"
    if kind in ("layer", "rms", "l1", "l2") and axis.style(NAME, seed) == "moved":
        sig += ":moved"
    titles = {"layer": "LayerNorm", "rms": "RMSNorm", "l1": "L1Norm", "l2": "L2Norm",
              "fro": "FrobeniusNorm", "group": "GroupNorm", "instance": "InstanceNorm"}  # fmt: skip
    name = titles[kind] + ("_Affine" if sig.endswith(":affine") else "")
    return Drawn(signature=sig, level=1, name=name, source=source, solution=solution)
