"""What the static-check tests share: a candidate in the KernelBench shape with a cheat
dropped into one place (`candidate`), the flags `static_check` gives it (`flags`), and
the rule families the tests are split by (`FAMILIES`: family -> the flags its file
feeds hostile snippets; `test_checker.py` checks that together they cover every flag).
"""

from __future__ import annotations

import textwrap

from tritonrl.verify.static import static_check

HEADER = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x, y):
    copy_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
"""


def candidate(
    forward: str,
    init: str = "",
    prelude: str = "",
    epilogue: str = "",
    members: str = "",
    bases: str = "nn.Module",
) -> str:
    """A full candidate whose forward body is `forward` (a kernel runs first); `members`
    go into the class body, `prelude` before the class, `epilogue` after it."""
    init_body = textwrap.indent(textwrap.dedent(init), " " * 8) if init else ""
    body = textwrap.indent(textwrap.dedent(forward), " " * 8)
    extra = textwrap.indent(textwrap.dedent(members), " " * 4) + "\n" if members else ""
    return (
        HEADER
        + textwrap.dedent(prelude)
        + f"\n\nclass ModelNew({bases}):\n"
        + extra
        + "    def __init__(self, n=4, m=4):\n"
        + "        super().__init__()\n"
        + init_body
        + "\n    def forward(self, x, w):\n"
        + "        y = torch.empty_like(x)\n"
        + "        launch(x, y)\n"
        + body
        + "\n        return y\n"
        + textwrap.dedent(epilogue)
    )


def flags(source: str, **kw) -> set[str]:
    return {f.flag for f in static_check(source, **kw)}


# family (test_<family>.py) -> the flags its hostile snippets must cover
FAMILIES: dict[str, frozenset[str]] = {
    "hidden_code": frozenset({"torch_compile", "hidden_code"}),
    "escapes": frozenset({"ctypes", "subprocess", "threading", "io", "forged_verdict"}),
    "tampering": frozenset(
        {
            "introspection",
            "monkeypatch",
            "try_except_launch",
            "reference_access",
            "timing_tamper",
            "side_stream",
            "output_type",
        }
    ),  # fmt: skip
    "compute": frozenset({"torch_compute", "nn_compute_layer"}),
}
