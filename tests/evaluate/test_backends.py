"""The models an evaluation asks: a LoRA adapter directory on its base, a run (its latest
model through the manifest), a plain model directory, and the errors that name what to
give instead."""

import pytest

from tritonrl.config_loader import load_config
from tritonrl.evaluate.backends import LocalModel, model_name, open_model
from tritonrl.runs import Run

SHORT = load_config(None, ["--sampling.max_new_tokens", "8"])
PROMPTS = [[{"role": "user", "content": "Write a Triton ReLU kernel."}],
           [{"role": "user", "content": "Write a Triton softmax kernel."}]]  # fmt: skip


def test_a_run_gives_its_latest_model_an_adapter_on_the_runs_base(lora_run):
    from peft import PeftModel

    model = open_model(str(lora_run))
    assert model_name(str(lora_run)) == model.name == "run/sft"  # rl is not done
    assert isinstance(model, LocalModel) and isinstance(model.model, PeftModel)
    answers = model.answers(PROMPTS, 2, SHORT)
    assert [len(a) for a in answers] == [2, 2] and all(isinstance(t, str) for t in answers[0])


def test_once_rl_is_done_the_run_gives_rls_model(lora_run, tmp_path):
    import shutil

    from peft import PeftModel

    run = Run.open(shutil.copytree(lora_run, tmp_path / "moved"))  # moved: found anyway
    rl_adapter = shutil.copytree(run.artifact("sft", "adapter"), run.path / "rl" / "final")
    run.start_stage("rl")
    run.add_artifact("rl", "adapter", rl_adapter)
    run.finish_stage("rl")
    model = open_model(str(run.path))
    assert model.name == "moved/rl" and isinstance(model.model, PeftModel)
    assert len(model.answers(PROMPTS[:1], 1, SHORT)) == 1


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


def test_a_models_own_generation_config_does_not_change_how_it_is_sampled(lora_run):
    # Every backend samples as the sampling section says (by default the whole
    # distribution at its temperature), as GRPO (TRL: top_k 0, top_p 1) and vLLM do: a
    # generation_config.json's top_k (transformers' default is 50) or repetition penalty
    # must not narrow it. top_k 1 would make all 8 samples one.
    import torch

    plain = open_model(str(Run.open(lora_run).artifact("tiny_model", "model")))
    config = load_config(None, ["--sampling.max_new_tokens", "16"])
    greedy = plain.answers(PROMPTS[:1], 1, config)
    plain.model.generation_config.top_k = 1
    plain.model.generation_config.repetition_penalty = 5.0
    torch.manual_seed(0)
    samples = plain.answers(PROMPTS[:1], 8, config)[0]
    assert len(set(samples)) > 1, samples
    assert plain.answers(PROMPTS[:1], 1, config) == greedy


def test_the_sampling_sections_top_k_and_top_p_reach_generate(lora_run):
    # The section's top_k 1 (or a top_p that leaves only the likeliest token) narrows the
    # 8 samples to one: the greedy answer, whatever the temperature.
    import torch

    plain = open_model(str(Run.open(lora_run).artifact("tiny_model", "model")))
    plain.model.generation_config.top_k = 50  # not the model's: the section's
    short = ["--sampling.max_new_tokens", "16", "--sampling.temperature", "2.0"]
    greedy = plain.answers(PROMPTS[:1], 1, load_config(None, short))[0]
    for narrow in (["--sampling.top_k", "1"], ["--sampling.top_p", "1e-6"]):
        torch.manual_seed(0)
        samples = plain.answers(PROMPTS[:1], 8, load_config(None, [*short, *narrow]))[0]
        assert samples == greedy * 8, narrow
    torch.manual_seed(0)
    wide = plain.answers(PROMPTS[:1], 8, load_config(None, short))[0]
    assert len(set(wide)) > 1, wide


def test_what_cannot_be_evaluated_is_named(tmp_path):
    with pytest.raises(ValueError, match="openai:MODEL@URL"):
        open_model("openai:gpt-4o")
    with pytest.raises(ValueError, match="no such file or directory"):
        model_name(str(tmp_path / "missing"))
    Run.create(tmp_path / "fresh", config={})
    with pytest.raises(ValueError, match="neither rl nor sft is done"):
        open_model(str(tmp_path / "fresh"))
    # SFT done and RL failed: not the SFT model in RL's place, a refusal naming both ways
    run = Run.create(tmp_path / "halfway", config={})
    run.start_stage("sft")
    run.finish_stage("sft")
    assert model_name(str(tmp_path / "halfway")) == "halfway/sft"  # rl never started
    run.start_stage("rl")
    run.fail_stage("rl", "the endpoint did not answer")
    with pytest.raises(ValueError, match=r"rl stage is failed .*--model .*halfway/sft/final"):
        model_name(str(tmp_path / "halfway"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="names no base_model_name_or_path"):
        open_model(str(tmp_path / "m"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no config.json .* or manifest.json"):
        open_model(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="--backend vllm"):
        open_model(str(tmp_path / "m"), backend="vllm")


def _write_gguf():
    """tests/models/test_load.py's GGUF writer (the llama.cpp converter's names)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "models" / "test_load.py"
    spec = importlib.util.spec_from_file_location("models_test_load", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_gguf


def test_a_gguf_file_is_a_model(lora_run, tmp_path):
    pytest.importorskip("gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = Run.open(lora_run).artifact("tiny_model", "model")
    path = _write_gguf()(AutoModelForCausalLM.from_pretrained(base),
                         AutoTokenizer.from_pretrained(base), tmp_path / "tiny.gguf")  # fmt: skip
    model = open_model(str(path))
    assert model.name == "tiny.gguf" and type(model.model).__name__ == "Qwen2ForCausalLM"
    reference = open_model(str(base))
    assert model._text(PROMPTS[0]) == reference._text(PROMPTS[0])  # its chat template
    ids = reference.tokenizer(reference._text(PROMPTS[0]), return_tensors="pt")["input_ids"]
    with torch.no_grad():  # the same weights (the test writer's tokenizer marks fewer
        assert torch.equal(model.model(ids).logits, reference.model(ids).logits)  # specials)
    assert [len(a) for a in model.answers(PROMPTS, 2, SHORT)] == [2, 2]


@pytest.mark.gpu
def test_vllm_answers_for_a_full_model_directory(lora_run):
    # `--backend vllm` (and `auto` on CUDA once vLLM is installed) serves a full model
    # directory through vllm.LLM: n answers a prompt, cut at sampling.max_new_tokens (8
    # tokens here, which a tiny model's answers reach) and marked so. Runs only where vLLM
    # is installed (its own extra).
    pytest.importorskip("vllm")
    from tritonrl.evaluate.backends import VllmModel

    base = Run.open(lora_run).artifact("tiny_model", "model")
    import torch

    free_before, total = torch.cuda.mem_get_info()
    model = open_model(str(base), device="cuda")  # auto: vLLM for a full model on CUDA
    assert isinstance(model, VllmModel) and model.name == base.name
    # vLLM takes its share (0.3 by default), not its own 0.9: the verifier's lanes on the
    # same GPU keep room for full-size inputs. (Measured as what this model took: another
    # test's vLLM in this process may still hold its own share.)
    taken = free_before - torch.cuda.mem_get_info()[0]
    assert taken < 0.45 * total, f"vLLM took {taken / 2**30:.1f} of {total / 2**30:.1f} GiB"
    answers = model.generate(PROMPTS, 2, SHORT)
    assert [len(a) for a in answers] == [2, 2]
    assert all(isinstance(a.text, str) for per_prompt in answers for a in per_prompt)
    assert any(a.truncated for per_prompt in answers for a in per_prompt)
    greedy = model.answers(PROMPTS[:1], 1, SHORT)
    assert greedy == model.answers(PROMPTS[:1], 1, SHORT)  # one answer: temperature 0
