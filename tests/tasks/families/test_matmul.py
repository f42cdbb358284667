"""The matmul family: every variant and every epilogue op passes the solution check, a
sample passes the verifier, transposed operands are read through their strides and the
epilogue is fused into the one kernel."""

import pytest

from tritonrl.tasks.families import family_task, matmul
from tritonrl.tasks.families.base import ACTIVATIONS

OPS = ["bias", "scale", *ACTIVATIONS, "residual", "clamp"]
FEATURES = [f"variant:{v}" for v in matmul.VARIANTS] + [f"op:{op}" for op in OPS]


def _wanted(feature: str):
    what, _, arg = feature.partition(":")
    if what == "variant":
        return lambda sig: sig.split(":")[1] == arg
    return lambda sig: arg in sig.split(":")[2].split("+")


@pytest.mark.parametrize("feature", FEATURES)
def test_every_variant_and_epilogue_op_passes_the_solution_check(feature, solution_passes):
    solution_passes("matmul", _wanted(feature))


@pytest.mark.parametrize(
    "wanted",
    [
        lambda sig: sig.startswith("matmul:trans_b:") and sig.count("+") == 2,
        pytest.param(
            lambda sig: sig.startswith("matmul:matvec:") and "residual" in sig,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["trans_b+3 ops", "matvec+residual"],
)
def test_a_sample_passes_the_verifier(wanted, verifier_passes):
    verifier_passes("matmul", wanted)


@pytest.mark.slow
@pytest.mark.parametrize("feature", FEATURES)
def test_every_variant_and_epilogue_op_passes_the_verifier(feature, verifier_passes):
    verifier_passes("matmul", _wanted(feature))


def test_transposed_operands_are_views_not_copies(first_seed):
    for variant, view in (("trans_a", "A = A.T"), ("trans_b", "B = B.T")):
        seed = first_seed("matmul", lambda sig, v=variant: sig.split(":")[1] == v)
        forward = family_task("matmul", seed).solution.split("def forward")[1]
        assert view in forward and "A.contiguous()" not in forward
        assert "B.contiguous()" not in forward


def test_the_epilogue_is_fused_into_the_one_kernel(first_seed):
    seed = first_seed("matmul", lambda sig: sig.count("+") == 2 and ":matvec:" not in sig)
    task = family_task("matmul", seed)
    assert task.level == 2 and task.solution.count("@triton.jit") == 1
    assert 'input_precision="ieee"' in task.solution  # fp32 products, as the reference's
    plain = family_task("matmul", first_seed("matmul", lambda sig: sig.endswith(":none")))
    assert plain.level == 1
