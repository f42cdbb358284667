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


def test_every_signature_compiles_for_an_sm90_gpu(compiles_for_sm90):
    # Every kind of scan, at tiles from one long line to many short ones, compiles for
    # sm_90 (the shared `compiles_for_sm90`). Triton 3.6's back end refused a scan and a
    # sum of the same loaded tile; the solutions avoid that.
    from tritonrl.tasks import families

    solutions = {t.name: t.solution for t in families.draw(40, 0, "all", ["scans"], False)}
    assert len(solutions) == len(SIGNATURES)
    tiles = [{"BLOCK_O": bo, "BLOCK_R": br} for bo, br in [(1, 2048), (16, 128), (128, 16)]]
    assert compiles_for_sm90([(s, tiles) for s in solutions.values()], {"m_ptr": "*i1"}) == []
