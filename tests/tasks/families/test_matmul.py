"""The matmul family: every variant and every epilogue op passes the solution check, a
sample passes the verifier, transposed operands are read through their strides and the
epilogue is fused into the one kernel."""

import pytest
import torch
import triton

from tritonrl.tasks.families import draw_one, family_task, matmul
from tritonrl.tasks.families.base import ACTIVATIONS
from tritonrl.tasks.runtime import import_source

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


def _first(prefix: str) -> int:
    return next(s for s in range(3000) if draw_one("matmul", s).signature.startswith(prefix))


def test_the_wide_tiles_compute_the_product(tmp_path):
    # forward picks 128 x 128 (and 128 x 64) tiles only at sizes too big for the
    # interpreter: the kernel at those tiles on a small product, edges masked.
    plain = next(
        s
        for s in range(3000)
        if draw_one("matmul", s).signature.startswith("matmul:rect:")
        and draw_one("matmul", s).level == 1
    )  # no epilogue: no scalars
    task = family_task("matmul", plain)
    kernel = import_source(task.solution, "solution_wide_tiles", tmp_path).matmul_kernel
    torch.manual_seed(0)
    a, b = torch.randn(70, 40), torch.randn(40, 150)
    for bm, bn in [(128, 128), (128, 64)]:
        c = torch.empty(70, 150)
        kernel[(triton.cdiv(70, bm) * triton.cdiv(150, bn),)](
            a, b, c, 70, 150, 40, *a.stride(), *b.stride(), *c.stride(),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=32, GROUP_M=8,
        )  # fmt: skip
        torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)


def test_every_variant_compiles_for_an_sm90_gpu(compiles_for_sm90):
    # At every tiling forward picks (with its warps) and the matrix-vector tiles.
    tiles = [
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8},
        {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4},
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 4},
        {"BLOCK_M": 8, "BLOCK_K": 512}, {"BLOCK_M": 64, "BLOCK_K": 16},
    ]  # fmt: skip
    solutions = [(family_task("matmul", _first(f"matmul:{v}:")).solution, tiles)
                 for v in matmul.VARIANTS]  # fmt: skip
    floats = {"scale": "fp32", "clamp_min": "fp32", "clamp_max": "fp32"}
    assert compiles_for_sm90(solutions, floats) == []
