"""Rewards: the trainer's side of the verifier. `schemes` turns a `VerifyResult` into a
number (staged, TritonRL, Kevin); `adapters` are the TRL reward functions and verl's
`compute_score`, which call the verifier and score its verdicts. The verifier itself
never computes a reward.
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
    "kevin_reward",
    "reward_for",
    "staged_reward",
    "tritonrl_reward",
]
