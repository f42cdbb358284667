"""The losses family: every loss (and both reductions of the element-wise ones) passes
the solution check; a sample passes the verifier."""

import pytest

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
