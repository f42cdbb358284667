"""The scans family: cumsum, cumprod, reverse and masked cumsum, along the last and a
strided dim, in both styles, pass the solution check; a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import scans

SIGNATURES = [
    f"scans:{op}:{where}{style}"
    for op in scans.OPS
    for where in ("last", "inner")
    for style in ("", ":moved")
]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_solution_check(signature, solution_passes):
    solution_passes("scans", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature",
    [
        "scans:masked_cumsum:last",
        "scans:masked_cumsum:inner:moved",
        pytest.param("scans:reverse_cumsum:last", marks=pytest.mark.slow),
    ],
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

    drawn = [families.draw_one("scans", s) for s in range(200)]
    solutions = {d.signature: d.solution for d in drawn}
    assert sorted(solutions) == sorted(SIGNATURES)
    tiles = [{"BLOCK_O": bo, "BLOCK_R": br} for bo, br in [(1, 2048), (16, 128), (128, 16)]]
    assert compiles_for_sm90([(s, tiles) for s in solutions.values()], {"m_ptr": "*i1"}) == []


def test_cumprods_partial_products_stay_finite_on_the_shifted_input_set(tmp_path):
    # A GPU scans in parallel: any run of consecutive factors may be multiplied alone. On
    # the verifier's shifted set (each value -1.7 x + 0.5 mean|x|) the largest product of
    # a run must stay inside float32's range (log below 88), at the tasks' own sizes.
    import torch

    from tritonrl.tasks.families import draw_one, family_task
    from tritonrl.tasks.runtime import import_source
    from tritonrl.verify.inputs import _shift

    seeds = [s for s in range(300) if draw_one("scans", s).signature.startswith("scans:cumprod")]
    assert len(seeds) >= 20
    torch.manual_seed(0)
    for seed in seeds:
        ref = import_source(family_task("scans", seed).source, f"cumprod_{seed}", tmp_path)
        logs = (
            _shift(ref.get_inputs()[0]).double().abs().clamp(min=1e-300).log().cumsum(ref.scan_dim)
        )
        lowest = torch.cummin(logs, ref.scan_dim).values.clamp(max=0.0)
        worst = (logs - lowest).max().item()  # a run's log product: a prefix's less another
        assert worst < 88.0, f"fam:scans:{seed}: a run's product reaches e^{worst:.0f}"
