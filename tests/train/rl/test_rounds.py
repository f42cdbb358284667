"""Which tasks a round draws, and which samples best-of-n and rwsft keep with what
weight, on real verdicts of a correct, a wrong and a cheating ReLU kernel."""

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.config_loader import load_config
from tritonrl.reward.schemes import reward_for
from tritonrl.tasks import load_builtin
from tritonrl.train.rl import rounds
from tritonrl.verify import verify

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip


@pytest.fixture(scope="module")
def rewards() -> dict[str, float]:
    config = VerifyConfig(device="cpu")
    out = {name: reward_for(verify(RELU, text, config), config)
           for name, text in (("good", GOOD), ("wrong", WRONG), ("cheat", CHEAT))}  # fmt: skip
    assert out == {"good": pytest.approx(0.7), "wrong": 0.3, "cheat": 0.0}  # staged, CPU
    return out


def _rows(rewards, task, names):
    return [{"task": task, "reward": rewards[n], "name": n} for n in names]


def test_best_of_n_keeps_the_top_k_of_each_task_above_the_threshold(rewards):
    rows = _rows(rewards, "a", ["wrong", "good", "cheat", "good", "good"])
    rows += _rows(rewards, "b", ["wrong", "cheat"])  # 0.3 is not above 0.3
    kept = rounds.select("best-of-n", rows, keep=2, min_reward=0.3)
    assert [(k["task"], k["name"], k["weight"]) for k in kept] == [("a", "good", 1.0)] * 2
    kept = rounds.select("best-of-n", rows, keep=3, min_reward=0.2)
    assert [(k["task"], k["name"]) for k in kept] == [("a", "good")] * 3 + [("b", "wrong")]


def test_rwsft_keeps_every_rewarded_sample_weighted_by_its_reward(rewards):
    rows = _rows(rewards, "a", ["good", "wrong", "cheat"]) + _rows(rewards, "b", ["good"])
    kept = rounds.select("rwsft", rows, keep=1, min_reward=0.3)
    assert [k["name"] for k in kept] == ["good", "wrong", "good"]  # the cheat earns nothing
    mean = (0.7 + 0.3 + 0.7) / 3
    assert [k["weight"] for k in kept] == pytest.approx([0.7 / mean, 0.3 / mean, 0.7 / mean])
    assert sum(k["weight"] for k in kept) == pytest.approx(len(kept))  # they average 1
    assert rounds.select("rwsft", _rows(rewards, "a", ["cheat"]), 1, 0.3) == []
    with pytest.raises(ValueError, match="best-of-n"):
        rounds.select("grpo", rows, 1, 0.3)


def test_a_round_draws_distinct_tasks_of_the_level_without_the_curriculum():
    tasks = {t.id: t for t in load_builtin("all").tasks}
    config = load_config(None, ["--best_of_n.tasks", "3", "--best_of_n.level", "1"])
    ids = rounds.draw(config, tasks, None, 1)
    assert len(set(ids)) == 3 and all(tasks[t].level == 1 for t in ids)
    assert rounds.draw(config, tasks, None, 1) == ids  # seeded by run.seed and the round
    assert rounds.draw(config, tasks, None, 2) != ids
    level1 = sum(t.level == 1 for t in tasks.values())
    many = load_config(None, ["--best_of_n.tasks", "1000", "--best_of_n.level", "1"])
    assert sorted(rounds.draw(many, tasks, None, 1)) == rounds.level_pool(tasks, 1)
    assert len(rounds.level_pool(tasks, 1)) == level1
    with pytest.raises(ValueError, match=r"best_of_n.level is 4 .* set --best_of_n.level"):
        rounds.level_pool(tasks, 4)


def test_a_rounds_samples_come_from_the_whole_distribution_whatever_the_model_says(
    sft_run_template,
):
    # best-of-n and rwsft sample as the sampling section says (by default no top-k or
    # top-p), as GRPO does; a generation_config.json (or transformers' default top-k of
    # 50) must not narrow it: with its top_k of 1 the 8 samples would be one. The
    # section's own top_k of 1 does make them one: the greedy answer, 8 times.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tritonrl.runs import Run

    path = Run.open(sft_run_template).artifact("tiny_model", "model")
    model = AutoModelForCausalLM.from_pretrained(path)
    model.generation_config.top_k = 1
    config = load_config(None, ["--best_of_n.samples", "8", "--sampling.max_new_tokens", "16"])
    torch.manual_seed(0)
    prompt = [{"role": "user", "content": "Write a Triton ReLU kernel."}]
    samples = rounds.generate(model, AutoTokenizer.from_pretrained(path), [prompt], config)
    assert len(samples) == 1 and len(samples[0]) == 8
    assert len(set(samples[0])) > 1, samples
    model.generation_config.top_k = 50
    top1 = load_config(None, ["--best_of_n.samples", "8", "--sampling.max_new_tokens", "16",
                              "--sampling.top_k", "1"])  # fmt: skip
    samples = rounds.generate(model, AutoTokenizer.from_pretrained(path), [prompt], top1)
    assert len(set(samples[0])) == 1 and len(samples[0]) == 8, samples
