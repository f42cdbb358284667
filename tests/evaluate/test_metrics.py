"""Evaluation metrics by hand: pass@k's unbiased estimator, fast_p with the noise rule,
the geometric mean, flags by category, and what is not given without timing."""

import math

import pytest

from tritonrl.evaluate.metrics import k_values, pass_at_k, summarize


def _row(task, level, correct, speedup=None, reward_speedup=None, flags=(), stage="done",
         device="cuda"):  # fmt: skip
    verdict = {"correct": correct, "compiled": stage not in ("extract", "static"),
               "stage": stage, "speedup": speedup, "reward_speedup": reward_speedup,
               "flags": list(flags), "device": device}  # fmt: skip
    return {"task": task, "level": level, "verdict": verdict}


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - (3 / 4) * (2 / 3))  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - math.comb(3, 3) / math.comb(5, 3))
    assert pass_at_k(3, 2, 2) == 1.0  # fewer wrong than k: always one right
    with pytest.raises(ValueError, match="at least 3 samples"):
        pass_at_k(2, 1, 3)
    assert k_values(1) == [1] and k_values(4) == [1, 2, 4] and k_values(6) == [1, 2, 4, 6]


def test_fast_p_counts_speedups_past_the_noise_rule_only():
    rows = [
        _row("a", 1, True, speedup=1.5, reward_speedup=1.5),
        _row("a", 1, True, speedup=1.03, reward_speedup=1.0),  # inside the noise: 1.0
        _row("b", 2, True, speedup=2.5, reward_speedup=2.5),
        _row("b", 2, False, stage="correctness"),
        _row("c", 2, False, flags=["torch_compute", "no_triton_kernel"], stage="static"),
        _row("c", 2, False, stage="extract"),
    ]
    s = summarize(rows, k_values=(1, 2))
    o = s["overall"]
    assert (o["n"], o["tasks"]) == (6, 3)
    assert o["valid"] == pytest.approx(5 / 6) and o["compiled"] == pytest.approx(4 / 6)
    assert o["correct"] == pytest.approx(3 / 6)
    assert o["fast_1"] == pytest.approx(2 / 6) and o["fast_2"] == pytest.approx(1 / 6)
    assert o["geomean_speedup"] == pytest.approx((1.5 * 1.0 * 2.5) ** (1 / 3))
    # pass@1 per task: a 2/2, b 1/2, c 0/2 -> mean 0.5; pass@2: 1, 1, 0
    assert o["pass@1"] == pytest.approx(0.5) and o["pass@2"] == pytest.approx(2 / 3)
    assert o["flagged"] == 1 and o["flags"] == {"no_triton_kernel": 1, "torch_compute": 1}
    assert s["levels"]["1"]["correct"] == 1.0 and s["levels"]["2"]["fast_2"] == 0.25
    assert any("count as 1.0" in n for n in s["notes"])


def test_without_timing_fast_p_is_not_given_rather_than_0():
    s = summarize([_row("a", 1, True), _row("a", 1, False, stage="correctness")])
    o = s["overall"]  # verify.timing off: correct, no speedup
    assert o["correct"] == 0.5 and o["fast_1"] is None and o["geomean_speedup"] is None
    assert any("not timed" in n and "null, not 0" in n for n in s["notes"])
    cpu = summarize([_row("a", 1, False, stage="correctness", device="cpu")])
    assert cpu["overall"]["fast_1"] is None and cpu["overall"]["fast_2"] is None
    cuda = summarize([_row("a", 1, False, stage="correctness")])
    assert cuda["overall"]["fast_1"] == 0.0 and not any("not timed" in n for n in cuda["notes"])
    # on CUDA a correct kernel whose timing failed is not faster; the others still count
    mixed = summarize([_row("a", 1, True, 3.0, 3.0), _row("a", 1, True)])["overall"]
    assert mixed["fast_2"] == 0.5 and mixed["geomean_speedup"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="no samples"):
        summarize([])
