"""The reductions family: every op along every dim (and keepdim) passes the solution
check; a sample passes the verifier; arg reductions return int64 indices."""

import pytest

from tritonrl.tasks.families import family_task, reductions

FEATURES = [f"{op}:dim{d}" for op in reductions.OPS for d in range(3)] + ["keepdim"]


def _wanted(feature: str):
    if feature == "keepdim":
        return lambda sig: sig.endswith(":keepdim")
    return lambda sig: sig.startswith(f"reductions:{feature}")


@pytest.mark.parametrize("feature", FEATURES)
def test_every_op_and_dim_passes_the_solution_check(feature, solution_passes):
    solution_passes("reductions", _wanted(feature))


@pytest.mark.parametrize(
    "feature", ["argmax:dim1", pytest.param("prod:dim2", marks=pytest.mark.slow)]
)
def test_a_sample_passes_the_verifier(feature, verifier_passes):
    verifier_passes("reductions", _wanted(feature))


@pytest.mark.slow
@pytest.mark.parametrize("feature", FEATURES)
def test_every_op_and_dim_passes_the_verifier(feature, verifier_passes):
    verifier_passes("reductions", _wanted(feature))


def test_arg_reductions_write_int64(first_seed):
    task = family_task("reductions", first_seed("reductions", _wanted("argmin:dim0")))
    assert "dtype=torch.int64" in task.solution and "tl.argmin" in task.solution
