"""Static checks, the entry point: every flag is fed a hostile snippet by some rule
family's file, a candidate without a kernel or that does not parse is reported (never
raised), findings carry their line and detail, and an unknown policy is refused.
"""

from __future__ import annotations

import pytest
from static_cases import FAMILIES, candidate, flags

from tritonrl.verify.static import FLAGS, Finding, static_check

NO_KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x)
"""


def test_every_flag_has_a_hostile_snippet() -> None:
    covered = set().union(*FAMILIES.values()) | {"no_triton_kernel", "syntax_error"}
    assert covered == set(FLAGS)


def test_no_triton_kernel() -> None:
    assert flags(NO_KERNEL) == {"no_triton_kernel"}


def test_syntax_error_is_reported_not_raised() -> None:
    assert static_check("def f(:\n") == [Finding("syntax_error", 1, "invalid syntax")]


def test_findings_carry_lines_and_details() -> None:
    src = candidate("y = torch.relu(x)")
    [finding] = static_check(src)
    assert finding.flag == "torch_compute"
    assert src.splitlines()[finding.line - 1].strip() == "y = torch.relu(x)"
    assert "torch.relu" in finding.detail


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError):
        static_check("x = 1", policy="lenient")
