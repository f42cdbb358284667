"""Source writers of the task generator: a program -> its reference and its solution.

`reference_source` writes the KernelBench-format reference (`class Model`, `get_inputs`,
`get_init_inputs`); `solution_source` writes a Triton `class ModelNew` computing the whole
program in one fused, fully masked kernel whose grid and blocks come from the input
shapes; `formula` is the program as one PyTorch expression.

What it does NOT do: it does not draw or check programs (`tritonrl.tasks.generator`), and
never runs what it writes (`tritonrl.verify.solution_check.check_task` does).
"""

from __future__ import annotations

import re

from tritonrl.tasks.gen_ops import REDUCTIONS, Program, Step

_Y_LOADS = {
    "full": "y = tl.load(y_ptr + offs, mask=mask, other=0.0)",
    "row": "y = tl.load(y_ptr + cols, mask=col_ok, other=0.0)[None, :]",
    "col": "y = tl.load(y_ptr + rows, mask=row_ok, other=0.0)[:, None]",
}
_Y_INPUTS = {"full": "batch_size, dim", "row": "dim", "col": "batch_size, 1"}


# A generated solution's lines between its docstring and its first kernel.
SOLUTION_HEAD = ("", "import torch", "import torch.nn as nn", "import triton",
                 "import triton.language as tl", "", "", "@triton.jit")  # fmt: skip


def _module_head(args: str, has_y: bool) -> list[str]:
    """The lines of a generated `ModelNew` after its kernels, down to the contiguous
    inputs at the top of forward (`args`: forward's parameters)."""
    return [
        "",
        "",
        "class ModelNew(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "",
        f"    def forward(self, {args}) -> torch.Tensor:",
        "        x = x.contiguous()",
        *(["        y = y.contiguous()"] if has_y else []),
    ]


def _fmt(step: Step, template: str) -> str:
    return template.format(o=step.operand)


def _forward_lines(p: Program) -> list[str]:
    exprs = [_fmt(s, s.spec.torch) for s in p.steps]
    if p.reduce:
        exprs.append(REDUCTIONS[p.reduce].torch)
    return [f"x = {e}" for e in exprs[:-1]] + [f"return {exprs[-1]}"]


def formula(p: Program) -> str:
    """The whole program as one expression, e.g. `torch.sum(torch.sigmoid(x * y), dim=-1)`."""
    expr = "x"
    templates = [_fmt(s, s.spec.torch) for s in p.steps]
    if p.reduce:
        templates.append(REDUCTIONS[p.reduce].torch)
    for template in templates:
        # Operator results (`x * y`, `-x`) need parentheses where an operator takes them.
        operator = expr != "x" and (expr.startswith("-") or not expr.endswith(")"))
        inner = f"({expr})" if operator and template[0] in "x-" else expr
        expr = re.sub(r"\bx\b", lambda _m, e=inner: e, template, count=1)
    return expr


def _input_expr(shape: str, bounded: bool) -> str:
    expr = f"torch.randn({shape})"
    return f"{expr}.clamp(-3.0, 3.0)" if bounded else expr


def reference_source(p: Program, seed: int) -> str:
    """The KernelBench-format reference of a program."""
    args = "x: torch.Tensor, y: torch.Tensor" if p.y_shape else "x: torch.Tensor"
    summary = formula(p)
    inputs = [f"x = {_input_expr('batch_size, dim', p.bounded)}"]
    if p.y_shape:
        inputs.append(f"y = {_input_expr(_Y_INPUTS[p.y_shape], p.bounded)}")
    uses_f = any(s.spec.functional for s in p.steps)
    lines = [
        f'"""Generated task (seed {seed}): {p.name.replace("_", " -> ")}.',
        "",
        f"{summary}",
        '"""',
        "",
        "import torch",
        "import torch.nn as nn",
        *(["import torch.nn.functional as F"] if uses_f else []),
        "",
        "",
        "class Model(nn.Module):",
        f'    """{p.name}."""',
        "",
        "    def __init__(self):",
        "        super().__init__()",
        "",
        f"    def forward(self, {args}) -> torch.Tensor:",
        *(f"        {line}" for line in _forward_lines(p)),
        "",
        "",
        f"batch_size = {p.rows}",
        f"dim = {p.cols}",
        "",
        "",
        "def get_inputs():",
        *(f"    {line}" for line in inputs),
        f"    return [x{', y' if p.y_shape else ''}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)


def _tile_lines(p: Program) -> list[str]:
    lines = [
        "col_ok = cols < n_cols",
        "mask = row_ok[:, None] & col_ok[None, :]",
        "offs = rows[:, None] * n_cols + cols[None, :]",
        "v = tl.load(x_ptr + offs, mask=mask, other=0.0)",
    ]
    if p.y_shape:
        lines.append(_Y_LOADS[p.y_shape])
    for step in p.steps:
        lines += [_fmt(step, line) for line in step.spec.triton]
    return lines


def _kernel_body(p: Program) -> list[str]:
    head = [
        "rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)",
        "row_ok = rows < n_rows",
    ]
    if p.reduce is None:
        return [
            *head,
            "cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)",
            *_tile_lines(p),
            "tl.store(out_ptr + offs, v, mask=mask)",
        ]
    r = REDUCTIONS[p.reduce]
    loop = ["cols = start + tl.arange(0, BLOCK_C)", *_tile_lines(p), r.update]
    return [
        *head,
        r.init,
        "for start in range(0, n_cols, BLOCK_C):",
        *(f"    {line}" for line in loop),
        f"tl.store(out_ptr + rows, {r.result}, mask=row_ok)",
    ]


def solution_source(p: Program) -> str:
    """Triton `ModelNew` computing the program in one fused kernel."""
    kernel = f"{p.name.lower()}_kernel"
    ptrs = "x_ptr, y_ptr, out_ptr" if p.y_shape else "x_ptr, out_ptr"
    tensors = "x, y, out" if p.y_shape else "x, out"
    args = "x: torch.Tensor, y: torch.Tensor" if p.y_shape else "x: torch.Tensor"
    if p.reduce:
        out = "torch.empty(n_rows, device=x.device, dtype=x.dtype)"
        grid = "((n_rows + BLOCK_R - 1) // BLOCK_R,)"
        what = f"{p.name.replace('_', ' -> ')}, one tile of rows per program, looping over columns"
    else:
        out = "torch.empty_like(x)"
        grid = "((n_rows + BLOCK_R - 1) // BLOCK_R, (n_cols + BLOCK_C - 1) // BLOCK_C)"
        what = f"{p.name.replace('_', ' -> ')} over 2-D tiles"
    lines = [
        f'"""Triton solution (generated): {what}, fused into one masked kernel."""',
        *SOLUTION_HEAD,
        f"def {kernel}(",
        f"    {ptrs}, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr",
        "):",
        *(f"    {line}" for line in _kernel_body(p)),
        *_module_head(args, bool(p.y_shape)),
        "        n_rows, n_cols = x.shape",
        f"        out = {out}",
        "        BLOCK_C = min(1 << (n_cols - 1).bit_length(), 1024)",
        "        BLOCK_R = max(1, min(1 << (n_rows - 1).bit_length(), 4096 // BLOCK_C))",
        f"        grid = {grid}",
        f"        {kernel}[grid]({tensors}, n_rows, n_cols, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C)",
        "        return out",
        "",
    ]
    return "\n".join(lines)


def flat_solution_source(p: Program) -> str:
    """Triton `ModelNew` for a program with no reduction and no broadcast operand (`y`
    absent or full): one kernel over the flattened input whose whole blocks load and
    store without a mask, so Triton can vectorise them whatever the column count (a mask
    on an odd `n_cols` would keep it to one element a load); only the last block is
    masked. The generator's own tasks keep `solution_source`'s fully masked 2-D tiles."""
    if p.reduce or p.y_shape not in (None, "full"):
        raise ValueError(
            f"{p.name}: a flat kernel needs no reduction and y absent or full "
            f"(got reduce={p.reduce!r}, y_shape={p.y_shape!r}); use solution_source"
        )
    kernel = f"{p.name.lower()}_kernel"
    ptrs = "x_ptr, y_ptr, out_ptr" if p.y_shape else "x_ptr, out_ptr"
    tensors = "x, y, out" if p.y_shape else "x, out"
    args = "x: torch.Tensor, y: torch.Tensor" if p.y_shape else "x: torch.Tensor"
    steps = [_fmt(step, line) for step in p.steps for line in step.spec.triton]

    def block(mask: str) -> list[str]:
        loads = ["v = tl.load(x_ptr + offs" + mask + ")"]
        if p.y_shape:
            loads.append("y = tl.load(y_ptr + offs" + mask + ")")
        return [
            *loads,
            *steps,
            "tl.store(out_ptr + offs, v" + mask.replace(", other=0.0", "") + ")",
        ]

    lines = [
        f'"""Triton solution (generated): {p.name.replace("_", " -> ")} over the flattened '
        'input, fused into one kernel."""',
        *SOLUTION_HEAD,
        f"def {kernel}({ptrs}, n, BLOCK: tl.constexpr):",
        "    start = tl.program_id(0) * BLOCK",
        "    offs = start + tl.arange(0, BLOCK)",
        "    if start + BLOCK <= n:  # a whole block: no mask, wide loads and stores",
        *(f"        {line}" for line in block("")),
        "    else:  # the last, partial block",
        "        mask = offs < n",
        *(f"        {line}" for line in block(", mask=mask, other=0.0")),
        *_module_head(args, bool(p.y_shape)),
        "        out = torch.empty_like(x)",
        "        n = x.numel()",
        "        BLOCK = 4096",
        f"        {kernel}[((n + BLOCK - 1) // BLOCK,)]({tensors}, n, BLOCK=BLOCK, num_warps=8)",
        "        return out",
        "",
    ]
    return "\n".join(lines)
