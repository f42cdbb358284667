"""Scans family: cumulative sum, cumulative product, reverse cumulative sum and masked
cumulative sum along a dim of a 2-D or 3-D tensor.

Signature: `scans:<cumsum|cumprod|reverse_cumsum|masked_cumsum>:<last|inner>[:moved]`
(`last`: the last dim, `inner`: a strided one; `moved`: `axis`'s moved style, the dim
moved last first). Held out: `HELDOUT` (reverse cumsum along a strided dim, cumprod
along the last dim; in both styles).

The solution walks each line in `BLOCK_R` chunks (from the end for the reverse scan):
`tl.cumsum` / `tl.cumprod` within a chunk, plus the carry of the chunks before, one read
and one write. Where it cannot beat eager PyTorch: a line is scanned by one program
sequentially over its chunks, so a few very long lines leave most of the GPU idle (a
decoupled look-back scan would fix that); many lines of moderate length are the case
it is fast for.
"""

from __future__ import annotations

import random

from tritonrl.tasks.families import axis
from tritonrl.tasks.families.base import Drawn, indent, reference_source, size, solution_source

NAME = "scans"
POLICY = "strict"
OPS = ("cumsum", "cumprod", "reverse_cumsum", "masked_cumsum")
HELDOUT = frozenset(
    sig + style
    for sig in ("scans:reverse_cumsum:inner", "scans:cumprod:last")
    for style in ("", ":moved")
)
# The longest cumprod. Along thousands of randn values the verifier's shifted set
# (-1.7 x + 0.5 mean|x|) gives partial products past float32's range: a GPU's parallel
# scan of the reference met inf times 0 and wrote NaN where the true prefix product, and
# a correct kernel's, was a number (5 of 250 tasks failed). Along 256 they stay below 1e26.
CUMPROD_MAX_LENGTH = 256

_KERNEL = """
@triton.jit
def {op}_kernel(x_ptr, {mask_ptr}y_ptr, {params}):
{preamble}
    carry = tl.full((BLOCK_O,), {identity}, tl.float32)
    n_chunks = tl.cdiv(R, BLOCK_R)
    for i in range(0, n_chunks):
        r0 = {start}
{load}
{body}
        tl.store(y_ptr + offs, c, mask=mask)
"""

_BODIES = {
    # `tl.where(mask, x, 0.0)` changes no value (the load's `other` is 0) but keeps
    # Triton 3.6's GPU back end from failing on a scan and a sum of the loaded tile
    # (TritonGPUOptimizeThreadLocality: "PassManager::run failed" on sm_90)
    "cumsum": "x = tl.where(mask, x, 0.0)\n"
              "c = tl.cumsum(x, axis=1) + carry[:, None]\ncarry += tl.sum(x, axis=1)",
    "masked_cumsum": "keep = tl.load(m_ptr + offs, mask=mask, other=0)\n"
                     "x = tl.where(keep != 0, x, 0.0)\n"
                     "c = tl.cumsum(x, axis=1) + carry[:, None]\ncarry += tl.sum(x, axis=1)",
    "reverse_cumsum": "x = tl.where(mask, x, 0.0)\n"
                      "c = tl.cumsum(x, axis=1, reverse=True) + carry[:, None]\n"
                      "carry += tl.sum(x, axis=1)",
    "cumprod": "c = tl.cumprod(x, axis=1) * carry[:, None]\n"
               "# the carry is the last column of the chunk's running product\n"
               "last = tl.minimum(R - r0, BLOCK_R) - 1\n"
               "carry = tl.sum(tl.where(rr[None, :] == last, c, 0.0), axis=1)",
}  # fmt: skip
_TORCH = {
    "cumsum": "torch.cumsum(x, dim=self.dim)",
    "cumprod": "torch.cumprod(x, dim=self.dim)",
    "reverse_cumsum": "torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)",
    "masked_cumsum": "torch.cumsum(x * mask, dim=self.dim)",
}
_TITLES = {"cumsum": "Cumsum", "cumprod": "Cumprod", "reverse_cumsum": "Cumsum_Reverse",
           "masked_cumsum": "Cumsum_Masked"}  # fmt: skip


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    op = rng.choice(OPS)
    where = rng.choice(("last", "inner"))
    rows = size(rng, small, (64, 512), (3, 12))
    length = size(rng, small, (1024, 8192), (16, 200))
    if op == "cumprod":  # products of the verifier's shifted set stay finite in any order
        length = min(length, CUMPROD_MAX_LENGTH)
    inner = size(rng, small, (16, 64), (3, 9))
    if where == "last":
        shape, dim = "batch_size, length", 1
        shape_names = [("batch_size", rows), ("length", length)]
    else:
        shape, dim = "batch_size, length, channels", 1
        shape_names = [("batch_size", rows), ("length", length), ("channels", inner)]
    masked = op == "masked_cumsum"
    inputs = [f"x = torch.randn({shape})"]
    if masked:
        inputs.append(f"mask = torch.rand({shape}) > 0.5")
    inputs.append("return [x, mask]" if masked else "return [x]")
    args = "x: torch.Tensor, mask: torch.Tensor" if masked else "x: torch.Tensor"
    source = reference_source(
        doc=f"Task family scans (seed {seed}): {op.replace('_', ' ')} along dim {dim}.",
        forward_args=args,
        forward=[f"return {_TORCH[op]}"],
        constants=[*shape_names, ("scan_dim", dim)],
        inputs=inputs,
        init_params="dim: int",
        init=["self.dim = dim"],
        init_inputs="scan_dim",
    )
    reverse = op == "reverse_cumsum"
    moved = axis.style(NAME, seed) == "moved"
    preamble, params, kernel_args = axis.parts(moved)
    kernel = _KERNEL.format(
        op=op, mask_ptr="m_ptr, " if masked else "", params=params,
        preamble=indent(preamble, 4), identity="1.0" if op == "cumprod" else "0.0",
        start="(n_chunks - 1 - i) * BLOCK_R" if reverse else "i * BLOCK_R",
        load=indent(axis.chunk("1.0" if op == "cumprod" else "0.0", moved=moved), 8),
        body=indent(_BODIES[op], 8),
    )  # fmt: skip
    if moved:
        launch_lines = axis.moved_launch_lines("self.dim", also=("mask",) if masked else ())
    else:
        launch_lines = [*axis.launch_lines("self.dim"), *(["mask = mask.contiguous()"] * masked)]
    forward = [
        *launch_lines,
        "y = torch.empty_like(x)",
        f"{op}_kernel[grid](x, {'mask, ' if masked else ''}y, {kernel_args})",
        "return y.movedim(-1, self.dim)" if moved else "return y",
    ]
    solution = solution_source(
        doc=f"Triton solution: {op.replace('_', ' ')}, chunked scan with a carry per line.",
        kernels=kernel,
        forward_args=args,
        forward=forward,
        init_params="dim: int",
        init=["self.dim = dim"],
    )
    return Drawn(
        signature=f"scans:{op}:{where}" + ":moved" * moved,
        level=1,
        name=f"{_TITLES[op]}_{'Last' if where == 'last' else 'Strided'}",
        source=source,
        solution=solution,
    )
