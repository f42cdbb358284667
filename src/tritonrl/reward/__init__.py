"""Rewards: the trainer's side of the verifier. `schemes` turns a `VerifyResult` into a
number (staged, TritonRL, Kevin); `adapters` are the TRL reward functions and verl's
`compute_score` (also `tritonrl.reward.compute_score`, loaded on first use), which call
the verifier, in-process or through `tritonrl serve`, and score its verdicts. The
verifier itself never computes a reward.
"""

from tritonrl.reward.schemes import (
    SCHEMES,
    compute_reward,
    kevin_reward,
    reward_for,
    staged_reward,
    tritonrl_reward,
)

__all__ = [
    "SCHEMES",
    "compute_reward",
    "compute_score",
    "compute_score_batch",
    "kevin_reward",
    "make_trl_reward",
    "reward_for",
    "staged_reward",
    "tritonrl_reward",
]


def __getattr__(name: str):
    """The adapters load lazily: they import the verifier's pool (and torch)."""
    if name in ("compute_score", "compute_score_batch", "make_trl_reward"):
        from tritonrl.reward import adapters  # lazy: the pool loads torch

        return getattr(adapters, name)
    raise AttributeError(f"module 'tritonrl.reward' has no attribute {name!r}")
