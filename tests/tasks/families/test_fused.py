"""The fused family (partial policy): the layer left to PyTorch and the epilogue in one
Triton kernel pass the verifier under the partial policy, and are flagged under the
strict one."""

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.tasks.families import family_task, fused
from tritonrl.verify.funnel import verify

FEATURES = [f"layer:{layer}" for layer in fused.LAYERS] + ["op:bias", "op:scale", "op:clamp"]


def _wanted(feature: str):
    what, _, arg = feature.partition(":")
    if what == "layer":
        return lambda sig: sig.split(":")[1] == arg
    return lambda sig: arg in sig.split(":")[2].split("+")


@pytest.mark.parametrize("feature", FEATURES)
def test_every_layer_and_op_passes_the_solution_check(feature, solution_passes):
    solution_passes("fused", _wanted(feature))


@pytest.mark.parametrize(
    "feature", ["layer:conv2d", pytest.param("layer:linear", marks=pytest.mark.slow)]
)
def test_a_sample_passes_the_verifier_under_the_partial_policy(feature, verifier_passes):
    verifier_passes("fused", _wanted(feature))


def test_the_strict_policy_flags_the_torch_layer(first_seed):
    task = family_task("fused", first_seed("fused", _wanted("layer:conv1d")), small=True)
    r = verify(task, task.solution, VerifyConfig(device="cpu"))
    assert not r.correct and r.flags and r.stage == "static"
