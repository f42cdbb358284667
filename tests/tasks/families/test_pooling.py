"""The pooling family: 1-D and 2-D, max and average, padded or not, pass the solution
check; a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import draw_one, family_task

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


def test_every_signature_compiles_for_an_sm90_gpu(compiles_for_sm90):
    # Padded and not (the bounds tests compiled in or out), overlapping windows and not,
    # at tiles forward picks: wide rows, and narrow ones for small outputs.
    tiles = [
        {"KS": ks, "STRIDE": stride, "PAD": pad, **blocks}
        for ks, stride, pad in [(3, 1, 1), (2, 2, 0), (5, 2, 2)]
        for blocks in [{"BLOCK_R": 8, "BLOCK_L": 256}, {"BLOCK_R": 64, "BLOCK_L": 32},
                       {"BLOCK_H": 16, "BLOCK_W": 64}, {"BLOCK_H": 32, "BLOCK_W": 32}]
    ]  # fmt: skip
    solutions = []
    for signature in SIGNATURES:
        seed = next(s for s in range(3000) if draw_one("pooling", s).signature == signature)
        solutions.append((family_task("pooling", seed).solution, tiles))
    assert compiles_for_sm90(solutions) == []
