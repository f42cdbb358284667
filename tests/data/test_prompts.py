"""Tests for `tritonrl.data.prompts`: what the prompt holds, the SFT round trip through
`extract_code`, the one-shot example's correctness, and chat-template rendering."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tritonrl
from tritonrl.data import build_messages, build_prompt, sft_example
from tritonrl.data.prompts import (
    EXAMPLE_REFERENCE,
    EXAMPLE_SOLUTION,
    PARTIAL_TORCH_OPS,
    SYSTEM_PROMPT,
    answer_text,
    fenced,
    output_contract,
    render_plain,
)
from tritonrl.extract import extract_code, normalise_code

BUILTIN = Path(tritonrl.__file__).parent / "tasks" / "builtin"
REF = (BUILTIN / "level1" / "1_ReLU.py").read_text()
SOL = (BUILTIN / "solutions" / "level1" / "1_ReLU.py").read_text()
SOLUTIONS = sorted((BUILTIN / "solutions").glob("level*/*.py"))

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def user_text(**kw) -> str:
    return build_messages(REF, **kw)[1]["content"]


# ---------------------------------------------------------------- messages


def test_messages_are_system_then_user():
    messages = build_messages(REF)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT
    assert all(isinstance(m["content"], str) for m in messages)


def test_user_message_holds_instruction_reference_and_contract():
    text = user_text()
    assert "ModelNew" in text and "same __init__ arguments" in text
    assert "```python\n" + REF + "```" in text  # the reference, verbatim, fenced
    assert "OUTPUT CONTRACT" in text
    assert "exactly one final ```python block" in text
    assert "class ModelNew(nn.Module)" in text
    assert "<think>" in text
    # the contract comes last, after the reference
    assert text.index("OUTPUT CONTRACT") > text.index(REF)


def test_strict_policy_allows_torch_only_for_allocation_and_views():
    text = user_text()
    assert "Policy strict" in text and "torch.empty" in text and "views" in text
    assert "Policy partial" not in text


def test_partial_policy_names_the_allowed_torch_ops():
    text = user_text(policy="partial")
    assert "Policy partial" in text and "Policy strict" not in text
    for op in PARTIAL_TORCH_OPS:
        assert f"`{op}`" in text
    text = user_text(policy="partial", allowed_torch_ops=["F.linear"])
    assert "torch: `F.linear`. Every other" in text and "`bmm`" not in text


def test_allowed_ops_must_agree_with_the_policy():
    with pytest.raises(ValueError, match="use policy 'partial'"):
        build_messages(REF, allowed_torch_ops=["mm"])
    with pytest.raises(ValueError, match="say 'strict'"):
        build_messages(REF, policy="partial", allowed_torch_ops=[])


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="strict, partial"):
        build_messages(REF, policy="lenient")
    with pytest.raises(ValueError, match="strict, partial"):
        output_contract("none")


def test_example_is_optional():
    assert "add_kernel" in user_text()
    assert "def get_inputs" in user_text(include_example=False)  # the task's own
    assert "add_kernel" not in user_text(include_example=False)
    assert "Example" not in user_text(include_example=False)


def test_instruction_can_be_replaced():
    text = user_text(instruction="Fuse everything into one kernel.")
    assert text.startswith("Fuse everything into one kernel.")
    assert "OUTPUT CONTRACT" in text  # the contract is never optional


def test_empty_reference_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        build_messages("  \n")


def test_reference_with_backticks_gets_a_longer_fence():
    ref = REF.replace('"""ReLU activation', '"""Usage:\n```\nModel()(x)\n```\nReLU activation')
    text = build_messages(ref)[1]["content"]
    assert "````python\n" + ref + "````" in text


# ---------------------------------------------------------------- the one-shot example


def test_example_answer_extracts_to_the_example_solution():
    assert extract_code(answer_text(EXAMPLE_SOLUTION, "plan")) == EXAMPLE_SOLUTION


def test_example_solution_matches_its_reference_under_the_interpreter():
    script = "\n".join(
        [
            "import torch",
            "ref_ns, sol_ns = {}, {}",
            f"exec({EXAMPLE_REFERENCE!r}, ref_ns)",
            f"exec({EXAMPLE_SOLUTION!r}, sol_ns)",
            "for n in (4096, 1, 1000, 3333):",
            "    a, b = torch.randn(n), torch.randn(n)",
            "    want = ref_ns['Model']()(a, b)",
            "    got = sol_ns['ModelNew']()(a, b)",
            "    assert torch.equal(got, want), n",
            "print('ok')",
        ]
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# ---------------------------------------------------------------- SFT rows


def test_sft_example_shape_is_trl_conversational():
    row = sft_example(REF, SOL)
    assert set(row) == {"prompt", "completion"}
    assert row["prompt"] == build_messages(REF)
    assert len(row["completion"]) == 1 and row["completion"][0]["role"] == "assistant"
    assert row["completion"][0]["content"].endswith("```")


def test_sft_round_trip_on_the_builtin_relu():
    content = sft_example(REF, SOL)["completion"][0]["content"]
    assert content == "```python\n" + SOL + "```"
    assert extract_code(content) == SOL


def test_sft_round_trip_with_reasoning():
    reasoning = (
        "A first try:\n```python\nclass ModelNew(nn.Module):\n    pass\n```\n"
        "That's wrong; </think> also appears here, and an open fence:\n```python\n"
    )
    content = sft_example(REF, SOL, reasoning)["completion"][0]["content"]
    assert content.startswith("<think>\n") and content.count("</think>") == 1
    assert extract_code(content) == SOL


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_sft_round_trip_on_every_builtin_solution(path):
    solution = path.read_text()
    content = sft_example(REF, solution, "plan")["completion"][0]["content"]
    assert extract_code(content) == normalise_code(solution)


def test_sft_round_trip_normalises_sloppy_solutions():
    sloppy = "\n\n" + SOL.rstrip("\n").replace("\n", "\r\n")
    content = sft_example(REF, sloppy)["completion"][0]["content"]
    assert extract_code(content) == SOL


def test_sft_round_trip_with_backticks_in_the_solution():
    solution = SOL.replace('"""Triton', '"""Usage:\n```\nModelNew()(x)\n```\nTriton', 1)
    content = sft_example(REF, solution)["completion"][0]["content"]
    assert content.startswith("````python\n")
    assert extract_code(content) == solution


def test_sft_refuses_a_solution_extraction_cannot_read():
    with pytest.raises(ValueError, match="SFT target"):
        sft_example(REF, "import torch\n\nclass Model2:\n    pass\n")
    with pytest.raises(ValueError, match="SFT target"):
        sft_example(REF, SOL.replace("return y", "return (y"))


def test_sft_passes_prompt_options_through():
    row = sft_example(REF, SOL, policy="partial", include_example=False)
    assert row["prompt"] == build_messages(REF, policy="partial", include_example=False)


# ---------------------------------------------------------------- rendering


def test_plain_rendering_without_tokenizer():
    prompt = build_prompt(REF)
    assert prompt.startswith("System:\n" + SYSTEM_PROMPT)
    assert "\n\nUser:\n" in prompt and REF in prompt and "OUTPUT CONTRACT" in prompt
    assert prompt.endswith("\n\nAssistant:\n")
    assert prompt == render_plain(build_messages(REF))


def test_plain_rendering_passes_options_through():
    assert "Policy partial" in build_prompt(REF, policy="partial")
    assert "add_kernel" not in build_prompt(REF, include_example=False)


def test_object_without_chat_template_method_is_refused():
    with pytest.raises(TypeError, match="apply_chat_template"):
        build_prompt(REF, tokenizer=object())


def _tiny_tokenizer(chat_template: str | None):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    model = tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    wrapped = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    wrapped.chat_template = chat_template
    return wrapped


def test_chat_template_rendering_with_a_real_tokenizer():
    tokenizer = _tiny_tokenizer(CHATML)
    prompt = build_prompt(REF, tokenizer=tokenizer, policy="partial")
    assert prompt.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n")
    assert "<|im_start|>user\n" in prompt and REF in prompt
    assert "Policy partial" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_tokenizer_without_chat_template_is_refused():
    tokenizer = _tiny_tokenizer(None)
    with pytest.raises(ValueError, match="no chat_template"):
        build_prompt(REF, tokenizer=tokenizer)


def test_fenced_never_lets_content_close_it():
    code = "a = 1\n````\nb = 2"
    assert fenced(code).startswith("`````python\n")
    assert extract_code(fenced("```\n" + SOL)) == SOL
