"""Reward schemes over verifier results."""

import json

import pytest

from tritonrl.reward import SCHEMES, compute_reward
from tritonrl.verify.result import LIMITS, VerifyResult


def _r(**kw) -> VerifyResult:
    return VerifyResult(task="t", device="cuda", **kw)


def test_staged_scheme_levels():
    assert compute_reward(_r()) == 0.0
    assert compute_reward(_r(compiled=True)) == 0.3
    assert compute_reward(_r(compiled=True, tiny_correct=True)) == 0.5
    assert compute_reward(_r(compiled=True, tiny_correct=True, correct=True)) == 0.7
    fast = _r(compiled=True, tiny_correct=True, correct=True, speedup=1.0)
    assert compute_reward(fast) == pytest.approx(0.85)
    fast.speedup = 5.0
    assert compute_reward(fast) == pytest.approx(1.0)


def test_any_cheating_flag_zeroes_every_scheme():
    for scheme in ("staged", "tritonrl", "kevin"):
        r = _r(
            compiled=True, tiny_correct=True, correct=True, speedup=3.0, flags=["torch_fallback"]
        )
        assert compute_reward(r, scheme) == 0.0


def test_tritonrl_and_kevin_schemes():
    ok = _r(compiled=True, tiny_correct=True, correct=True, speedup=3.0)
    assert compute_reward(ok, "tritonrl") == pytest.approx(1.0 + 0.1 * 2.0)
    assert compute_reward(ok, "kevin") == pytest.approx(0.3 + 3.0)
    wrong = _r(compiled=True, tiny_correct=True)
    assert compute_reward(wrong, "tritonrl") == 0.0 and compute_reward(wrong, "kevin") == 0.0
    with pytest.raises(ValueError, match="unknown reward scheme"):
        compute_reward(ok, "best")


# What each stage of the funnel had reached when a limit ended the run: the load, an
# input set after the tiny one, the timing phase of a correct kernel.
REACHED = {
    "load": {},
    "input set": {"compiled": True, "tiny_correct": True},
    "timing": {"compiled": True, "tiny_correct": True, "correct": True, "speedup": 3.0},
}


@pytest.mark.parametrize("stage", REACHED)
@pytest.mark.parametrize("limit", LIMITS)
def test_a_run_ended_by_a_limit_scores_zero_in_every_scheme(limit, stage):
    """A hang or a memory bomb costs the verifier its whole limit: it must never earn
    the partial credit of an honest wrong answer (0.3 / 0.5 in staged), whatever stage
    the limit ended it in; the same result without the limit keeps its reward."""
    honest = _r(**REACHED[stage])
    killed = _r(limit=limit, timed_out=limit == "timeout", **REACHED[stage])
    assert compute_reward(honest) == {"load": 0.0, "input set": 0.5, "timing": 1.0}[stage]
    for scheme in SCHEMES:
        assert compute_reward(killed, scheme) == 0.0, scheme
    assert json.loads(killed.to_json())["limit"] == limit


def test_timed_out_alone_scores_zero_for_callers_that_set_only_it():
    wrong = _r(compiled=True, tiny_correct=True)
    assert compute_reward(wrong) == 0.5 and compute_reward(_r(compiled=True)) == 0.3
    for r in (
        _r(compiled=True, timed_out=True),
        _r(compiled=True, tiny_correct=True, timed_out=True),
    ):
        assert [compute_reward(r, s) for s in SCHEMES] == [0.0, 0.0, 0.0]


def test_an_unknown_scheme_is_refused_when_the_config_is_built():
    from tritonrl.config import VerifyConfig

    with pytest.raises(ValueError, match="verify.reward_scheme must be one of"):
        VerifyConfig(reward_scheme="speedup_only")


def test_the_verifier_gives_a_verdict_and_the_reward_side_scores_it():
    # The verifier never computes a reward: its result has none, and the scheme a
    # config names is applied by the reward side (`reward_for`).
    from tritonrl.config import VerifyConfig
    from tritonrl.reward import reward_for
    from tritonrl.tasks import load_builtin
    from tritonrl.verify import verify

    relu = load_builtin("level1/1_ReLU").tasks[0]
    r = verify(relu, relu.solution, VerifyConfig(device="cpu"))
    assert "reward" not in r.to_dict() and r.correct
    assert reward_for(r, VerifyConfig(device="cpu")) == pytest.approx(0.7)
    assert reward_for(r, VerifyConfig(device="cpu", reward_scheme="tritonrl")) == 1.0
