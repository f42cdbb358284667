"""Multi-turn RL's arithmetic: each turn's return, its batch slot, and group advantages.

    discounted_returns([0.0, 0.5, 1.0], gamma=0.4)   # [0.36, 0.9, 1.0]
    slot_returns([[0.0, 1.0], [0.3]], turns=2, group=2, gamma=0.4)
    # slots (prompt 0, turn 1, member 0..1), (prompt 0, turn 2, member 0..1):
    # [0.4, 0.3, 1.0, None]
    group_advantages([0.4, 0.3, 1.0, None], group=2, algo="rloo")   # [0.1, -0.1, 0.0, 0.0]

A conversation's answers r_1..r_k (k <= turns: it may end early) give turn t the return
G_t = r_t + gamma * G_{t+1}, G_k = r_k (Kevin's discounted sum; gamma 1 sums the rest).

The batch a trainer sees holds, for each prompt, `turns` groups of `group` slots one
after the other: slot ((prompt * turns) + turn - 1) * group + member. The trainers group
rewards by `group` consecutive slots, so each group is one (prompt, turn): the members'
answers at that turn. A member whose conversation ended before a turn has no answer
there: its slot is None (TRL scores it NaN), it takes no part in its group's baseline and
its advantage is 0.

Advantages inside each group, over its present members only (what TRL 1.16 computes from
the returns, NaN for a missing member; the tests hold the trainers to it):
* `grpo`: (G - mean) / (std + 1e-4), std with Bessel's correction; fewer than two
  present: 0.
* `rloo`: G minus the mean of the other present members (leave-one-out); one present: 0.

What it does NOT do: no generation, verification or tensors: plain floats in and out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

EPSILON = 1e-4  # TRL's, added to the group's std (GRPO)


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """Each turn's return G_t = r_t + gamma * G_{t+1} of one conversation's rewards."""
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], not {gamma}")
    out: list[float] = []
    later = 0.0
    for r in reversed(rewards):
        later = r + gamma * later
        out.append(later)
    return out[::-1]


def slot(prompt: int, turn: int, member: int, turns: int, group: int) -> int:
    """The batch index of `member`'s answer at `turn` (from 1) to the batch's `prompt`-th
    prompt (see the module docstring)."""
    if not (1 <= turn <= turns and 0 <= member < group):
        raise ValueError(f"turn {turn} of {turns}, member {member} of {group}: out of range")
    return ((prompt * turns) + turn - 1) * group + member


def slot_returns(
    conversations: Sequence[Sequence[float]], turns: int, group: int, gamma: float
) -> list[float | None]:
    """Every slot's return (None: no answer there) for `conversations`, each a list of
    its answers' rewards, ordered prompt by prompt, `group` members each."""
    if len(conversations) % group:
        raise ValueError(f"{len(conversations)} conversations are not whole groups of {group}")
    out: list[float | None] = [None] * (len(conversations) * turns)
    for index, rewards in enumerate(conversations):
        if not 1 <= len(rewards) <= turns:
            raise ValueError(f"conversation {index} has {len(rewards)} answers, not 1-{turns}")
        prompt, member = divmod(index, group)
        for turn, value in enumerate(discounted_returns(rewards, gamma), start=1):
            out[slot(prompt, turn, member, turns, group)] = value
    return out


def _advantages(values: list[float | None], algo: str) -> list[float]:
    present = [v for v in values if v is not None]
    n = len(present)
    if n < 2:
        return [0.0] * len(values)
    total = sum(present)
    if algo == "rloo":
        return [0.0 if v is None else v - (total - v) / (n - 1) for v in values]
    mean = total / n
    std = math.sqrt(sum((v - mean) ** 2 for v in present) / (n - 1))
    return [0.0 if v is None else (v - mean) / (std + EPSILON) for v in values]


def group_advantages(values: Sequence[float | None], group: int, algo: str) -> list[float]:
    """The advantage of each slot, inside its group of `group` consecutive slots."""
    if algo not in ("grpo", "rloo"):
        raise ValueError(f"algo must be grpo or rloo, not {algo!r}")
    if group < 1 or len(values) % group:
        raise ValueError(f"{len(values)} values are not whole groups of {group}")
    out: list[float] = []
    for start in range(0, len(values), group):
        out += _advantages(list(values[start : start + group]), algo)
    return out
