"""The softmax family: softmax and log-softmax along rows and columns, with and without
a temperature, in both styles, pass the solution check; a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import family_task

SIGNATURES = [
    f"softmax:{op}:{along}:{temp}{style}"
    for op in ("softmax", "log_softmax")
    for along in ("rows", "cols")
    for temp in ("plain", "temp")
    for style in ("", ":moved")
]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_solution_check(signature, solution_passes):
    solution_passes("softmax", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature",
    [
        "softmax:log_softmax:cols:plain",
        "softmax:softmax:cols:temp:moved",
        pytest.param("softmax:softmax:rows:temp", marks=pytest.mark.slow),
    ],
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("softmax", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_verifier(signature, verifier_passes):
    verifier_passes("softmax", lambda sig: sig == signature)


def test_half_precision_is_listed_for_some_tasks_and_passes(verifier_passes):
    # The verifier then adds float16 and bfloat16 input sets, with their own tolerances.
    seed = next(s for s in range(200) if "DTYPES" in family_task("softmax", s, small=True).source)
    assert "'float16', 'bfloat16'" in family_task("softmax", seed, small=True).source
    r = verifier_passes("softmax", seed)
    assert {"float16", "bfloat16"} <= {s.name for s in r.input_sets}
