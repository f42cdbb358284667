"""The scans family: cumsum, cumprod, reverse and masked cumsum, along the last and a
strided dim, pass the solution check; a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import scans

SIGNATURES = [f"scans:{op}:{where}" for op in scans.OPS for where in ("last", "inner")]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_solution_check(signature, solution_passes):
    solution_passes("scans", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature",
    ["scans:masked_cumsum:last", pytest.param("scans:reverse_cumsum:last", marks=pytest.mark.slow)],
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("scans", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_verifier(signature, verifier_passes):
    verifier_passes("scans", lambda sig: sig == signature)
