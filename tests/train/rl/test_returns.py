"""Multi-turn RL's arithmetic against figures worked out by hand: returns, the batch's
slots, and the advantages inside each (prompt, turn) group with missing turns."""

import math

import pytest

from tritonrl.train.rl.returns import discounted_returns, group_advantages, slot, slot_returns


def test_a_turns_return_is_its_reward_plus_gamma_times_the_next_return():
    # G3 = 1.0; G2 = 0.5 + 0.4 * 1.0 = 0.9; G1 = 0.0 + 0.4 * 0.9 = 0.36
    assert discounted_returns([0.0, 0.5, 1.0], 0.4) == pytest.approx([0.36, 0.9, 1.0])
    assert discounted_returns([0.3, 0.7], 1.0) == pytest.approx([1.0, 0.7])  # sums the rest
    assert discounted_returns([0.3, 0.7], 0.0) == [0.3, 0.7]  # each its own reward
    assert discounted_returns([0.5], 0.4) == [0.5]


def test_gamma_outside_0_to_1_is_refused():
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], not 1.5"):
        discounted_returns([1.0], 1.5)


def test_slots_run_prompt_by_prompt_then_turn_by_turn_then_member():
    # 2 turns, groups of 3: prompt 0 takes slots 0-5 (turn 1: 0-2, turn 2: 3-5)
    assert [slot(0, 1, m, 2, 3) for m in range(3)] == [0, 1, 2]
    assert [slot(0, 2, m, 2, 3) for m in range(3)] == [3, 4, 5]
    assert slot(1, 1, 0, 2, 3) == 6 and slot(1, 2, 2, 2, 3) == 11
    with pytest.raises(ValueError, match="turn 3 of 2"):
        slot(0, 3, 0, 2, 3)


def test_slot_returns_place_each_answer_and_leave_ended_turns_empty():
    conversations = [[0.0, 1.0], [0.7], [0.3, 0.5], [0.0, 0.0]]  # 2 prompts x 2 members
    got = slot_returns(conversations, turns=2, group=2, gamma=0.4)
    # prompt 0: member 0 returns 0.4 then 1.0; member 1 ended after 0.7
    # prompt 1: member 0 returns 0.3 + 0.2 = 0.5 then 0.5; member 1 0.0 then 0.0
    assert got == pytest.approx([0.4, 0.7, 1.0, None, 0.5, 0.0, 0.5, 0.0])
    assert got[3] is None
    with pytest.raises(ValueError, match="conversation 1 has 3 answers, not 1-2"):
        slot_returns([[0.0], [0.0, 0.0, 0.0]], turns=2, group=2, gamma=0.4)
    with pytest.raises(ValueError, match="not whole groups of 2"):
        slot_returns([[0.0]], turns=1, group=2, gamma=0.4)


def test_grpo_normalises_inside_each_group_over_its_present_members():
    # group 1: [0.28, 0.7]: mean 0.49, std sqrt(2 * 0.21^2 / 1) = 0.296985
    # group 2: [0.7, None]: one present: 0 each
    got = group_advantages([0.28, 0.7, 0.7, None], group=2, algo="grpo")
    std = math.sqrt(2 * 0.21**2)
    assert got == pytest.approx([-0.21 / (std + 1e-4), 0.21 / (std + 1e-4), 0.0, 0.0])
    assert got[0] == pytest.approx(-0.70687, abs=1e-5)
    # three present, one missing: [1, 0, None, 0.5]: mean 0.5, std 0.5
    assert group_advantages([1.0, 0.0, None, 0.5], group=4, algo="grpo") == pytest.approx(
        [0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0]
    )
    assert group_advantages([0.3, 0.3], group=2, algo="grpo") == [0.0, 0.0]  # no spread


def test_rloo_takes_each_member_minus_the_mean_of_the_other_present_ones():
    # [1.0, 0.5, 0.0]: 1 - 0.25, 0.5 - 0.5, 0 - 0.75
    assert group_advantages([1.0, 0.5, 0.0], group=3, algo="rloo") == pytest.approx(
        [0.75, 0.0, -0.75]
    )
    # a missing member is no one's baseline: [1.0, None, 0.0] -> 1 - 0, 0 - 1
    assert group_advantages([1.0, None, 0.0], group=3, algo="rloo") == pytest.approx(
        [1.0, 0.0, -1.0]
    )
    assert group_advantages([0.9, None], group=2, algo="rloo") == [0.0, 0.0]  # alone


def test_group_advantages_refuse_broken_groups_and_other_algorithms():
    with pytest.raises(ValueError, match="3 values are not whole groups of 2"):
        group_advantages([0.0, 1.0, 0.5], group=2, algo="grpo")
    with pytest.raises(ValueError, match="algo must be grpo or rloo, not 'best-of-n'"):
        group_advantages([0.0, 1.0], group=2, algo="best-of-n")
