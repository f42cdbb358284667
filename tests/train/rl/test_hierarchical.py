"""The hierarchical reward decomposition (`tritonrl.train.rl.hierarchical`).

Pure: per-token advantages of a constructed batch against numbers worked out by hand
(a mixed group, a group where all are wrong, a completion without a fence, padding; the
three `scale_rewards`), where the fence falls in the tokens, the verifier's details to
the two terms, and the errors. Slow: real GRPO on the tiny model with `rl.hierarchical`,
through `tritonrl rl` and with fixed rollouts whose per-token advantages and loss are
checked in the trainer's own batch.
"""

import json
import math
import statistics

import pytest
import torch

from tritonrl.train.rl.hierarchical import (
    credited,
    fence_token,
    group_advantages,
    hierarchical_reward_funcs,
    hierarchical_trainer,
    split_advantages,
    term_rewards,
)

EPS = 1e-4  # TRL's: advantage / (std + 1e-4)

# Two groups of 4 (width 6). Group 1: correct 1.5x, correct 3x (clipped at 2), wrong,
# correct without a fence and untimed. Group 2: all wrong (one "fast": it must not count).
PLAN_LENGTHS = [2, 3, 1, 0, 2, 0, 4, 1]
LENGTHS = [5, 4, 6, 3, 6, 2, 5, 3]
CORRECT = [True, True, False, True, False, False, False, False]
SPEEDUPS = [1.5, 3.0, None, None, 5.0, None, 0.5, None]


def _rows(plan_adv, code_adv) -> list[list[float]]:
    """The expected [B, 6] advantages: plan value, then code value, then 0 (padding)."""
    return [
        [p] * n_plan + [c] * (n - n_plan) + [0.0] * (6 - n)
        for p, c, n_plan, n in zip(plan_adv, code_adv, PLAN_LENGTHS, LENGTHS, strict=True)
    ]


def _close(got: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-6, rtol=0)


def test_per_token_advantages_of_a_constructed_batch_by_hand():
    got = split_advantages(PLAN_LENGTHS, LENGTHS, CORRECT, SPEEDUPS, num_generations=4)
    assert got.shape == (8, 6)
    # Group 1, code term [1, 1, 0, 1]: mean 0.75, sample std sqrt(0.75 / 3) = 0.5.
    code = [d / (0.5 + EPS) for d in (0.25, 0.25, -0.75, 0.25)]
    # Group 1, speedup term [0.15, 0.2, 0, 0]: mean 0.0875, deviations below.
    dev = [0.0625, 0.1125, -0.0875, -0.0875]
    std = math.sqrt(sum(d * d for d in dev) / 3)
    plan = [d / (std + EPS) for d in dev]
    expected = _rows(plan + [0.0] * 4, code + [0.0] * 4)  # group 2: all wrong, all 0
    _close(got, expected)
    # Spelled out for two rows: the plan/code boundary and the padding.
    assert got[0].tolist() == pytest.approx([plan[0]] * 2 + [code[0]] * 3 + [0.0], abs=1e-6)
    assert got[3].tolist() == pytest.approx([code[3]] * 3 + [0.0] * 3, abs=1e-6)  # no fence
    assert plan[0] == pytest.approx(0.0625 / (0.1030776 + EPS), abs=1e-5)
    assert code[2] == pytest.approx(-1.4997, abs=1e-4)


def test_scale_rewards_none_and_batch_follow_trl():
    none = split_advantages(PLAN_LENGTHS, LENGTHS, CORRECT, SPEEDUPS, 4, scale_rewards="none")
    expected = _rows([0.0625, 0.1125, -0.0875, -0.0875] + [0.0] * 4,
                     [0.25, 0.25, -0.75, 0.25] + [0.0] * 4)  # fmt: skip
    _close(none, expected)

    batch = split_advantages(PLAN_LENGTHS, LENGTHS, CORRECT, SPEEDUPS, 4, scale_rewards="batch")
    code_std = statistics.stdev([1, 1, 0, 1, 0, 0, 0, 0])  # the whole batch's, Bessel
    plan_std = statistics.stdev([0.15, 0.2, 0, 0, 0, 0, 0, 0])
    plan = [d / (plan_std + EPS) for d in (0.0625, 0.1125, -0.0875, -0.0875)]
    code = [d / (code_std + EPS) for d in (0.25, 0.25, -0.75, 0.25)]
    expected = _rows(plan + [0.0] * 4, code + [0.0] * 4)
    _close(batch, expected)


def test_group_advantages_ignore_nan_like_trl():
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0])  # an unscorable completion
    got = group_advantages(rewards, 2)
    assert got.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0])  # one value: no spread
    got = group_advantages(torch.tensor([1.0, float("nan"), 0.0, 2.0]), 4)
    assert got.tolist() == pytest.approx([0.0, 0.0, -1 / (1 + EPS), 1 / (1 + EPS)], abs=1e-6)


class Vocab:
    """A tokenizer's decode over a fixed list of token strings."""

    def __init__(self, *tokens: str):
        self.tokens = tokens

    def ids(self) -> list[int]:
        return list(range(len(self.tokens)))

    def __call__(self, ids) -> str:
        return "".join(self.tokens[i] for i in ids)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (("I ", "plan", ".\n", "```", "python\n", "x = 1\n", "```"), 3),
        (("I plan", "\n```", "python\n", "x = 1"), 1),  # the fence inside a token: code
        (("I plan.\n", "``", "`py", "thon\n", "x"), 1),  # split over tokens: from its first
        (("```", "python\n", "x"), 0),  # no plan
        (("a ``", " b", " c\n", "```", "x ```"), 3),  # two backticks are no fence
        (("I plan", " and plan", " and code x = 1"), None),  # no fence: all code
        (("é", "\n", "```", "py"), 2),
    ],
)
def test_the_fence_token(tokens, expected):
    vocab = Vocab(*tokens)
    assert fence_token(vocab.ids(), vocab) == expected


def test_details_to_terms():
    honest = {"correct": True, "reward": 0.85, "speedup": 2.5, "flags": []}
    ruled = {"correct": True, "reward": 1.1, "speedup": 1.01, "reward_speedup": 1.0}
    cheat = {"correct": True, "reward": 0.0, "speedup": 9.0, "flags": ["torch_compute"]}
    wrong = {"correct": False, "reward": 0.5, "speedup": None}
    assert [credited(d) for d in (honest, ruled, cheat, wrong)] == [True, True, False, False]
    code, plan = term_rewards([True, True, False, False], [2.5, 1.0, 9.0, None], 0.1, 2.0)
    assert code.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert plan.tolist() == pytest.approx([0.2, 0.1, 0.0, 0.0])
    _, plan = term_rewards([True, True], [-0.5, 1.5], weight=0.5, clip=1.0)
    assert plan.tolist() == pytest.approx([0.0, 0.5])


def test_errors_name_what_is_wrong():
    with pytest.raises(TypeError, match="make_trl_reward"):
        hierarchical_reward_funcs(lambda prompts, completions, **kw: [0.0])
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        group_advantages(torch.zeros(4), 2, "mean")
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="exceed width"):
        split_advantages([3], [2], [True], [None], 1)


def test_the_trainer_class_is_a_subclass_named_for_its_base():
    trl = pytest.importorskip("trl")
    from tritonrl.config import RlConfig

    cls = hierarchical_trainer(trl.GRPOTrainer, RlConfig(hierarchical=True))
    assert issubclass(cls, trl.GRPOTrainer) and cls.__name__ == "HierarchicalGRPOTrainer"


# --- real GRPO on the tiny model (slow) -----------------------------------------------

QUIET = ["--run.report_to", "[none]"]
PLAN = "Plan: one program per block of 1024, a masked load, the max with zero, a store.\n\n"


def _relu():
    from tritonrl.tasks import load_builtin

    return load_builtin("level1/1_ReLU").tasks[0]


@pytest.fixture(scope="module")
def _pools_closed():
    yield
    from tritonrl.verify.pool.pool import close_shared_pools

    close_shared_pools()


@pytest.mark.slow
def test_tritonrl_rl_with_hierarchical_runs_two_grpo_steps(sft_run, train_app, _pools_closed):
    from typer.testing import CliRunner

    from tritonrl.runs import Run

    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--algo", "grpo",
                                         "--rl.hierarchical", "true", "--rl.max_steps", "2",
                                         *QUIET])  # fmt: skip
    assert result.exit_code == 0, result.output
    run = Run.open(sft_run)
    rl = run.stage("rl")
    assert rl["status"] == "done" and rl["step"] == 2 and rl["info"]["config"]["rl"]["hierarchical"]
    rows = (sft_run / "rl/completions.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1] * 4 + [2] * 4  # verified once each
    history = json.loads(run.artifact("rl", "log_history").read_text())
    steps = [h for h in history if "loss" in h]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        correct, speedup = h["rewards/tritonrl_correct/mean"], h["rewards/tritonrl_speedup/mean"]
        assert h["reward"] == pytest.approx(correct + speedup)
        assert speedup == 0.0  # nothing is timed on the CPU
        assert 0.0 <= h["hierarchical/fenced"] <= 1.0 and 0.0 <= h["hierarchical/plan_tokens"] < 1
        assert "rewards/tritonrl_verifier/mean" not in h


@pytest.mark.slow
def test_fixed_rollouts_get_per_token_advantages_in_a_real_grpo_step(
    sft_run, tmp_path, monkeypatch, _pools_closed
):
    """One real GRPO step whose rollouts (TRL's rollout_func stands in for the sampler) are,
    per group of 2, a planned correct kernel and a planned broken one, then the correct
    kernel without a fence and the broken one: the trainer's own batch carries [B, L]
    advantages split at the fence, and TRL's loss is computed from them."""
    import datasets

    from tritonrl.config_loader import load_config
    from tritonrl.data.prompts import build_messages
    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.runs import Run
    from tritonrl.train.rl.common import CompletionLog, load_policy
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
    relu = _relu()
    config = load_config(None, ["--rl.max_steps", "1", "--curriculum.enabled", "false",
                                "--rl.hierarchical", "true", *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    honest, broken = (
        f"{PLAN}```python\n{relu.solution}```",
        f"{PLAN}```python\nclass ModelNew(:\n```",
    )
    texts = [honest, broken, relu.solution, broken]
    encoded = [tokenizer(t)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    plan_ids = tokenizer(PLAN)["input_ids"]
    assert encoded[0][: len(plan_ids)] == plan_ids  # the plan ends on a token boundary
    assert tokenizer.decode(encoded[0], skip_special_tokens=True) == honest

    def rollout(prompts, trainer):  # the prompts arrive once per completion, grouped
        text = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in prompts]  # fmt: skip
        ids = [tokenizer(t)["input_ids"] for t in text]
        return {"prompt_ids": ids, "completion_ids": [encoded[i % 4] for i in range(len(ids))],
                "logprobs": None}  # fmt: skip

    log_path = tmp_path / "completions.jsonl"
    reward = CompletionLog(log_path, {relu.id: 1}).trl_reward(
        make_trl_reward([relu], config.verify, asynchronous=True)
    )
    trainer = _trainer_class(config, None, [relu.id] * 4)(
        model=model,
        reward_funcs=[reward],
        args=trainer_args(config, tmp_path / "out", "cpu"),
        train_dataset=datasets.Dataset.from_list(
            [{"prompt": build_messages(relu.source), "task_id": relu.id}] * 4
        ),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    assert type(trainer).__name__ == "HierarchicalTrainer"
    trainer.train()
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [r["correct"] for r in rows] == [True, False, True, False], rows  # verified once each

    batch = trainer._buffered_inputs[0]  # the step's own inputs (shuffled rows)
    adv, ids, mask = batch["advantages"], batch["completion_ids"], batch["completion_mask"]
    assert adv.shape == ids.shape and ids.shape[0] == 4
    a = 0.5 / (math.sqrt(0.5) + EPS)  # code term [1, 0] in each group; speedup term all 0
    plans = [len(plan_ids), len(plan_ids), 0, len(plan_ids)]
    signs = [1.0, -1.0, 1.0, -1.0]
    for row in range(4):
        k = next(i for i, e in enumerate(encoded) if ids[row, : len(e)].tolist() == e)
        n, plan = len(encoded[k]), plans[k]
        expected = [0.0] * plan + [signs[k] * a] * (n - plan) + [0.0] * (ids.shape[1] - n)
        assert adv[row].tolist() == pytest.approx(expected, abs=1e-5), (row, k)

    with torch.no_grad():  # on-policy dapo: the loss is -sum(A * mask) / tokens
        loss = trainer._compute_loss(trainer.model, batch)
    assert loss.item() == pytest.approx(-(adv * mask).sum().item() / mask.sum().item(), rel=1e-4)
    step = next(h for h in trainer.state.log_history if "loss" in h)
    assert step["rewards/tritonrl_correct/mean"] == 0.5 and step["hierarchical/fenced"] == 0.75
