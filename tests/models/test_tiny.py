"""The tiny from-scratch model: saved like a hub model, reloaded, chat template, generate."""

import pytest
import typer
from typer.testing import CliRunner

from tritonrl.config import TinyModelConfig
from tritonrl.data.prompts import build_prompt, sft_example
from tritonrl.models.tiny import IM_END, build_tiny_model, count_parameters
from tritonrl.tasks import load_builtin
from tritonrl.train.commands import register

transformers = pytest.importorskip("transformers")

SMALL = TinyModelConfig(generated_tasks=20)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", SMALL)


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    return model, tokenizer


@pytest.fixture(scope="module")
def relu():
    return load_builtin("level1/1_ReLU").tasks[0]


def test_reloads_as_a_small_qwen2(loaded):
    model, tokenizer = loaded
    assert model.config.model_type == "qwen2"
    assert 1_000_000 < count_parameters(model) < 10_000_000
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.eos_token == IM_END
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id


def test_tokenizer_round_trips_code(loaded, relu):
    _, tokenizer = loaded
    for text in (relu.source, relu.solution, "x = tl.load(ptr + offs, mask=m)  # ünïcode ✓"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert len(ids) < len(text)  # BPE merges, not one token per byte


def test_chat_template(loaded, relu):
    _, tokenizer = loaded
    example = sft_example(relu.source, relu.solution)
    prompt = tokenizer.apply_chat_template(
        example["prompt"], tokenize=False, add_generation_prompt=True
    )
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>assistant\n")
    no_gen = tokenizer.apply_chat_template(example["prompt"], tokenize=False)
    assert no_gen.endswith("<|im_end|>\n") and prompt.startswith(no_gen)
    full = tokenizer.apply_chat_template(example["prompt"] + example["completion"], tokenize=False)
    assert full.startswith(prompt)
    assert full == prompt + example["completion"][0]["content"] + "<|im_end|>\n"
    # Token ids of the prompt are a prefix of those of prompt + completion (TRL's
    # completion mask relies on it), and the assistant mask covers the answer.
    prompt_ids = tokenizer(prompt)["input_ids"]
    out = tokenizer.apply_chat_template(
        example["prompt"] + example["completion"],
        return_assistant_tokens_mask=True,
        return_dict=True,
    )
    assert out["input_ids"][: len(prompt_ids)] == prompt_ids
    mask = out["assistant_masks"]
    assert not any(mask[: len(prompt_ids)]) and all(mask[len(prompt_ids) : -1])
    assert build_prompt(relu.source, tokenizer) == prompt


def test_generates(loaded, relu):
    import torch

    model, tokenizer = loaded
    inputs = tokenizer(build_prompt(relu.source, tokenizer), return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 8
    assert isinstance(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :]), str)


def test_refuses_to_overwrite_unless_asked(tiny_dir):
    before = sorted(p.name for p in tiny_dir.iterdir())
    with pytest.raises(FileExistsError, match="not empty.*overwrite"):
        build_tiny_model(tiny_dir, SMALL)
    assert sorted(p.name for p in tiny_dir.iterdir()) == before
    assert not list(tiny_dir.parent.glob(".model.tmp-*"))


def test_cli(tmp_path):
    app = typer.Typer()

    @app.callback()
    def main():
        pass

    register(app)
    out = tmp_path / "m"
    args = [
        "tiny-model",
        "--out",
        str(out),
        "--tiny_model.generated_tasks",
        "5",
        "--tiny_model.num_layers",
        "1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "parameters) written to" in result.stdout
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_hidden_layers == 1
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "not empty" in again.output
    bad = CliRunner().invoke(app, ["tiny-model", "--out", str(out), "--tiny_model.layers", "1"])
    assert bad.exit_code == 2 and "unknown key tiny_model.layers" in bad.output
