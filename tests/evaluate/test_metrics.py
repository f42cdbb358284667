"""Evaluation metrics by hand: pass@k's unbiased estimator, fast_p with the noise rule,
the geometric mean, flags by category, what is not given without timing, and the
metrics by turn."""

import math

import pytest

from tritonrl.evaluate.metrics import k_values, pass_at_k, summarize, turn_metrics


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


def test_turn_metrics_are_by_turn_the_best_so_far():
    """Conversation a: wrong, then 1.5x, then wrong again (still correct by turn 3 at
    1.5x); b: 0.8x at once, then 2.0x; c: never correct (one turn asked, then two more)."""

    def turn(t, correct, speedup=None, task="a"):
        return {**_row(task, 1, correct, speedup=speedup, reward_speedup=speedup), "turn": t}

    a = [turn(1, False), turn(2, True, 1.5), turn(3, False)]
    b = [turn(1, True, 0.8, "b"), turn(2, True, 2.0, "b"), turn(3, True, 1.1, "b")]
    c = [turn(1, False, task="c"), turn(2, False, task="c")]
    m = turn_metrics([a, b, c], 3)
    assert [m[t]["answered"] for t in "123"] == [3, 3, 2]
    assert [m[t]["correct"] for t in "123"] == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert [m[t]["fast_1"] for t in "123"] == pytest.approx([0, 2 / 3, 2 / 3])
    assert m["1"]["best_speedup"] == pytest.approx(0.8)
    assert m["3"]["best_speedup"] == pytest.approx(math.sqrt(1.5 * 2.0))
    untimed = {"device": "cpu", "speedup": None, "reward_speedup": None}
    cpu = [[{**r, "verdict": {**r["verdict"], **untimed}} for r in conv] for conv in (a, b)]
    m = turn_metrics(cpu, 2)
    assert m["2"]["correct"] == 1.0 and m["2"]["fast_1"] is None and m["2"]["best_speedup"] is None
    with pytest.raises(ValueError, match="no conversations"):
        turn_metrics([], 2)


def test_turn_metrics_count_answers_repeating_an_earlier_kernel_of_their_conversation():
    """a: kernel A, A again (comment added), then B; b: A, then B; c: no code, twice (not
    a kernel, so no repeat); d has no completions (not counted)."""

    def answer(t, body, task):
        code = f"```python\nclass ModelNew:\n    def forward(self, x):\n        {body}\n```"
        return {**_row(task, 1, False, stage="correctness"), "turn": t,
                "completion": code if body else "I cannot"}  # fmt: skip

    a = [
        answer(1, "return x", "a"),
        answer(2, "return x  # same", "a"),
        answer(3, "return -x", "a"),
    ]
    b = [answer(1, "return x", "b"), answer(2, "return -x", "b")]
    c = [answer(1, "", "c"), answer(2, "", "c")]
    d = [{**_row("d", 1, False), "turn": 1}, {**_row("d", 1, False), "turn": 2}]
    m = turn_metrics([a, b, c, d], 3)
    assert "repeated" not in m["1"]
    assert m["2"]["repeated"] == pytest.approx(1 / 3)  # a's, of a, b and c's
    assert m["3"]["repeated"] == 0.0
    assert turn_metrics([d], 2)["2"]["repeated"] is None
