"""Reward schemes over verifier results."""

import pytest

from tritonrl.reward import compute_reward
from tritonrl.verify.result import VerifyResult


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
