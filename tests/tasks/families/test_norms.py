"""The norms family: every kind (layer, RMS, L1, L2, Frobenius, group, instance; layer and
RMS with and without parameters; the row kinds in both styles) passes the solution check;
a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import family_task, norms

SIGNATURES = [
    *(f"norms:{k}:{a}{s}" for k in ("layer", "rms") for a in ("affine", "plain")
      for s in ("", ":moved")),
    *(f"norms:{k}:moved" for k in ("l1", "l2")),
    *(f"norms:{k}" for k in norms.KINDS if k not in ("layer", "rms")),
]  # fmt: skip


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_kind_passes_the_solution_check(signature, solution_passes):
    solution_passes("norms", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature",
    [
        "norms:group",
        "norms:rms:affine:moved",
        pytest.param("norms:layer:affine", marks=pytest.mark.slow),
    ],
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("norms", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_kind_passes_the_verifier(signature, verifier_passes):
    verifier_passes("norms", lambda sig: sig == signature)


def test_learned_parameters_are_drawn_not_left_at_ones(first_seed):
    # A weight of ones would let a kernel that ignores it pass.
    task = family_task("norms", first_seed("norms", lambda sig: sig == "norms:group"))
    assert "nn.init.normal_(self.norm.weight, 1.0, 0.1)" in task.source
    task = family_task("norms", first_seed("norms", lambda sig: sig == "norms:layer:affine"))
    assert "1.0 + 0.1 * torch.randn(dim)" in task.source
