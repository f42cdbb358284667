"""The adaptive curriculum: its transitions, its share of level-2 draws, its state, and
the sampler TRL's trainers draw through."""

import json
from collections import Counter

import pytest

from tritonrl.config import CurriculumConfig
from tritonrl.train.rl.curriculum import Curriculum, CurriculumSampler

LEVELS = {"a": 1, "b": 1, "c": 2, "d": 2, "e": 3}


def _cur(**kw) -> Curriculum:
    return Curriculum(CurriculumConfig(**{"window": 4, **kw}), LEVELS, seed=1)


def _feed(cur: Curriculum, outcomes: str, task: str = "a") -> None:
    for ch in outcomes:
        cur.observe(task, ch == "1")


def test_the_share_grows_only_when_a_full_window_passes_the_trigger():
    cur = _cur(window=5)
    assert cur.share == 0.1 and cur.metrics()["curriculum/level1_correct"] == -1.0
    _feed(cur, "1111")  # 4 of a window of 5: not full yet
    assert not cur.end_step(1) and cur.share == 0.1
    _feed(cur, "0", task="c")  # a level-2 result does not count
    assert not cur.end_step(2)
    _feed(cur, "0")  # 4/5 = 0.8 > 0.4
    assert cur.end_step(3) and cur.share == pytest.approx(0.2)
    assert cur.transitions == [{"step": 3, "from": 0.1, "to": 0.2, "rate": 0.8}]
    assert cur.rolling_correct is None  # the window starts afresh at the new mix
    _feed(cur, "11000")  # exactly 0.4 does not pass 0.4
    assert not cur.end_step(4) and cur.share == pytest.approx(0.2)
    _feed(cur, "1")  # the rolling window: 1,0,0,0,1 -> 0.4 still
    assert not cur.end_step(5)
    _feed(cur, "1")  # 0,0,0,1,1 -> 0.4; then 0,0,1,1,1 -> 0.6
    _feed(cur, "1")
    assert cur.end_step(6) and cur.share == pytest.approx(0.3)
    assert cur.metrics() == {"curriculum/level2_share": pytest.approx(0.3),
                             "curriculum/level1_correct": -1.0,
                             "curriculum/transitions": 2.0,
                             "curriculum/unseen_level1_correct": -1.0,  # a: drawn before
                             "curriculum/unseen_level2_correct": -1.0}  # fmt: skip


def test_the_share_stops_at_its_end():
    cur = _cur(start=0.4, end=0.5, step=0.3)
    _feed(cur, "1111")
    assert cur.end_step(1) and cur.share == 0.5
    _feed(cur, "1111")
    assert not cur.end_step(2) and cur.share == 0.5 and len(cur.transitions) == 1


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_draws_follow_the_share_and_levels_above_2_count_as_hard(share):
    cur = _cur(start=share, end=share)
    counts = Counter(LEVELS[t] >= 2 for t in cur.sample(4000))
    assert counts[True] / 4000 == pytest.approx(share, abs=0.03)
    assert {t for t in cur.sample(2000)} == set(LEVELS)  # every task is drawn


def test_without_one_of_the_levels_it_samples_uniformly_and_never_grows():
    cur = Curriculum(CurriculumConfig(window=1), {"a": 1, "b": 1}, seed=0)
    _feed(cur, "1")
    assert not cur.adaptive and not cur.end_step(1) and set(cur.sample(100)) == {"a", "b"}
    off = Curriculum(CurriculumConfig(enabled=False), LEVELS, seed=0)
    counts = Counter(LEVELS[t] >= 2 for t in off.sample(3000))
    assert counts[True] / 3000 == pytest.approx(3 / 5, abs=0.04)


def test_state_round_trips_through_json_and_continues_the_same_draws():
    cur = _cur()
    _feed(cur, "1110")
    cur.end_step(7)
    _feed(cur, "10")
    cur.sample(5)
    state = json.loads(json.dumps(cur.state_dict()))
    again = _cur()
    again.load_state_dict(state)
    assert (again.share, list(again.window), again.transitions) == (
        cur.share, list(cur.window), cur.transitions)  # fmt: skip
    assert again.sample(50) == cur.sample(50)


def test_the_sampler_repeats_each_drawn_prompt_for_its_group_like_trls():
    rows = ["a", "b", "c", "d", "e", "a"]  # "a" has two prompt rows
    cur = _cur(start=0.5, end=0.5)
    sampler = CurriculumSampler(cur, rows, mini_repeat_count=2, batch_size=3, repeat_count=2)
    indices = list(sampler)
    assert len(indices) == len(sampler) == 2 * 3 * 2 * 2  # 2 chunks of 3, x2 groups, x2
    for chunk in (indices[:12], indices[12:]):
        groups = chunk[:6]
        assert chunk[6:] == groups  # the chunk again (repeat_count)
        assert groups[0::2] == groups[1::2]  # each prompt twice in a row (its group)
    assert {rows[i] for i in indices} <= set(LEVELS)


def test_the_sampler_draws_each_chunk_at_the_share_of_that_moment():
    rows = list(LEVELS)
    cur = _cur(start=0.0, end=1.0, step=1.0)
    it = iter(CurriculumSampler(cur, rows * 200, mini_repeat_count=1, batch_size=100,
                                repeat_count=1))  # fmt: skip
    first = [next(it) for _ in range(100)]
    assert all(LEVELS[rows[i % 5]] == 1 for i in first)
    _feed(cur, "1111")
    assert cur.end_step(1) and cur.share == 1.0
    second = [next(it) for _ in range(100)]
    assert all(LEVELS[rows[i % 5]] >= 2 for i in second)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="start and curriculum.end"):
        CurriculumConfig(start=0.6, end=0.5)
    with pytest.raises(ValueError, match="curriculum.trigger"):
        CurriculumConfig(trigger=1.0)
    with pytest.raises(ValueError, match="curriculum.retire_after"):
        CurriculumConfig(retire_after=-1)
    with pytest.raises(ValueError, match="curriculum.retire_unsolved_after"):
        CurriculumConfig(retire_unsolved_after=-2)
    with pytest.raises(ValueError, match="no tasks"):
        Curriculum(CurriculumConfig(), {})


def test_ranks_that_join_their_results_keep_one_curriculum():
    # two ranks, each verifying its own half of a step's completions
    ranks = [_cur(window=4), _cur(window=4)]
    _feed(ranks[0], "11")
    _feed(ranks[1], "10")
    parts = [list(r.pending) for r in ranks]  # what Ranks.gather gives every rank
    assert ranks[0].rolling_correct == 1.0  # before the join: its own results only
    grew = [r.end_step(1, lambda mine: parts) for r in ranks]
    assert grew == [True, True] and ranks[0].share == ranks[1].share == pytest.approx(0.2)
    assert ranks[0].state_dict() == ranks[1].state_dict()
    assert ranks[0].transitions[0]["rate"] == 0.75  # 3 of the 4 joined results
    assert ranks[0].sample(20) == ranks[1].sample(20)  # seeded alike: the samplers agree


def test_a_task_all_correct_in_its_last_n_completions_is_drawn_no_more():
    cur = _cur(start=0.0, end=0.0, retire_after=3)
    _feed(cur, "110")  # a miss within the last 3: kept
    _feed(cur, "11", task="b")  # only 2 results so far: kept
    cur.end_step(1)
    assert cur.retired == set() and cur.metrics()["curriculum/retired"] == 0.0
    _feed(cur, "11")  # a's last 3: 0, 1, 1
    _feed(cur, "1", task="b")  # b's last 3: all correct
    assert cur.retired == set()  # counted when the step's results are joined
    cur.end_step(2)
    assert cur.retired == {"b"} and cur.metrics()["curriculum/retired"] == 1.0
    assert set(cur.sample(200)) == {"a"}  # level 1 draws only what is left
    _feed(cur, "1")  # a's last 3: 1, 1, 1
    cur.end_step(3)
    assert set(cur.sample(200)) == {"a", "b"}  # every level-1 task retired: all again


def test_a_task_all_wrong_in_its_last_m_completions_is_drawn_no_more():
    cur = _cur(start=0.0, end=0.0, retire_after=4, retire_unsolved_after=2)
    _feed(cur, "0")  # a: one miss, not yet M
    _feed(cur, "011", task="b")  # b: a right answer after the miss resets it
    cur.end_step(1)
    assert cur.retired == set() and cur.metrics()["curriculum/retired_unsolved"] == 0.0
    _feed(cur, "0")  # a's last 2: both wrong
    _feed(cur, "0", task="b")  # b's last 2: 1, 0
    cur.end_step(2)
    assert cur.retired == cur.unsolved == {"a"}
    assert cur.metrics()["curriculum/retired"] == 1.0
    assert cur.metrics()["curriculum/retired_unsolved"] == 1.0
    assert set(cur.sample(100)) == {"b"}
    _feed(cur, "1111", task="b")  # b's last 4 right: retired as solved, counted once
    cur.end_step(3)
    assert cur.retired == {"a", "b"} and cur.unsolved == {"a"}
    assert cur.metrics()["curriculum/retired"] == 2.0
    state = json.loads(json.dumps(cur.state_dict()))
    again = _cur(start=0.0, end=0.0, retire_after=4, retire_unsolved_after=2)
    again.load_state_dict(state)
    assert again.retired == {"a", "b"} and again.unsolved == {"a"}


def test_unsolved_retirement_keeps_as_many_results_as_it_needs():
    # the longer count decides how many results a task keeps: 3 wrong after 2 right
    cur = _cur(start=0.0, end=0.0, retire_after=2, retire_unsolved_after=3)
    _feed(cur, "10000")
    cur.end_step(1)
    assert cur.retired == cur.unsolved == {"a"}
    only_wrong = _cur(start=0.0, end=0.0, retire_unsolved_after=3)
    _feed(only_wrong, "1" * 10, task="b")  # never retired as solved: that count is off
    _feed(only_wrong, "00")
    only_wrong.end_step(1)
    assert only_wrong.retired == set() and "curriculum/retired" in only_wrong.metrics()


def test_retirement_is_off_by_default_and_other_levels_keep_their_pools():
    cur = _cur()
    _feed(cur, "1" * 20)
    cur.end_step(1)
    assert cur.retired == set() and "curriculum/retired" not in cur.metrics()
    assert "curriculum/retired_unsolved" not in cur.metrics()
    hard = _cur(start=1.0, end=1.0, retire_after=2)
    _feed(hard, "11", task="c")
    hard.end_step(1)
    assert set(hard.sample(300)) == {"d", "e"}


def test_retirement_survives_a_resume_and_ranks_retire_alike():
    ranks = [_cur(retire_after=2), _cur(retire_after=2)]
    _feed(ranks[0], "1", task="b")
    _feed(ranks[1], "1", task="b")
    _feed(ranks[1], "1", task="c")
    parts = [list(r.pending) for r in ranks]
    for r in ranks:
        r.end_step(1, lambda mine: parts)
    assert ranks[0].retired == ranks[1].retired == {"b"}  # b: 2 of 2 across the ranks
    _feed(ranks[0], "0", task="d")  # pending at the checkpoint
    state = json.loads(json.dumps(ranks[0].state_dict()))
    again = _cur(retire_after=2)
    again.load_state_dict(state)
    assert again.retired == {"b"} and list(again.recent["c"]) == [True]
    assert again.pending == [("d", False)]
    _feed(again, "1", task="c")
    again.end_step(2)
    assert again.retired == {"b", "c"}


def test_a_state_written_before_retirement_existed_still_loads():
    old = {"share": 0.2, "window": [1, 0], "pending": [1, 1], "transitions": [],
           "rng": _cur().state_dict()["rng"]}  # fmt: skip
    cur = _cur(retire_after=2)
    cur.load_state_dict(old)
    assert cur.retired == set() and cur.rolling_correct == 0.75  # 1, 0 and the two pending


def test_one_call_draws_distinct_tasks_while_the_pool_lasts():
    cur = _cur(start=0.0, end=0.0)  # level 1 only: "a" and "b"
    for _ in range(20):
        assert sorted(cur.sample(2)) == ["a", "b"]  # never the same task twice in a step
    assert sorted(cur.sample(4)) in (["a", "a", "b", "b"], ["a", "a", "a", "b"],
                                     ["a", "b", "b", "b"])  # fmt: skip
    flat = Curriculum(CurriculumConfig(enabled=False), {t: 1 for t in "abcdefgh"}, seed=3)
    assert all(len(set(flat.sample(8))) == 8 for _ in range(20))


def test_the_unseen_rates_count_only_tasks_no_earlier_step_drew_by_level():
    cur = _cur()
    m = cur.metrics()
    assert m["curriculum/unseen_level1_correct"] == m["curriculum/unseen_level2_correct"] == -1.0
    _feed(cur, "1100")  # a: new
    _feed(cur, "1", task="c")  # c: new, level 2
    _feed(cur, "0", task="e")  # e: new, level 3 counts with level 2
    cur.end_step(1)
    m = cur.metrics()
    assert m["curriculum/unseen_level1_correct"] == 0.5
    assert m["curriculum/unseen_level2_correct"] == 0.5
    _feed(cur, "1111")  # a again: not new any more
    _feed(cur, "0", task="b")  # b: new
    cur.end_step(2)
    m = cur.metrics()
    assert m["curriculum/unseen_level1_correct"] == 0.0
    assert m["curriculum/unseen_level2_correct"] == -1.0  # no new level-2 task this step
    state = json.loads(json.dumps(cur.state_dict()))
    again = _cur()
    again.load_state_dict(state)  # a resumed run remembers what it drew
    _feed(again, "1", task="c")
    _feed(again, "1", task="d")
    again.end_step(3)
    assert again.metrics()["curriculum/unseen_level2_correct"] == 1.0  # d alone is new


def test_several_ranks_count_a_task_new_once_in_the_step_that_joins_them():
    ranks = [_cur(), _cur()]
    for cur, outcome in zip(ranks, "10", strict=True):
        _feed(cur, outcome)  # both ranks answered task a in the same step
    parts = [list(r.pending) for r in ranks]
    for cur in ranks:
        cur.end_step(1, lambda _part: parts)
    assert [r.metrics()["curriculum/unseen_level1_correct"] for r in ranks] == [0.5, 0.5]
    for cur in ranks:
        _feed(cur, "1")
        cur.end_step(2, lambda _part: [[("a", True)], [("a", True)]])
        assert cur.metrics()["curriculum/unseen_level1_correct"] == -1.0
