"""`verify.allowed_torch_ops` names (`tritonrl.verify.static.op_names`): the names the
checks can match are known, in every form they take; a typo or a name with its module
is refused with the accepted form."""

from __future__ import annotations

import pytest
from static_cases import candidate
from test_compute import HOSTILE

from tritonrl.config import PARTIAL_TORCH_OPS
from tritonrl.verify.inside.guards.ops import OP_ALIASES
from tritonrl.verify.static import check_allowed_ops, known_op, static_check


@pytest.mark.parametrize(
    "name", ["relu", "torch.relu", "F.relu", "torch.nn.functional.relu", "aten::mm", "Conv2d",
             "relu_", "add", "lt", "_softmax", "convolution", *PARTIAL_TORCH_OPS, *OP_ALIASES],
)  # fmt: skip
def test_op_names_the_checks_match_are_known(name):
    assert known_op(name)


@pytest.mark.parametrize("name", ["reluu", "not_an_op", "nn.Conv2d", "torch.nn.Conv2d", "a b", ""])
def test_names_no_check_can_match_are_refused_with_the_accepted_form(name):
    assert not known_op(name)
    with pytest.raises(ValueError) as e:
        check_allowed_ops(["mm", name])
    assert str(e.value) == (
        f"verify.allowed_torch_ops: {name!r} is no torch op the checker knows; write names "
        "like 'matmul', 'conv2d', 'relu' (or 'torch.relu', 'F.relu', 'aten::mm')"
    )


def test_every_op_a_finding_names_is_known_and_allows_it():
    """What the partial policy would need for each hostile candidate (`Finding.op`) is a
    name `check_allowed_ops` takes, and allowing it clears that finding."""
    seen = 0
    for case_id, _, source in HOSTILE:
        for finding in static_check(source):
            if finding.op:
                seen += 1
                assert known_op(finding.op), (case_id, finding)
                cleared = static_check(source, "partial", frozenset({finding.op}))
                assert finding not in cleared, (case_id, finding)
    assert seen > 20
    layer = static_check(candidate("y = self.conv(x)", init="self.conv = nn.Conv2d(3, 3, 3)"))
    assert [(f.flag, f.op) for f in layer] == [("nn_compute_layer", "conv2d")]
