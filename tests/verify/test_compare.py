"""`tritonrl.verify.compare.stale_share`: how much of a wrong output holds another set's
answer. A cached result returned again holds it nearly everywhere; a kernel that
computed the new inputs, however inexactly (another library engine, lower precision:
what memory pressure can cause), holds it almost nowhere, even where two answers of a
ReLU coincide (both zero)."""

from __future__ import annotations

import torch

from tritonrl.verify import tensorfile
from tritonrl.verify.compare import compare_outputs, stale_share


def _answers(n: int = 100_000):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    return torch.relu(a), torch.relu(b)


def test_a_cached_answer_is_stale_everywhere_the_answers_differ():
    stale, fresh = _answers()
    assert stale_share(stale, fresh, stale.clone()) == 1.0
    touched = stale.clone()
    touched[:10] = fresh[:10]  # a kernel that wrote a few elements and left the rest
    assert stale_share(stale, fresh, touched) > 0.99


def test_an_inexact_answer_for_the_new_inputs_is_not_stale():
    stale, fresh = _answers()
    half = fresh.half().float()  # wrong at float32's tolerance, but computed anew
    assert compare_outputs(fresh, half) is not None
    assert stale_share(stale, fresh, half) < 0.01
    # where both answers are zero they do not count: they cannot tell the two apart
    assert stale_share(stale, fresh, torch.zeros_like(fresh)) < 0.5


def test_outputs_read_from_their_file_and_in_tuples(tmp_path):
    stale, fresh = _answers(3 << 20)  # past the raw-file threshold: read a chunk at a time
    tensorfile.save([stale.clone(), fresh[:5]], tmp_path / "out.pt")
    got = tensorfile.load(tmp_path / "out.pt", lazy=True)
    share = stale_share([stale, fresh[:5]], [fresh, fresh[:5]], got)
    assert share == 1.0


def test_no_answer_when_shapes_differ_or_the_answers_agree():
    stale, fresh = _answers()
    assert stale_share(stale, fresh, stale[:10]) is None
    assert stale_share(fresh, fresh, stale) is None
