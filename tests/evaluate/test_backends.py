"""The models an evaluation asks: a LoRA adapter directory on its base, a run (its latest
model through the manifest), a plain model directory, and the errors that name what to
give instead."""

import pytest

from tritonrl.config import load_config
from tritonrl.evaluate.backends import LocalModel, model_name, open_model
from tritonrl.runs import Run

SHORT = load_config(None, ["--rl.max_completion_length", "8"])
PROMPTS = [[{"role": "user", "content": "Write a Triton ReLU kernel."}],
           [{"role": "user", "content": "Write a Triton softmax kernel."}]]  # fmt: skip


def test_a_run_gives_its_latest_model_an_adapter_on_the_runs_base(lora_run):
    from peft import PeftModel

    model = open_model(str(lora_run))
    assert model_name(str(lora_run)) == model.name == "run/sft"  # rl is not done
    assert isinstance(model, LocalModel) and isinstance(model.model, PeftModel)
    answers = model.answers(PROMPTS, 2, SHORT)
    assert [len(a) for a in answers] == [2, 2] and all(isinstance(t, str) for t in answers[0])


def test_an_adapter_directory_and_a_model_directory(lora_run):
    from peft import PeftModel

    run = Run.open(lora_run)
    adapter = open_model(str(run.artifact("sft", "adapter")))
    assert isinstance(adapter.model, PeftModel)
    greedy = adapter.answers(PROMPTS[:1], 1, SHORT)
    assert greedy == adapter.answers(PROMPTS[:1], 1, SHORT)  # one answer, greedy
    base = run.artifact("tiny_model", "model")
    plain = open_model(str(base))
    assert not isinstance(plain.model, PeftModel) and plain.name == base.name
    assert len(plain.answers(PROMPTS, 1, SHORT)) == 2


def test_what_cannot_be_evaluated_is_named(tmp_path):
    with pytest.raises(ValueError, match="openai:MODEL@URL"):
        open_model("openai:gpt-4o")
    with pytest.raises(ValueError, match="no such file or directory"):
        model_name(str(tmp_path / "missing"))
    Run.create(tmp_path / "fresh", config={})
    with pytest.raises(ValueError, match="neither rl nor sft is done"):
        open_model(str(tmp_path / "fresh"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="names no base_model_name_or_path"):
        open_model(str(tmp_path / "m"))
    with pytest.raises(ValueError, match="--backend vllm"):
        open_model(str(tmp_path / "m"), backend="vllm")
