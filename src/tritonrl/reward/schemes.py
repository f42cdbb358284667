"""Reward schemes over a `VerifyResult`.

* `staged` (default): 0 if extraction, static checks or any cheating check fail;
  0.3 compiled (the module loaded and Triton compiled its kernels at their first launch:
  a kernel Triton refused is 0); 0.5 tiny run correct; 0.7 all input sets correct;
  0.7 + 0.3 * min(speedup / 2, 1) when timed.
* `tritonrl`: correct + alpha * clip(speedup, 0, 2), alpha = 0.1 (the TritonRL paper).
* `kevin`: 0.3 * correct + speedup * correct (Kevin-32B's report).

A cheating flag makes every scheme 0, and so does a run ended by a sandbox limit
(`VerifyResult.limit`: the wall-clock timeout, host memory, file size, CPU time, the
process count; or `timed_out`), whatever stage it reached: a hang or a memory bomb costs
the verifier its whole limit, and must never earn the credit of an honest wrong answer
(0.3 or 0.5 in `staged`). The speedup used is `reward_speedup` when the result has one
(the noise rule: 1.0 while the 95% interval contains 1), else `speedup`. The trainer
adapters live in `tritonrl.reward.adapters`; this module only scores.
"""

from __future__ import annotations

from tritonrl.config import REWARD_SCHEMES, VerifyConfig
from tritonrl.verify.result import VerifyResult

SCHEMES = REWARD_SCHEMES


def _refused(r: VerifyResult) -> bool:
    """Cheated, or ended by a sandbox limit: 0 in every scheme."""
    return r.cheated or r.limit is not None or r.timed_out


def _speedup(r: VerifyResult) -> float | None:
    return r.reward_speedup if r.reward_speedup is not None else r.speedup


def staged_reward(r: VerifyResult) -> float:
    if _refused(r) or not r.compiled:
        return 0.0
    if not r.tiny_correct:
        return 0.3
    if not r.correct:
        return 0.5
    if _speedup(r) is None:
        return 0.7
    return 0.7 + 0.3 * min(max(_speedup(r), 0.0) / 2.0, 1.0)


def tritonrl_reward(r: VerifyResult, alpha: float = 0.1) -> float:
    if _refused(r) or not r.correct:
        return 0.0
    return 1.0 + alpha * min(max(_speedup(r) or 0.0, 0.0), 2.0)


def kevin_reward(r: VerifyResult) -> float:
    if _refused(r) or not r.correct:
        return 0.0
    return 0.3 + (_speedup(r) or 0.0)


def compute_reward(r: VerifyResult, scheme: str = "staged", alpha: float = 0.1) -> float:
    if scheme == "staged":
        return staged_reward(r)
    if scheme == "tritonrl":
        return tritonrl_reward(r, alpha)
    if scheme == "kevin":
        return kevin_reward(r)
    raise ValueError(f"unknown reward scheme {scheme!r}; choose one of {SCHEMES}")


def reward_for(r: VerifyResult, config: VerifyConfig) -> float:
    """`r`'s reward under the scheme (and alpha) that `config` names."""
    return compute_reward(r, config.reward_scheme, config.tritonrl_alpha)
