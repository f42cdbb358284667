"""The pooling family: 1-D and 2-D, max and average, padded or not, pass the solution
check; a sample passes the verifier."""

import pytest

SIGNATURES = [
    f"pooling:{d}:{op}:{pad}"
    for d in ("1d", "2d")
    for op in ("max", "avg")
    for pad in ("pad", "nopad")
]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_solution_check(signature, solution_passes):
    solution_passes("pooling", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature", ["pooling:2d:max:pad", pytest.param("pooling:1d:avg:pad", marks=pytest.mark.slow)]
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("pooling", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_verifier(signature, verifier_passes):
    verifier_passes("pooling", lambda sig: sig == signature)
