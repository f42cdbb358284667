"""Whole rounds of best-of-n and rwsft through `tritonrl rl` on the tiny model and the
real verifier. The tiny model writes no kernel, so `honest_first_samples` puts each
task's known solution in place of the first of its samples (the rest are the model's
own) before they are verified for real. A LoRA run is stopped by SIGTERM in its first
round and resumed into the second.
"""

import json
import os
import signal

import pytest
from typer.testing import CliRunner

from tritonrl.config_loader import load_config
from tritonrl.runs import Interrupted, Run
from tritonrl.train.rl import rounds
from tritonrl.verify.pool.pool import close_shared_pools

pytest.importorskip("trl")
QUIET = ["--run.report_to", "[none]"]


@pytest.fixture(scope="module", autouse=True)
def _shared_pools_closed():
    yield
    close_shared_pools()


@pytest.fixture
def honest_first_samples(monkeypatch):
    """Each prompt's first sample replaced by its task's solution before verification."""
    real = rounds.score

    def score(tasks, ids, samples, *args):
        samples = [[f"```python\n{tasks[t].solution}```", *texts[1:]]
                   for t, texts in zip(ids, samples, strict=True)]  # fmt: skip
        return real(tasks, ids, samples, *args)

    monkeypatch.setattr(rounds, "score", score)


def _samples(run_dir, number=1):
    path = run_dir / f"rl/rounds/round-{number}/samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("algo", ["best-of-n", "rwsft"])
def test_one_round_through_tritonrl_rl(sft_run, train_app, honest_first_samples, algo):
    from tritonrl.train.sft import load_sft_model

    report = "[tensorboard]" if algo == "best-of-n" else "[none]"
    args = ["rl", "--run", str(sft_run), "--algo", algo, "--best_of_n.tasks", "3"]
    result = CliRunner().invoke(train_app, [*args, "--run.report_to", report])
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
        (1, r["task"], r["details"]["correct"]) for r in rows]  # fmt: skip
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
    card = (final / "README.md").read_text()
    assert f"{algo.upper()} by tritonrl" in card and "- rounds: 1 (budget: 1)" in card
    if algo == "best-of-n":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run.artifact("rl", "tensorboard"))).Reload()
        assert [(e.step, e.value) for e in events.Scalars("kept")] == [(1, 3.0)]
        assert events.Scalars("verify/correct")[0].value == 0.5
    else:
        assert not run.has_artifact("rl", "tensorboard")
    assert not (sft_run / "rl/fine-tune").exists()  # the trainer's scratch directory
    from transformers import AutoModelForCausalLM

    sft_model, _ = load_sft_model(sft_run)
    rl_model = AutoModelForCausalLM.from_pretrained(final)
    changed = [n for (n, a), b in zip(sft_model.named_parameters(), rl_model.parameters(),
                                      strict=True) if not (a == b).all()]  # fmt: skip
    assert changed  # it was fine-tuned on the kept kernels
    if algo == "best-of-n":  # a raised budget goes on from the last round's checkpoint
        more = CliRunner().invoke(train_app, [*args, "--run.report_to", report,
                                              "--best_of_n.rounds", "2"])  # fmt: skip
        assert more.exit_code == 0, more.output
        rl = Run.open(sft_run).stage("rl")
        assert rl["status"] == "done" and rl["step"] == 2
        assert rl["info"]["resumed_from_checkpoint"].endswith("round-1")
        assert len(_samples(sft_run, 2)) == 3 * 2 and len(_samples(sft_run)) == 3 * 2


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
    real_generate, seen = rounds.generate, []

    def generate(model, tokenizer, prompts, config):
        seen.append({n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n})
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # in the middle of round 1
        return real_generate(model, tokenizer, prompts, config)

    monkeypatch.setattr(rounds, "generate", generate)
    with pytest.raises(Interrupted):
        run_rl(config, run_dir)
    run = Run.open(run_dir)
    rl = run.stage("rl")
    assert rl["status"] == "interrupted" and "SIGTERM" in rl["error"] and rl["step"] == 1
    ckpt = run.artifact("rl", "checkpoint")
    assert ckpt.name == "round-1" and (ckpt / "adapter_model.safetensors").is_file()
    assert len(_samples(run_dir)) == 4 and not (run_dir / "rl/rounds/round-2").exists()
    state = json.loads((ckpt / "curriculum.json").read_text())

    real_draw, drawn_with = rounds.draw, []

    def draw(config, tasks, curriculum, number):
        drawn_with.append(curriculum.state_dict())
        return real_draw(config, tasks, curriculum, number)

    monkeypatch.setattr(rounds, "draw", draw)
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
