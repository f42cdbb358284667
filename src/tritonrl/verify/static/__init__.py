"""Static (AST) checks on a candidate kernel's source: the verifier's first cheating filter.

`static_check(source)` parses the candidate, resolves what its names really refer to
(import aliases such as `import torch as T`, `from torch import compile as c`,
`import torch.nn.functional as F`, plain re-bindings such as `c = torch.compile` or
`self.fn = torch.matmul`, `getattr(torch, "compile")` with a literal string, star
imports of allowed modules) and reports `Finding`s whose `flag` names one docs/hacks.md
category. The flags (stable names, they go into `VerifyResult.flags`) are listed in
`FLAGS` below with the docs/hacks.md categories they answer.

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
spell around any AST check; that is why docs/hacks.md pairs them with run-time checks
(`tritonrl.verify.inside.guards`) and why verdicts are computed on the trusted side. The checks
lean towards flagging odd code rather than missing a cheat, while honest kernels
(including the builtin solutions, which the test suite scans) must give no findings.

The package: `rules` (the flags and the tables of names they apply to), `names` (what a
name in the candidate refers to), `scopes` (kernels, what `ModelNew` reaches, which code
launches kernels, each node's scope), `tensors` (which expressions hold tensors or nn
layers), `checker` (the checks, one pass over the tree), `op_names` (the names
`verify.allowed_torch_ops` may hold). This module holds the entry point.
"""

from __future__ import annotations

import ast
import logging

from tritonrl.astlock import AST_LOCK
from tritonrl.config import op_key
from tritonrl.verify.static.checker import Checker
from tritonrl.verify.static.op_names import check_allowed_ops, known_op
from tritonrl.verify.static.rules import (
    ALLOWED_IMPORTS,
    ALLOWED_METHODS,
    ALLOWED_TORCH_CALLS,
    COMPUTE_METHODS,
    FLAGS,
    POLICIES,
    REFERENCE_MODULES,
    Finding,
)

log = logging.getLogger(__name__)

__all__ = [
    "ALLOWED_IMPORTS",
    "ALLOWED_METHODS",
    "ALLOWED_TORCH_CALLS",
    "COMPUTE_METHODS",
    "FLAGS",
    "POLICIES",
    "REFERENCE_MODULES",
    "Finding",
    "check_allowed_ops",
    "known_op",
    "static_check",
]


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
        with AST_LOCK:  # gh-106905: CPython 3.11's parser is not thread-safe
            tree = ast.parse(source)
    except SyntaxError as e:
        return [Finding("syntax_error", e.lineno or 0, str(e.msg))]
    allowed = frozenset(op_key(a) for a in allowed_torch_ops) if policy == "partial" else None
    findings = Checker(tree, allowed).run()
    log.debug("static_check: %d findings (%s)", len(findings), sorted({f.flag for f in findings}))
    return findings
