"""Best-of-N and reward-weighted SFT on the tiny model: which samples are kept and how
they are weighted (on real verdicts), that the weight really scales the fine-tuning, and
one round of each through `tritonrl rl` (files, manifest, checkpoint, final model)."""

import json

import pytest
from typer.testing import CliRunner

from tritonrl.config import VerifyConfig, load_config
from tritonrl.data.prompts import build_messages
from tritonrl.reward.schemes import reward_for
from tritonrl.runs import Run
from tritonrl.tasks import load_builtin
from tritonrl.train.best_of_n import fine_tune, select
from tritonrl.verify import verify
from tritonrl.verify.pool import close_shared_pools

pytest.importorskip("trl")
RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _shared_pools_closed():
    yield
    close_shared_pools()


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
    kept = select("best-of-n", rows, keep=2, min_reward=0.3)
    assert [(k["task"], k["name"], k["weight"]) for k in kept] == [("a", "good", 1.0)] * 2
    assert select("best-of-n", rows, keep=3, min_reward=0.2)[-1]["name"] == "wrong"


def test_rwsft_keeps_every_rewarded_sample_weighted_by_its_reward(rewards):
    rows = _rows(rewards, "a", ["good", "wrong", "cheat"])
    kept = select("rwsft", rows, keep=1, min_reward=0.3)
    assert [k["name"] for k in kept] == ["good", "wrong"]  # the cheat earns nothing
    assert [k["weight"] for k in kept] == pytest.approx([0.7 / 0.5, 0.3 / 0.5])
    with pytest.raises(ValueError, match="best-of-n or rwsft"):
        select("grpo", rows, 1, 0.3)


@pytest.mark.slow  # trains a model
def test_the_weight_scales_the_fine_tuning(sft_run):
    from tritonrl.train.sft import load_sft_model

    config = load_config(None, ["--best_of_n.learning_rate", "1e-3", "--best_of_n.epochs", "3"])
    pair = {"prompt": build_messages(RELU.source, include_example=False), "completion": GOOD}
    model, tokenizer = load_sft_model(sft_run)
    before = [p.detach().clone() for p in model.parameters()]
    assert fine_tune(model, tokenizer, [{**pair, "weight": 0.0}], config, seed=0) == [0.0] * 3
    assert all((a == b).all() for a, b in zip(before, model.parameters(), strict=True))
    losses = fine_tune(model, tokenizer, [{**pair, "weight": 1.0}], config, seed=0)
    assert losses[-1] < losses[0] - 0.5, losses  # it learns the kept kernel


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("algo", ["best-of-n", "rwsft"])
def test_one_round_through_tritonrl_rl(sft_run, train_app, algo):
    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--algo", algo,
                                            "--run.report_to", "[none]"])  # fmt: skip
    assert result.exit_code == 0, result.output
    run = Run.open(sft_run)
    rl = run.stage("rl")
    assert rl["status"] == "done" and rl["step"] == 1 and rl["info"]["algo"] == algo
    rows = [json.loads(x) for x in (sft_run / "rl/rounds/round-1.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 2  # best_of_n.tasks x best_of_n.samples (tiny-cpu)
    for r in rows:
        assert {"task", "level", "sample", "reward", "details", "kept", "weight"} <= set(r)
        assert r["kept"] is False and r["reward"] == 0.0  # random weights write no kernel
    assert len((sft_run / "rl/completions.jsonl").read_text().splitlines()) == 8
    ckpt = run.artifact("rl", "checkpoint")
    assert ckpt.name == "round-1" and json.loads((ckpt / "round.json").read_text()) == {
        "rounds_done": 1}  # fmt: skip
    assert json.loads((ckpt / "curriculum.json").read_text())["share"] == 0.1
    history = json.loads(run.artifact("rl", "log_history").read_text())
    assert history[0]["kept"] == 0 and history[0]["samples"] == 8
    card = (run.artifact("rl", "model") / "README.md").read_text()
    assert f"{algo.upper()} by tritonrl" in card
