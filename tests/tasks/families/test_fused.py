"""The fused family (partial policy): the layer left to PyTorch and the epilogue in one
Triton kernel pass the verifier under the partial policy, which a fused task gets even
where the config is strict (its prompts say so); ops beyond the allowed ones are flagged."""

import re

import pytest

from tritonrl.config import PARTIAL_TORCH_OPS, VerifyConfig
from tritonrl.config_loader import load_config
from tritonrl.data.prompts import prompt_settings
from tritonrl.tasks.families import family_task, fused, verify_config_for
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


def test_under_a_strict_config_a_fused_task_is_verified_as_its_prompt_says():
    """Its prompts (prepare's, eval's, RL's) say partial with the default ops; so does the
    verifier, and only for this family: the layer passes, an epilogue left to torch is
    still flagged, and a narrower list the user names is kept."""
    task = family_task("fused", 0, small=True)
    strict = VerifyConfig(device="cpu")
    assert verify_config_for(strict, task.id).allowed_torch_ops == list(PARTIAL_TORCH_OPS)
    assert verify_config_for(strict, "fam:matmul:0") is strict
    assert verify_config_for(strict, "builtin:level2/1_Gemm_Bias_ReLU") is strict
    assert prompt_settings(load_config(None), task.id)["policy"] == "partial"
    r = verify(task, task.solution, strict)
    assert r.correct and not r.flags, (r.error, r.flags)
    torch_epilogue = task.source.replace("class Model(", "class ModelNew(")
    r = verify(task, torch_epilogue, strict)
    assert not r.correct and r.stage == "static" and r.flags, r.flags
    layer = re.search(r"nn\.(Conv1d|Conv2d|Linear)\(", task.solution)[1].lower()
    fewer = [op for op in PARTIAL_TORCH_OPS if op != layer]
    narrow = VerifyConfig(device="cpu", policy="partial", allowed_torch_ops=fewer)
    r = verify(task, task.solution, narrow)
    assert not r.correct and r.flags and r.stage == "static"
