"""The verifier as a TRL reward function and as verl's compute_score."""

import asyncio

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward.adapters import compute_score, make_trl_reward
from tritonrl.tasks import load_builtin
from tritonrl.verify.client import ServiceError
from tritonrl.verify.pool.pool import VerifierPool, close_shared_pools
from tritonrl.verify.result import VerifyResult
from tritonrl.verify.service import VerifyService

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
BAD = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
CHEAT = "```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n" \
        "    def forward(self, x):\n        return torch.relu(x)\n```"  # fmt: skip
TOKEN = "reward-side token"


@pytest.fixture(scope="module", autouse=True)
def _shared_pools_closed():
    """The adapters' shared pools live until exit; their sandboxes are this process's
    children, which later tests (the sandbox's) count."""
    yield
    close_shared_pools()


def _logs():
    extra, metrics = {}, {}
    return (
        extra,
        metrics,
        (lambda k, v: extra.setdefault(k, []).extend(v)),
        (lambda k, v: metrics.setdefault(k, []).append(v)),
    )


def test_sync_trl_reward_scores_and_logs_each_completion():
    reward = make_trl_reward([RELU], workers=2)
    extra, metrics, log_extra, log_metric = _logs()
    completions = [[{"role": "assistant", "content": c}] for c in (GOOD, BAD, CHEAT)]
    scores, details = reward.with_details(prompts=["p"] * 3, completions=completions,
                                          task_id=[RELU.id] * 3, log_extra=log_extra,
                                          log_metric=log_metric)  # fmt: skip
    assert scores[0] >= 0.7 and scores[1:] == pytest.approx([0.3, 0.0])
    assert extra["verify_stage"] == ["done", "correctness", "static"]
    assert extra["verify_speedup"] == [-1.0] * 3  # not timed: timing needs CUDA
    assert "torch_compute" in extra["verify_flags"][2]
    assert metrics["verify/correct"] == [pytest.approx(1 / 3)]
    assert [d["correct"] for d in details] == [True, False, False]
    assert [d["reward"] for d in details] == scores
    assert reward(prompts=["p"], completions=completions[1:2], task_id=[RELU.id]) == scores[1:2]


def test_async_trl_reward_matches_the_sync_one():
    reward = make_trl_reward([RELU], asynchronous=True)
    assert asyncio.iscoroutinefunction(reward)
    scores = asyncio.run(reward(prompts=["p"], completions=[GOOD], task_id=[RELU.id]))
    assert scores[0] >= 0.7


def test_the_reward_verifies_each_program_once_whatever_its_comments():
    commented = GOOD.replace("    def forward", "    # the whole tensor at once\n    def forward")
    batch = [GOOD, commented, BAD, "Done: " + commented]
    for asynchronous in (False, True):
        reward = make_trl_reward([RELU], workers=2, asynchronous=asynchronous)
        pool = reward.scorer.pool
        before = dict(pool.stats)
        call = reward(prompts=["p"] * 4, completions=batch, task_id=[RELU.id] * 4)
        scores = asyncio.run(call) if asynchronous else call
        assert scores[0] == scores[1] == scores[3] >= 0.7 and scores[2] == pytest.approx(0.3)
        assert pool.stats["verified"] - before["verified"] == 2
        assert pool.stats["deduplicated"] - before["deduplicated"] == 2


def _batch(reward, batch, asynchronous):
    """Scores, details, jobs the pool verified and the metrics logged, of one batch."""
    extra, metrics, log_extra, log_metric = _logs()
    pool = reward.scorer.pool
    before = pool.stats["verified"]
    call = reward.with_details(prompts=["p"] * len(batch), completions=batch,
                               task_id=[RELU.id] * len(batch), log_extra=log_extra,
                               log_metric=log_metric)  # fmt: skip
    scores, details = asyncio.run(call) if asynchronous else call
    return scores, details, pool.stats["verified"] - before, metrics


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_memo_answers_a_program_a_later_batch_samples_again(asynchronous):
    commented = GOOD.replace("    def forward", "    # again\n    def forward")
    reward = make_trl_reward([RELU], workers=2, asynchronous=asynchronous, memo=2)
    first, details, verified, metrics = _batch(reward, [GOOD, BAD], asynchronous)
    assert verified == 2 and metrics["verify/memo_hits"] == [0.0]
    again, details2, verified, metrics = _batch(reward, [commented, BAD, CHEAT], asynchronous)
    assert verified == 1  # the cheat alone: the other two programs were verified before
    assert again[:2] == first and again[2] == 0.0
    assert metrics["verify/memo_hits"] == [pytest.approx(2 / 3)]
    assert details2[0] == details[0] and details2[0] is not details[0]
    # two programs kept, the least recently used out: GOOD went when CHEAT came, BAD stays
    assert _batch(reward, [BAD], asynchronous)[2] == 0
    assert _batch(reward, [GOOD], asynchronous)[2] == 1


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_reward_logs_where_the_verifiers_time_went(asynchronous):
    """Per call: the programs the pool verified (a repeated one and a memo hit not again)
    and their seconds per stage, summed, for the step-time breakdown."""
    commented = GOOD.replace("    def forward", "    # once more\n    def forward")
    reward = make_trl_reward([RELU], workers=2, asynchronous=asynchronous, memo=4)
    _, _, verified, metrics = _batch(reward, [GOOD, commented, BAD, CHEAT], asynchronous)
    assert verified == 3 and metrics["verify/programs"] == [3]
    stages = {k.removeprefix("verify/stage_s/"): v for k, v in metrics.items()
              if k.startswith("verify/stage_s/")}  # fmt: skip
    assert {"static", "compile"} <= stages.keys()  # the cheat stops at static
    assert all(len(v) == 1 and v[0] >= 0 for v in stages.values())
    assert stages["compile"][0] > 0
    _, _, verified, metrics = _batch(reward, [BAD], asynchronous)  # from the memo alone
    assert verified == 0 and metrics["verify/programs"] == [0]


def test_the_memo_is_off_by_default_and_keeps_no_verifier_error():
    reward = make_trl_reward([RELU], workers=2)
    pool = reward.scorer.pool
    before = pool.stats["verified"]
    reward(prompts=["p"], completions=[GOOD], task_id=[RELU.id])
    reward(prompts=["p"], completions=[GOOD], task_id=[RELU.id])
    assert pool.stats["verified"] - before == 2
    memo = make_trl_reward([RELU], memo=8).scorer.memo
    keys, known = memo.split([(RELU, GOOD)])
    failed = VerifyResult(RELU.id, "cpu").fail("extract", "verifier error: RuntimeError()")
    assert memo.merge(keys, known, [failed]) == [failed] and not memo.kept


def test_unknown_task_ids_and_missing_columns_are_clear_errors():
    reward = make_trl_reward([RELU])
    with pytest.raises(KeyError, match="unknown task id"):
        reward(prompts=["p"], completions=[GOOD], task_id=["builtin:level1/nope"])
    with pytest.raises(KeyError, match="no 'task_id' column"):
        reward(prompts=["p"], completions=[GOOD])


def test_verl_batch_entry_point_scores_every_row_in_order_and_verifies_repeats_once():
    from tritonrl.reward.adapters import compute_score_batch
    from tritonrl.verify.pool.pool import shared_pool

    pool = shared_pool(VerifyConfig())
    before = pool.stats["submitted"]
    unique = GOOD + "\n# batch\n"  # not verified by another test of this module yet
    import numpy as np

    def column(values):  # as verl's non_tensor_batch holds them
        return np.array(values, dtype=object)

    scores = compute_score_batch(
        data_sources=column(["tritonrl"] * 5),
        solution_strs=column([unique, BAD, unique, GOOD, GOOD]),
        ground_truths=column([RELU.id, RELU.source, RELU.id, "builtin:level1/nope", RELU.id]),
        extra_infos=column([{}, None, {}, None, {"verify_config": {"no_such_setting": 1}}]),
    )
    assert [s["correct"] for s in scores] == [True, False, True, False, False]
    assert scores[0] == scores[2] and scores[0]["score"] >= 0.7
    assert scores[1]["stage"] == "correctness" and scores[1]["score"] == pytest.approx(0.3)
    assert scores[3]["score"] == 0.0 and "bad ground_truth" in scores[3]["error"]
    assert scores[4]["score"] == 0.0 and "bad verify_config" in scores[4]["error"]
    assert pool.stats["submitted"] - before == 2  # the repeat shared its row's job


def test_verl_compute_score_by_id_and_by_inline_reference():
    by_id = compute_score("tritonrl", GOOD, RELU.id, {})
    assert by_id["score"] >= 0.7 and by_id["correct"] is True
    inline = compute_score("tritonrl", BAD, RELU.source, None)
    assert inline["score"] == pytest.approx(0.3) and inline["stage"] == "correctness"
    bad_row = compute_score("tritonrl", GOOD, "builtin:level1/nope", None)
    assert bad_row["score"] == 0.0 and "bad ground_truth" in bad_row["error"]


@pytest.fixture(scope="module")
def service():
    """A real `tritonrl serve` on loopback, its own pool, a token."""
    pool = VerifierPool(VerifyConfig(), 2)
    with VerifyService(pool, token=TOKEN) as s:
        yield s


def test_trl_reward_through_the_service_gives_the_local_rewards(service, monkeypatch):
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", TOKEN)
    completions = [GOOD, BAD, CHEAT]
    local = make_trl_reward([RELU], workers=2)
    remote = make_trl_reward([RELU], VerifyConfig(endpoint=service.address))
    assert remote.scorer.client is not None and local.scorer.client is None
    expected, _ = local.with_details(prompts=["p"] * 3, completions=completions,
                                     task_id=[RELU.id] * 3)  # fmt: skip
    got, details = remote.with_details(prompts=["p"] * 3, completions=completions,
                                       task_id=[RELU.id] * 3)  # fmt: skip
    assert got == expected and [d["stage"] for d in details] == ["done", "correctness", "static"]
    asynchronous = make_trl_reward([RELU], VerifyConfig(endpoint=service.address),
                                   asynchronous=True)  # fmt: skip
    assert asyncio.run(asynchronous(prompts=["p"], completions=[BAD], task_id=[RELU.id])) == [
        pytest.approx(0.3)
    ]


def test_verl_compute_score_through_the_service(service, monkeypatch):
    import tritonrl.reward

    local = compute_score("tritonrl", GOOD, RELU.id, {})  # in-process: no endpoint yet
    monkeypatch.setenv("TRITONRL_VERIFY_ENDPOINT", service.address)
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", TOKEN)
    before = service.pool.stats["submitted"]
    good = tritonrl.reward.compute_score("tritonrl", GOOD, RELU.id, {})
    bad = tritonrl.reward.compute_score("tritonrl", BAD, RELU.source, None)
    assert good == local and good["correct"] is True
    assert bad["stage"] == "correctness" and bad["score"] == pytest.approx(0.3)
    assert service.pool.stats["submitted"] - before == 2  # verified there, not here
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", "wrong")
    with pytest.raises(ServiceError, match=service.address):
        tritonrl.reward.compute_score("tritonrl", GOOD, RELU.id, {})
