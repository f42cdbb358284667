"""Best-of-N and reward-weighted SFT on the tiny model and the real verifier.

Which samples are kept and how they are weighted (on real verdicts of a correct, a wrong
and a cheating ReLU kernel), which tasks a round draws, that the weighted loss is TRL's
SFT loss times the weights, and whole rounds through `tritonrl rl`: the tiny model
writes no kernel, so `honest_first_samples` puts each task's known solution in place of
the first of its samples (the rest are the model's own), then verifies them for real.
A LoRA run is stopped by SIGTERM in its first round and resumed into the second.
"""

import json
import os
import signal

import pytest
from typer.testing import CliRunner

from tritonrl.config import VerifyConfig, load_config
from tritonrl.data.prompts import build_messages
from tritonrl.reward.schemes import reward_for
from tritonrl.runs import Interrupted, Run
from tritonrl.tasks import load_builtin
from tritonrl.train import sampling
from tritonrl.verify import verify
from tritonrl.verify.pool import close_shared_pools

pytest.importorskip("trl")
RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip
QUIET = ["--run.report_to", "[none]"]


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


@pytest.fixture
def honest_first_samples(monkeypatch):
    """Each prompt's first sample replaced by its task's solution before verification."""
    real = sampling.score

    def score(tasks, ids, samples, *args):
        samples = [[f"```python\n{tasks[t].solution}```", *texts[1:]]
                   for t, texts in zip(ids, samples, strict=True)]  # fmt: skip
        return real(tasks, ids, samples, *args)

    monkeypatch.setattr(sampling, "score", score)


def _rows(rewards, task, names):
    return [{"task": task, "reward": rewards[n], "name": n} for n in names]


def test_best_of_n_keeps_the_top_k_of_each_task_above_the_threshold(rewards):
    rows = _rows(rewards, "a", ["wrong", "good", "cheat", "good", "good"])
    rows += _rows(rewards, "b", ["wrong", "cheat"])  # 0.3 is not above 0.3
    kept = sampling.select("best-of-n", rows, keep=2, min_reward=0.3)
    assert [(k["task"], k["name"], k["weight"]) for k in kept] == [("a", "good", 1.0)] * 2
    kept = sampling.select("best-of-n", rows, keep=3, min_reward=0.2)
    assert [(k["task"], k["name"]) for k in kept] == [("a", "good")] * 3 + [("b", "wrong")]


def test_rwsft_keeps_every_rewarded_sample_weighted_by_its_reward(rewards):
    rows = _rows(rewards, "a", ["good", "wrong", "cheat"]) + _rows(rewards, "b", ["good"])
    kept = sampling.select("rwsft", rows, keep=1, min_reward=0.3)
    assert [k["name"] for k in kept] == ["good", "wrong", "good"]  # the cheat earns nothing
    mean = (0.7 + 0.3 + 0.7) / 3
    assert [k["weight"] for k in kept] == pytest.approx([0.7 / mean, 0.3 / mean, 0.7 / mean])
    assert sum(k["weight"] for k in kept) == pytest.approx(len(kept))  # they average 1
    assert sampling.select("rwsft", _rows(rewards, "a", ["cheat"]), 1, 0.3) == []
    with pytest.raises(ValueError, match="best-of-n"):
        sampling.select("grpo", rows, 1, 0.3)


def test_a_round_draws_distinct_tasks_of_the_level_without_the_curriculum():
    tasks = {t.id: t for t in load_builtin("all").tasks}
    config = load_config(None, ["--best_of_n.tasks", "3", "--best_of_n.level", "1"])
    ids = sampling.draw(config, tasks, None, 1)
    assert len(set(ids)) == 3 and all(tasks[t].level == 1 for t in ids)
    assert sampling.draw(config, tasks, None, 1) == ids  # seeded by run.seed and the round
    assert sampling.draw(config, tasks, None, 2) != ids
    level1 = sum(t.level == 1 for t in tasks.values())
    many = load_config(None, ["--best_of_n.tasks", "1000", "--best_of_n.level", "1"])
    assert sorted(sampling.draw(many, tasks, None, 1)) == sampling.level_pool(tasks, 1)
    assert len(sampling.level_pool(tasks, 1)) == level1
    with pytest.raises(ValueError, match=r"best_of_n.level is 4 .* set --best_of_n.level"):
        sampling.level_pool(tasks, 4)


def _pairs(weights):
    prompt = build_messages(RELU.source, include_example=False)
    texts = [GOOD, WRONG]
    return [{"prompt": prompt, "completion": t, "weight": w}
            for t, w in zip(texts, weights, strict=True)]  # fmt: skip


@pytest.mark.slow  # loads a model
def test_the_weighted_loss_is_trls_sft_loss_times_the_weights(sft_run, tmp_path):
    from trl import SFTTrainer

    from tritonrl.train.best_of_n import _trainer_class, pair_dataset, trainer_args
    from tritonrl.train.sft import load_sft_model

    model, tokenizer = load_sft_model(sft_run)
    args = trainer_args(load_config(None, []), tmp_path, "cpu", seed=0)
    trainer = _trainer_class()(model=model, args=args, train_dataset=pair_dataset(_pairs([1, 1])),
                               processing_class=tokenizer)  # fmt: skip
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    assert batch["weight"].tolist() == [1.0, 1.0]
    assert (batch["labels"][:, :5] == -100).all()  # the prompt is not in the loss

    def loss(weights):
        import torch

        inputs = {**batch, "weight": torch.tensor(weights)}
        return trainer.compute_loss(model, inputs, num_items_in_batch=None).item()

    unweighted = {k: v for k, v in batch.items() if k != "weight"}
    plain = SFTTrainer.compute_loss(trainer, model, unweighted).item()
    assert plain > 1.0  # random weights are far from these kernels
    assert loss([1.0, 1.0]) == pytest.approx(plain, rel=1e-5)
    assert loss([2.0, 2.0]) == pytest.approx(2 * plain, rel=1e-5)
    assert loss([1.0, 0.0]) + loss([0.0, 1.0]) == pytest.approx(plain, rel=1e-5)
    assert loss([0.0, 0.0]) == 0.0


@pytest.mark.slow  # trains a model
def test_a_weight_of_0_changes_nothing_and_1_learns_the_kernel(sft_run, tmp_path):
    from tritonrl.train.best_of_n import fine_tune
    from tritonrl.train.sft import load_sft_model

    config = load_config(None, ["--best_of_n.learning_rate", "3e-4", "--best_of_n.epochs", "4"])
    model, tokenizer = load_sft_model(sft_run)
    before = [p.detach().clone() for p in model.parameters()]
    fine_tune(model, tokenizer, _pairs([0.0, 0.0]), config, "cpu", tmp_path, seed=0)
    assert all((a == b).all() for a, b in zip(before, model.parameters(), strict=True))
    history = fine_tune(model, tokenizer, _pairs([1.0, 1.0]), config, "cpu", tmp_path, seed=0)
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 4  # 2 pairs in one batch of 2 (tiny-cpu sft), 4 epochs
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < losses[0] - 0.3, losses


def _samples(run_dir, number=1):
    path = run_dir / f"rl/rounds/round-{number}/samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("algo", ["best-of-n", "rwsft"])
def test_one_round_through_tritonrl_rl(sft_run, train_app, honest_first_samples, algo):
    from tritonrl.train.sft import load_sft_model

    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--algo", algo,
                                            "--best_of_n.tasks", "3", *QUIET])  # fmt: skip
    assert result.exit_code == 0, result.output
    run = Run.open(sft_run)
    rl = run.stage("rl")
    assert rl["status"] == "done" and rl["step"] == 1 and rl["info"]["algo"] == algo
    rows = _samples(sft_run)
    assert len(rows) == 3 * 2  # best_of_n.tasks x best_of_n.samples (tiny-cpu)
    mean_kept = sum(r["reward"] for r in rows if r["reward"] > 0) / 3
    for r in rows:
        assert {"round", "task", "level", "sample", "details", "completion"} <= set(r)
        honest = r["sample"] % 2 == 0  # the model's own samples earn nothing
        assert r["details"]["correct"] is honest and (r["reward"] > 0.3) is honest
        weight = 1.0 if algo == "best-of-n" else r["reward"] / mean_kept
        assert r["kept"] is honest and r["weight"] == pytest.approx(weight if honest else 0.0)
    assert rl["info"]["kept"] == [3]
    logged = [json.loads(x) for x in (sft_run / "rl/completions.jsonl").read_text().splitlines()]
    assert [(c["step"], c["task"], c["correct"]) for c in logged] == [
        (0, r["task"], r["details"]["correct"]) for r in rows]  # fmt: skip
    history = json.loads(run.artifact("rl", "log_history").read_text())
    assert history[0]["kept"] == 3 and history[0]["verify/correct"] == 0.5
    assert history[0]["train/steps"] == 2 and history[0]["train/loss"] > 0  # 3 pairs, batch 2
    assert "curriculum/level2_share" in history[0]
    ckpt = run.artifact("rl", "checkpoint")
    assert ckpt.name == "round-1" and json.loads((ckpt / "round.json").read_text()) == {
        "rounds_done": 1}  # fmt: skip
    assert json.loads((ckpt / "curriculum.json").read_text())["share"] == 0.1
    assert run.artifact("rl", "rounds") == sft_run / "rl/rounds"
    final = run.artifact("rl", "model")
    assert f"{algo.upper()} by tritonrl" in (final / "README.md").read_text()
    from transformers import AutoModelForCausalLM

    sft_model, _ = load_sft_model(sft_run)
    rl_model = AutoModelForCausalLM.from_pretrained(final)
    changed = [n for (n, a), b in zip(sft_model.named_parameters(), rl_model.parameters(),
                                      strict=True) if not (a == b).all()]  # fmt: skip
    assert changed  # it was fine-tuned on the kept kernels


@pytest.mark.slow  # trains a model
def test_sigterm_finishes_the_round_and_resume_goes_on_with_its_policy_and_curriculum(
    tmp_path, honest_first_samples, monkeypatch
):
    from tritonrl.config_loader import override_config
    from tritonrl.train.rl import run_rl
    from tritonrl.train.sft import run_sft

    run_dir = tmp_path / "run"
    run_sft(load_config(None, ["--lora.enabled", "true", "--sft.max_steps", "1", *QUIET,
                               "--data.generated_tasks", "8",
                               "--tiny_model.generated_tasks", "20"]), run_dir)  # fmt: skip
    overrides = ["--rl.algo", "best-of-n", "--best_of_n.rounds", "2", "--best_of_n.tasks", "2"]
    config = override_config(Run.open(run_dir).config, overrides)
    real_generate, seen = sampling.generate, []

    def generate(model, tokenizer, prompts, config):
        seen.append({n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n})
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # in the middle of round 1
        return real_generate(model, tokenizer, prompts, config)

    monkeypatch.setattr(sampling, "generate", generate)
    with pytest.raises(Interrupted):
        run_rl(config, run_dir)
    run = Run.open(run_dir)
    rl = run.stage("rl")
    assert rl["status"] == "interrupted" and "SIGTERM" in rl["error"] and rl["step"] == 1
    ckpt = run.artifact("rl", "checkpoint")
    assert ckpt.name == "round-1" and (ckpt / "adapter_model.safetensors").is_file()
    assert len(_samples(run_dir)) == 4 and not (run_dir / "rl/rounds/round-2").exists()
    state = json.loads((ckpt / "curriculum.json").read_text())

    real_draw, drawn_with = sampling.draw, []

    def draw(config, tasks, curriculum, number):
        drawn_with.append(curriculum.state_dict())
        return real_draw(config, tasks, curriculum, number)

    monkeypatch.setattr(sampling, "draw", draw)
    result = run_rl(config, run_dir)
    assert result.steps == 2 and result.resumed_from == "rl/checkpoints/round-1" and result.lora
    assert drawn_with == [state]  # round 2 only, from round 1's curriculum state
    from safetensors.torch import load_file

    saved = load_file(str(ckpt / "adapter_model.safetensors"))
    resumed = seen[-1]  # the adapter round 2 sampled with: round 1's, not the SFT one
    assert resumed and all(not (p == seen[0][n]).all() for n, p in resumed.items())
    for name, p in resumed.items():  # PEFT saves them without the adapter's name
        assert (p == saved[name.replace(".default", "")]).all(), name
    run = Run.open(run_dir)
    assert run.stage("rl")["status"] == "done" and run.stage("rl")["step"] == 2
    assert [h["round"] for h in json.loads(run.artifact("rl", "log_history").read_text())] == [1, 2]
    assert (run.artifact("rl", "adapter") / "adapter_config.json").is_file()
