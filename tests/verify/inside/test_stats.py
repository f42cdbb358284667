"""The statistics of a timing (`tritonrl.verify.inside.stats`): medians, their errors and the
floor under them, the speedup's interval, the noise rule, and when more trials stop."""

import pytest

from tritonrl.reward import compute_reward
from tritonrl.verify.inside.stats import effective_speedup, speedup_stats, summarize
from tritonrl.verify.result import VerifyResult


def test_trimmed_mean_ignores_the_tails_and_rse_shrinks_with_more_trials():
    times = [1.0] * 45 + [50.0] * 5  # five outliers: all inside the trimmed 10% tail
    s = summarize(times)
    assert s["mean"] == pytest.approx(1.0) and s["median"] == 1.0 and s["n"] == 50
    noisy = [1.0 + 0.1 * ((i * 7) % 11 - 5) / 5 for i in range(500)]
    assert summarize(noisy)["rse"] < summarize(noisy[:50])["rse"] / 2


def test_the_speedup_is_a_ratio_of_medians_and_its_error_never_collapses():
    ref = summarize([2.0] * 40 + [2.6] * 10)  # 20% slow trials: past the trimmed tails
    new = summarize([1.0] * 50)
    assert ref["mean"] > 2.05 and speedup_stats(ref, new)[0] == pytest.approx(2.0)
    mostly_equal = summarize([1.0] * 30 + [1.1] * 20)  # median absolute deviation 0
    assert mostly_equal["se"] > 0.005 and mostly_equal["half_width"] > 0.01


def test_a_short_kernels_interval_keeps_the_between_run_spread():
    # 4.2 us with a tiny within-run error: runs on the H100 spread from 0.96 to 1.02
    ref, new = summarize([0.0042, 0.00421] * 100), summarize([0.00421, 0.0042] * 100)
    _, (lo, hi) = speedup_stats(ref, new)
    assert lo < 0.96 and hi > 1.04
    big_ref, big_new = summarize([0.182, 0.1821] * 100), summarize([0.1821, 0.182] * 100)
    _, (lo, hi) = speedup_stats(big_ref, big_new)
    assert hi - lo < 0.008  # 180 us: the interval stays well inside [0.98, 1.02]


@pytest.mark.parametrize(
    "ref_us, new_us",
    # copies of the reference beside 15 busy lanes on the H100, each run's within-run
    # error tiny: a 9 us matmul read 1.054, a 20 us GEMM 1.024, a 182 us ReLU 1.002
    [(9.31, 8.83), (20.32, 19.84), (181.86, 181.47)],
)
def test_an_identical_kernels_interval_holds_one_across_runs(ref_us, new_us):
    ref = summarize([ref_us / 1e3, ref_us / 1e3 * 1.0001] * 30)
    new = summarize([new_us / 1e3, new_us / 1e3 * 1.0001] * 30)
    ratio, (lo, hi) = speedup_stats(ref, new)
    assert ratio > 1.0 and lo <= 1.0 <= hi, (ratio, lo, hi)


def test_trials_stop_once_more_could_not_narrow_the_interval():
    from tritonrl.verify.inside.stats import SYSTEMATIC_MS, converged

    # 4 us, scattered by +-0.6 us: an RSE above 1%, but a standard error already under the
    # floor that the interval keeps whatever the count
    short = summarize([0.004 + 0.0003 * ((i * 7) % 5 - 2) for i in range(50)])
    assert short["rse"] > 0.01 and short["se"] < SYSTEMATIC_MS
    assert converged([short], 0.01)
    # 20 us scattered by +-10%: 1% is 0.2 us, above the floor
    long = summarize([0.02 * (1 + 0.05 * ((i * 7) % 5 - 2)) for i in range(50)])
    assert long["rse"] > 0.01 and long["se"] > SYSTEMATIC_MS
    assert not converged([long], 0.01) and not converged([short, long], 0.01)
    assert converged([summarize([0.02] * 25 + [0.0201] * 25)], 0.01)


def test_speedup_interval_contains_the_ratio_and_widens_with_noise():
    ref, new = summarize([2.0, 2.02, 1.98] * 20), summarize([1.0, 1.01, 0.99] * 20)
    s, (lo, hi) = speedup_stats(ref, new)
    assert s == pytest.approx(2.0, rel=1e-3) and lo < s < hi
    loud = summarize([1.0, 1.3, 0.7] * 20)
    _, (lo2, hi2) = speedup_stats(ref, loud)
    assert hi2 - lo2 > hi - lo


@pytest.mark.parametrize(
    ("speedup", "ci", "floor", "expected"),
    [
        (1.05, (0.97, 1.13), 0.02, 1.0),  # interval contains 1: no speedup
        (1.015, (1.01, 1.02), 0.02, 1.0),  # within the noise floor
        (1.5, (1.4, 1.6), 0.02, 1.4),  # faster: the lower bound
        (0.5, (0.45, 0.55), 0.02, 0.55),  # slower: the bound nearest 1, not punished by noise
    ],
)
def test_noise_rule(speedup, ci, floor, expected):
    assert effective_speedup(speedup, ci, floor) == pytest.approx(expected)


def test_rewards_use_the_noise_ruled_speedup():
    r = VerifyResult(task="t", device="cuda", compiled=True, tiny_correct=True, correct=True)
    r.speedup, r.speedup_ci, r.reward_speedup = 1.05, (0.97, 1.13), 1.0
    assert compute_reward(r, "staged") == pytest.approx(0.7 + 0.3 * 0.5)
    assert compute_reward(r, "kevin") == pytest.approx(1.3)
    r.reward_speedup = None  # results without the rule (older JSON) use the point value
    assert compute_reward(r, "kevin") == pytest.approx(1.35)
