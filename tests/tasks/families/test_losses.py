"""The losses family: every loss (and both reductions of the element-wise ones) passes
the solution check; a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import draw_one, family_task, losses

SIGNATURES = [
    *(f"losses:{k}:{r}" for k in ("mse", "huber", "hinge") for r in ("mean", "sum")),
    *(f"losses:{k}" for k in ("kl", "cross_entropy", "cosine")),
]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_loss_passes_the_solution_check(signature, solution_passes):
    solution_passes("losses", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature", ["losses:cross_entropy", pytest.param("losses:huber:mean", marks=pytest.mark.slow)]
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("losses", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_loss_passes_the_verifier(signature, verifier_passes):
    verifier_passes("losses", lambda sig: sig == signature)


def test_every_kind_compiles_for_an_sm90_gpu(compiles_for_sm90):
    # The partial sums at their block, the row losses at the tiles forward picks (one
    # long row to many short ones), the final sum at one and at many partials.
    tiles = [{"BLOCK": 4096}, {"BLOCK": 2}, {"BLOCK_O": 1, "BLOCK_R": 8192},
             {"BLOCK_O": 4, "BLOCK_R": 1024}, {"BLOCK_O": 16, "BLOCK_R": 16}]  # fmt: skip
    solutions = []
    for kind in losses.KINDS:
        seed = next(s for s in range(3000) if f":{kind}" in draw_one("losses", s).signature)
        solutions.append((family_task("losses", seed).solution, tiles))
    # cross-entropy's targets are int64 labels; the other losses' are floats
    ce = losses.KINDS.index("cross_entropy")
    assert compiles_for_sm90(solutions[:ce] + solutions[ce + 1 :]) == []
    assert compiles_for_sm90([solutions[ce]], {"t_ptr": "*i64"}) == []
