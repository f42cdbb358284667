"""`tritonrl.verify.compare`: the per-dtype tolerance with its accumulation-order allowance
(an honest float32 sum in another order passes at any length; products in TF32, float16
or bfloat16 and a single wrong element do not), and `stale_share`: how much of a wrong
output holds another set's answer. A cached result returned again holds it nearly
everywhere; a kernel that computed the new inputs, however inexactly (another library
engine, lower precision: what memory pressure can cause), holds it almost nowhere, even
where two answers of a ReLU coincide (both zero)."""

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


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """`x` rounded to TF32's 10-bit mantissa (what a tensor-core product reads)."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _long_sum():
    """A 64 x 65,536 x 64 float32 product: torch's, and the same summed over K in
    blocks of 64 (the order a tiled kernel adds in)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 65536, generator=g), torch.randn(65536, 64, generator=g)
    blocked = sum(a[:, k : k + 64] @ b[k : k + 64, :] for k in range(0, 65536, 64))
    return a, b, a @ b, blocked


def test_a_float32_sum_in_another_order_passes_where_atol_alone_refuses_it():
    a, b, ref, blocked = _long_sum()
    err = (blocked - ref).abs()
    assert bool((err > 1e-4 + 1e-4 * ref.abs()).any())  # atol + rtol alone refuse it
    assert compare_outputs(ref, blocked) is None


def test_lower_precision_products_and_one_wrong_element_are_still_refused():
    a, b, ref, blocked = _long_sum()
    for name, low in [
        ("tf32", _tf32(a) @ _tf32(b)),
        ("float16", a.half().float() @ b.half().float()),
        ("bfloat16", a.bfloat16().float() @ b.bfloat16().float()),
    ]:
        reason = compare_outputs(ref, low)
        assert reason is not None and "elements differ" in reason, name
        assert int(reason.split("output 0: ")[1].split(" of ")[0]) > ref.numel() // 2, name
    one = blocked.clone()
    one[3, 5] += 0.001 * ref.abs().mean()  # one element off by 0.1% of a typical value
    assert compare_outputs(ref, one).startswith("output 0: 1 of 4096 elements differ")


def test_infinities_of_one_sign_agree_and_a_nan_reference_is_named():
    # A product that overflows in both answers is inf in both: equal, as torch.allclose
    # has it (both used to fail: inf - inf is NaN), while a number where the reference is
    # inf fails (rtol x inf used to let it pass). A reference that is NaN where the answer
    # has a number fails, and says so (the message used to read "max abs error 0").
    inf = float("inf")
    ref = torch.tensor([1.0, inf, -inf, 2.0])
    assert compare_outputs(ref, ref.clone()) is None
    for wrong in ([1.0, -inf, -inf, 2.0], [1.0, 1e30, -inf, 2.0]):  # rtol x inf: no pass
        reason = compare_outputs(ref, torch.tensor(wrong))
        assert reason.startswith("output 0: 1 of 4 elements differ (max abs error inf"), wrong
    nan_ref = torch.tensor([1.0, float("nan"), float("nan"), 2.5])
    reason = compare_outputs(nan_ref, torch.tensor([1.0, 3.0, 4.0, 2.0]))
    assert reason.startswith("output 0: 3 of 4 elements differ (max abs error 0.5, atol ")
    assert reason.endswith("); the reference is NaN at 2 of them")


def test_a_near_miss_after_a_squashing_epilogue_passes_against_float64():
    # tanh after a long sum: the outputs are near +-1, but where the sum cancels to near
    # 0 its rounding passes through tanh whole, beyond the share of the mean |output|. The
    # second look holds the candidate to the float64 outputs with 4x the float32
    # reference's own worst error there; TF32 products still fail it.
    a, b, ref, blocked = _long_sum()
    ref, honest = torch.tanh(ref), torch.tanh(blocked)
    wide = torch.tanh(a.double() @ b.double())
    calls = []

    def widened():
        calls.append(1)
        return wide

    assert compare_outputs(ref, honest) is not None  # the first look alone refuses it
    assert compare_outputs(ref, honest, widened) is None
    assert calls == [1]
    assert compare_outputs(ref, torch.tanh(_tf32(a) @ _tf32(b)), widened) is not None
    assert compare_outputs(ref, honest, lambda: ref) is not None  # no float64: first verdict
    far = honest.clone()
    far[0, 0] = -far[0, 0] + 0.5  # a plain wrong answer gets no second look
    calls.clear()
    assert compare_outputs(ref, far, widened) is not None and calls == []


def test_the_widened_reference_is_the_same_model_and_inputs_in_float64():
    from tritonrl.tasks import load_builtin
    from tritonrl.verify.inputs import InputSet, prepare_set, widened_reference

    task = load_builtin("level1/22_Matmul_Square").tasks[0]
    s = prepare_set(task, InputSet("seed_a", "small", 123), "cpu")
    wide = widened_reference(task, s, "cpu")
    assert wide.dtype == torch.float64 and wide.shape == s.expected.shape
    a, b = (x.double() for x in s.inputs)
    torch.testing.assert_close(wide, a @ b, rtol=1e-12, atol=1e-12)
    assert not torch.equal(wide.float(), s.expected)  # the float32 pass rounded somewhere
