"""Work along one dimension of a contiguous tensor: the launch lines and the kernel
preamble the softmax, scan and norm families share (losses takes the preamble; the
reductions family indexes a strided dim's lines without the per-lane `//` and `%`).

Two styles, drawn per task (`style`, from a stream of its own so the other draws stay
as they were): `strided` works in place on any dim; `moved` moves the dim last first
(`x.movedim(dim, -1).contiguous()`, a copy unless it is already last) and walks rows of
R contiguous elements, the simpler kernel a model more often meets.

A contiguous tensor seen as `[outer, R, inner]` (R the size of the dimension worked
along) has `n_other = outer * inner` lines of R elements; line `o` starts at
`(o // inner) * R * inner + o % inner` and steps by `inner`. A program takes `BLOCK_O`
lines and walks them in `BLOCK_R` chunks. Tiles are wide along whichever dimension is
contiguous: along R when `inner == 1` (the last dim), across lines otherwise, so loads
are coalesced both ways. A reduction's output, `[outer, inner]` contiguous, is indexed
by `o` itself.

What it does NOT do: it writes no whole kernel (each family writes its loop).
"""

from __future__ import annotations

from tritonrl.tasks.families.base import family_rng

STYLES = ("strided", "moved")

# The kernel's first lines: `o` (the lines), `o_ok`, `base` (int64 offsets), `rr`.
PREAMBLE = """\
o = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
o_ok = o < n_other
base = (o // inner).to(tl.int64) * R * inner + o % inner
rr = tl.arange(0, BLOCK_R)"""

# The kernel's parameters that `launch_lines` passes (after the pointers).
PARAMS = "R, inner, n_other, BLOCK_O: tl.constexpr, BLOCK_R: tl.constexpr"
ARGS = "R, inner, n_other, BLOCK_O=BLOCK_O, BLOCK_R=BLOCK_R"


def launch_lines(dim: str, tile: int = 2048) -> list[str]:
    """forward's lines that make `x` contiguous and size the tiles and grid for work
    along `dim` (a Python expression); `tile`: elements a program holds at a time."""
    return [
        "x = x.contiguous()",
        f"R = x.shape[{dim}]",
        f"inner = x.stride({dim})  # elements after the dim: 1 for the last one",
        "n_other = x.numel() // R",
        "if inner == 1:  # along the contiguous dim: wide tiles along it",
        f"    BLOCK_R = min(1 << (R - 1).bit_length(), {tile})",
        f"    BLOCK_O = max(1, min(16, {tile} // BLOCK_R))",
        "else:  # along a strided dim: wide tiles across the contiguous one",
        "    BLOCK_O = min(1 << (n_other - 1).bit_length(), 128)",
        f"    BLOCK_R = max(1, min(1 << (R - 1).bit_length(), {tile} // BLOCK_O))",
        "grid = ((n_other + BLOCK_O - 1) // BLOCK_O,)",
    ]


def chunk(other: str, to_float: bool = True, moved: bool = False) -> str:
    """Lines loading chunk `r0` of the lines into `x` (masked lanes read `other`);
    `moved`: of the moved style (rows of contiguous elements)."""
    cast = ".to(tl.float32)" if to_float else ""
    step = "" if moved else " * inner"
    return (
        "r = r0 + rr\n"
        "mask = o_ok[:, None] & (r[None, :] < R)\n"
        f"offs = base[:, None] + r[None, :]{step}\n"
        f"x = tl.load(x_ptr + offs, mask=mask, other={other}){cast}"
    )


# The moved style: `x` with the dim last, `n_rows` rows of R contiguous elements.
MOVED_PREAMBLE = """\
o = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
o_ok = o < n_rows
base = o.to(tl.int64) * R
rr = tl.arange(0, BLOCK_R)"""
MOVED_PARAMS = "R, n_rows, BLOCK_O: tl.constexpr, BLOCK_R: tl.constexpr"
MOVED_ARGS = "R, n_rows, BLOCK_O=BLOCK_O, BLOCK_R=BLOCK_R"


def style(family: str, seed: int) -> str:
    """The task's style, drawn from its own stream (the family's draws stay unchanged)."""
    return family_rng(f"{family}.style", seed).choice(STYLES)


def moved_launch_lines(dim: str, tile: int = 2048, also: tuple[str, ...] = ()) -> list[str]:
    """forward's lines of the moved style: `x` (and each tensor named in `also`) with the
    dim `dim` moved last and made contiguous, the tiles and the grid."""
    move = "" if dim == "-1" else f".movedim({dim}, -1)"
    lines = [f"{t} = {t}{move}.contiguous()" for t in ("x", *also)]
    lines[0] += "  # the dim last: rows of R contiguous elements"
    return [
        *lines,
        "R = x.shape[-1]",
        "n_rows = x.numel() // R",
        f"BLOCK_R = min(1 << (R - 1).bit_length(), {tile})",
        f"BLOCK_O = max(1, min(16, {tile} // BLOCK_R))",
        "grid = ((n_rows + BLOCK_O - 1) // BLOCK_O,)",
    ]


def parts(moved: bool) -> tuple[str, str, str]:
    """(preamble, params, args) of the moved style, or else of the strided one."""
    if moved:
        return MOVED_PREAMBLE, MOVED_PARAMS, MOVED_ARGS
    return PREAMBLE, PARAMS, ARGS
