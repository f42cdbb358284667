"""The timing phase's score (`tritonrl.verify.timing_phase`): both speedups reach the
result, and the reward uses the one `verify.speedup_measure` picks (the lower by
default). The phase against a worker stand-in is in test_gate.py; on the GPU, in
test_timing.py."""

import pytest

from tritonrl.config import VerifyConfig


def _summary(median_ms: float) -> dict:
    return {"median": median_ms, "mean": median_ms, "se": median_ms * 1e-3, "n": 100}


@pytest.mark.parametrize(
    ("measure", "picked", "speedup"), [("min", "launch", 0.3), ("device", "device", 12.5),
                                       ("launch", "launch", 0.3)],
)  # fmt: skip
def test_the_reward_uses_the_lower_of_the_two_speedups_by_default(measure, picked, speedup):
    from tritonrl.reward import compute_reward
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import _set_speedups

    config = VerifyConfig(speedup_measure=measure)
    result = VerifyResult(task="t", device="cuda", compiled=True, tiny_correct=True, correct=True)
    measure = _set_speedups(
        result, config, {"device": (_summary(0.05), _summary(0.004)),
                         "launch": (_summary(0.06), _summary(0.2))},
    )  # fmt: skip
    assert set(result.speedups) == {"device", "launch"}
    assert result.speedups["device"]["speedup"] == pytest.approx(12.5)
    assert result.speedups["launch"]["speedup"] == pytest.approx(0.3)
    assert measure == picked
    assert result.speedup == pytest.approx(speedup)
    assert result.reward_speedup < 1 if picked == "launch" else result.reward_speedup > 10
    reward = compute_reward(result, "staged")
    assert reward < 0.75 if picked == "launch" else reward == pytest.approx(1.0)
    lo, hi = result.speedup_ci
    assert lo < result.speedup < hi
    assert result.to_dict()["speedups"]["launch"]["ci"] == result.speedups["launch"]["ci"]


def test_an_unknown_speedup_measure_is_refused_when_the_config_is_built():
    with pytest.raises(ValueError, match="speedup_measure"):
        VerifyConfig(speedup_measure="fastest")


class _Replies:
    """A session whose `time` replies are given: the trusted side's reading of them."""

    def __init__(self, reply: dict) -> None:
        self.reply = reply

    def call(self, cmd: dict) -> dict:
        return self.reply

    def findings(self) -> dict:
        return {}


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": True, "series": {"new": {"times_ms": [0.01]}, "ref": {"times_ms": [0.02]}}},
        {"ok": True, "series": {"new": {"times_ms": [0.01]}, "ref": {"times_ms": [0.02]}},
         "launch": {"new": {"times_ms": [-1.0]}, "ref": {"times_ms": [0.02]}}},
        {"ok": True, "series": {"new": {"times_ms": []}, "ref": {"times_ms": [0.02]}},
         "launch": {"new": {"times_ms": [0.1]}, "ref": {"times_ms": [0.1]}}},
    ],
)  # fmt: skip
def test_a_timing_reply_without_both_series_of_positive_times_is_tampering(reply):
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import _measure

    result = VerifyResult(task="t", device="cuda")
    assert _measure(_Replies(reply), result, {"op": "time"}) is None
    assert result.flags == ["timer_tampering"]


def test_times_that_outrun_the_wall_clock_are_tampering():
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import _measure

    hour = [3.6e6]  # an hour of GPU time reported for a call that took milliseconds
    series = {"new": {"times_ms": hour}, "ref": {"times_ms": hour}}
    result = VerifyResult(task="t", device="cuda")
    m = _measure(_Replies({"ok": True, "series": series, "launch": series}), result, {})
    assert m is not None and result.flags == ["timer_tampering"]
    assert m["launch"][1]["median"] == 3.6e6
