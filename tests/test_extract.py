"""Tests for `tritonrl.extract`: the shapes model output takes, and the rules that pick code.

Every case is a realistic completion; the builtin ReLU solution is the kernel, so a
success is checked byte for byte.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tritonrl
from tritonrl.extract import ExtractError, extract_code, kernel_key, try_extract

BUILTIN = Path(tritonrl.__file__).parent / "tasks" / "builtin"
SOL = (BUILTIN / "solutions" / "level1" / "1_ReLU.py").read_text()
REF = (BUILTIN / "level1" / "1_ReLU.py").read_text()
KERNEL_PART, CLASS_PART = SOL.split("class ModelNew", 1)
CLASS_PART = "class ModelNew" + CLASS_PART
SOL_NO_DOC = SOL.split('"""\n', 1)[1].lstrip("\n")  # the solution without its docstring

SCRATCH = "```python\nx = torch.randn(4)\nprint(torch.relu(x))\n```\n"
DRAFT = "```python\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n```\n"


def fence(code: str, lang: str = "python", ticks: str = "```") -> str:
    return f"{ticks}{lang}\n{code}{ticks}\n"


def defines_model_new(code: str) -> bool:
    tree = ast.parse(code)
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def error_of(completion) -> str:
    with pytest.raises(ExtractError) as info:
        extract_code(completion)
    return str(info.value)


# ---------------------------------------------------------------- plain shapes


def test_raw_code_is_returned_unchanged():
    assert extract_code(SOL) == SOL


@pytest.mark.parametrize("lang", ["python", "py", "Python", "python3", "triton", ""])
def test_backtick_fence_any_language_tag(lang):
    completion = "Here is the optimized kernel:\n\n" + fence(SOL, lang) + "\nIt is fast."
    assert extract_code(completion) == SOL


@pytest.mark.parametrize("lang", ["python", ""])
def test_tilde_fence(lang):
    assert extract_code("Answer:\n" + fence(SOL, lang, "~~~")) == SOL


def test_four_backtick_fence_holding_three_backticks():
    code = SOL.replace('"""Triton', '"""Usage:\n```\nModelNew()(x)\n```\nTriton', 1)
    completion = "Final answer:\n" + fence(code, "python", "````") + "Done."
    assert extract_code(completion) == code


def test_qwen_style_answer_with_prose_around():
    completion = (
        "To optimize this, I'll write a Triton kernel that applies ReLU element-wise.\n\n"
        + fence(SOL)
        + "\n### Explanation\n1. Each program handles BLOCK elements.\n2. Masks guard the tail.\n"
    )
    assert extract_code(completion) == SOL


def test_deepseek_r1_style_long_reasoning_without_opener():
    # R1's template puts <think> in the prompt: the completion starts inside reasoning.
    reasoning = "Okay, so I need to write a ReLU kernel. Let me think. " * 2000
    completion = reasoning + "\n" + DRAFT + "Wait, that's wrong.\n</think>\n\n" + fence(SOL)
    assert extract_code(completion + "<｜end▁of▁sentence｜>") == SOL


def test_think_block_code_is_ignored_when_an_answer_follows():
    completion = f"<think>\nFirst try:\n{DRAFT}Hmm.\n</think>\nFinal:\n{fence(SOL)}"
    assert extract_code(completion) == SOL


def test_qwen3_style_think_then_answer_with_chat_tokens():
    completion = "<think>\nplan: one program per block\n</think>\n\n" + fence(SOL) + "<|im_end|>"
    assert extract_code(completion) == SOL


# ---------------------------------------------------------------- choosing among blocks


def test_last_model_new_block_wins_over_scratch_and_reference():
    completion = (
        "The reference is:\n"
        + fence(REF)
        + "Quick check:\n"
        + SCRATCH
        + "A first draft:\n"
        + DRAFT
        + "The final version:\n"
        + fence(SOL)
        + "Usage:\n```python\nm = ModelNew()\n```\n"
    )
    assert extract_code(completion) == SOL


def test_closed_broken_final_block_is_reported_not_replaced_by_a_draft():
    broken = SOL.replace("mask = offs < n_elements", "mask = (offs < n_elements")
    completion = fence(SOL) + "Improved:\n" + fence(broken)
    message = error_of(completion)
    assert "does not parse" in message
    assert "line 13" in message  # the unclosed parenthesis
    assert "```python block 2 of 2" in message


def test_unterminated_final_fence_is_taken_when_it_parses():
    assert extract_code("Here it is:\n```python\n" + SOL) == SOL


def test_unterminated_fence_with_trailing_prose_loses_only_the_prose():
    completion = "```python\n" + SOL + "\nThis kernel fuses nothing but it is fast.\n"
    assert extract_code(completion) == SOL


def test_unterminated_fence_cut_mid_code_falls_back_to_an_earlier_complete_block():
    cut = SOL[: SOL.index("relu_kernel[(")] + "relu_kernel[(triton.cd"
    completion = "Version 1:\n" + fence(SOL) + "Let me improve it:\n```python\n" + cut
    assert extract_code(completion) == SOL


def test_unterminated_fence_cut_mid_class_without_earlier_block_is_an_error():
    cut = SOL[: SOL.index("relu_kernel[(")] + "relu_kernel[(triton.cd"
    message = error_of("```python\n" + cut)
    assert "never closed" in message and "does not parse" in message
    assert "line 27" in message


def test_trailing_statements_of_a_cut_off_block_are_dropped_but_never_the_class():
    cut = SOL + "\n\ndef get_inputs():\n    return [torch.randn(64, 1024"
    assert extract_code("```python\n" + cut) == SOL


def test_nested_fences_inside_a_markdown_fence():
    completion = "````markdown\n# Answer\n" + fence(SOL) + "````\n"
    assert extract_code(completion) == SOL


# ---------------------------------------------------------------- split answers


def test_kernel_and_model_new_in_separate_blocks_are_joined():
    completion = (
        "First the kernel:\n" + fence(KERNEL_PART) + "\nThen the module:\n" + fence(CLASS_PART)
    )
    code = extract_code(completion)
    assert defines_model_new(code)
    assert code.index("def relu_kernel") < code.index("class ModelNew")
    assert "import triton.language as tl" in code
    assert '"""Triton solution' not in code  # only definitions are borrowed
    namespace: dict = {}
    exec(compile(code, "<joined>", "exec"), namespace)  # every name resolves at import
    assert {"ModelNew", "relu_kernel", "triton", "tl", "torch", "nn"} <= set(namespace)


def test_joined_answer_runs_under_the_triton_interpreter():
    completion = fence(KERNEL_PART) + "and\n" + fence(CLASS_PART)
    code = extract_code(completion)
    script = code + textwrap.dedent(
        """
        x = torch.randn(3, 1000)
        assert torch.equal(ModelNew()(x), torch.relu(x))
        print("ok")
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_split_answer_never_borrows_from_the_echoed_reference():
    # the ModelNew block forgot its imports; only the reference has them
    completion = "Reference:\n" + fence(REF) + "Kernel:\n" + fence(KERNEL_PART.split("@", 1)[1])
    completion = completion.replace("```python\ntriton.jit", "```python\n@triton.jit")
    completion += fence(CLASS_PART)
    code = extract_code(completion)
    assert "class Model(" not in code and "get_inputs" not in code and "batch_size" not in code
    assert code.index("def relu_kernel") < code.index("class ModelNew")


def test_split_answer_keeps_future_import_first():
    completion = fence(KERNEL_PART) + fence("from __future__ import annotations\n\n" + CLASS_PART)
    code = extract_code(completion)
    assert code.startswith("from __future__ import annotations\n")
    ast.parse(code)


def test_fix_written_after_the_model_new_block_is_not_merged():
    later = "```python\n@triton.jit\ndef relu_kernel(x_ptr):\n    pass\n```\n"
    assert extract_code(fence(SOL) + "Or simpler:\n" + later) == SOL


# ---------------------------------------------------------------- tags and raw text


@pytest.mark.parametrize("tag", ["code", "triton", "python", "answer"])
def test_xml_style_tags(tag):
    completion = f"Sure.\n<{tag}>\n{SOL}</{tag}>\nDone."
    assert extract_code(completion) == SOL


def test_html_escaped_code_in_tags():
    escaped = SOL.replace("<", "&lt;").replace(">", "&gt;")
    assert extract_code(f'<code lang="python">{escaped}</code>') == SOL


def test_raw_code_with_prose_before_and_after():
    completion = (
        "Here's an optimized version of the model using Triton:\n\n"
        + SOL
        + "\nThis implementation launches one program per 1024 elements.\n"
        "- It masks the tail.\n**Note:** inputs are made contiguous first.\n"
    )
    assert extract_code(completion) == SOL


def test_raw_code_split_by_prose_is_joined():
    completion = (
        "First, the imports and the kernel:\n"
        + KERNEL_PART
        + "Now the module that launches it:\n"
        + CLASS_PART
        + "That's all."
    )
    code = extract_code(completion)
    assert defines_model_new(code)
    assert code.index("def relu_kernel") < code.index("class ModelNew")


def test_bare_words_around_raw_code_are_dropped():
    assert extract_code("Solution\n\n" + SOL + "\nEnd\n") == SOL


def test_raw_code_after_a_fenced_reference():
    completion = "The reference:\n" + fence(REF) + "My answer follows.\n\n" + SOL
    assert extract_code(completion) == SOL


# ---------------------------------------------------------------- text hygiene


def test_crlf_line_endings():
    completion = ("Answer:\n" + fence(SOL)).replace("\n", "\r\n")
    assert extract_code(completion) == SOL


def test_tab_indented_code():
    tabbed = SOL.replace("    ", "\t")
    assert extract_code(fence(tabbed)) == tabbed


def test_mixed_tab_and_space_indentation_is_repaired():
    mixed = SOL.replace("        x = x.contiguous()", "\t\tx = x.contiguous()")
    code = extract_code(fence(mixed))
    assert defines_model_new(code) and "\t" not in code


def test_whole_block_indented_inside_a_list_item():
    completion = "1. The kernel:\n\n" + textwrap.indent(fence(SOL), "   ") + "2. Done.\n"
    assert extract_code(completion) == SOL


def test_byte_order_mark_zero_width_space_and_nbsp():
    code = SOL.replace("n = x.numel()", "n\u00a0= x.numel()\u200b")
    assert extract_code("\ufeff" + fence(code)) == SOL


@pytest.mark.parametrize(
    "leftover", ["<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|im_end|><|endoftext|>" * 5]
)
def test_chat_template_leftovers(leftover):
    assert extract_code(fence(SOL) + leftover) == SOL
    assert extract_code(SOL + leftover) == SOL


def test_model_that_runs_past_its_turn_keeps_its_first_answer():
    completion = (
        fence(SOL)
        + "<|im_end|>\n<|im_start|>user\nNow make it faster.<|im_end|>\n"
        + "<|im_start|>assistant\n"
        + DRAFT
    )
    assert extract_code(completion) == SOL


def test_decoded_prompt_and_completion_takes_the_assistant_turn():
    transcript = (
        "<|im_start|>system\nYou write Triton.<|im_end|>\n<|im_start|>user\n"
        + "Example answer:\n"
        + DRAFT
        + fence(REF)
        + "<|im_end|>\n<|im_start|>assistant\n"
        + fence(SOL)
        + "<|im_end|>\n<|endoftext|>"
    )
    assert extract_code(transcript) == SOL


def test_lenient_fences_glued_to_prose_and_code():
    completion = "Here is the code:```python\n" + SOL.rstrip("\n") + "```\nDone."
    assert extract_code(completion) == SOL


def test_bytes_input():
    assert extract_code(("```python\n" + SOL + "```").encode()) == SOL


def test_non_utf8_bytes_never_crash():
    code, error = try_extract(b"\xff\xfe\x80" + SOL.encode() + b"\xc3\x28")
    assert error is None and code == SOL_NO_DOC.rstrip("\n") + "\n"
    code, error = try_extract(bytes(range(256)) * 10)
    assert code is None and "no code defining class ModelNew" in error


def test_output_is_normalised():
    code = extract_code("\n\n```python\n\n\n" + SOL + "\n\n\n```")
    assert code == SOL and not code.startswith("\n") and code.endswith("y\n")


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("completion", ["", "   \n\t\n", b""])
def test_empty_completion(completion):
    assert error_of(completion) == "the completion is empty"


def test_only_prose_is_an_error():
    message = error_of("I would use a Triton kernel with a mask for the tail. Hope this helps!")
    assert message.startswith("no code defining class ModelNew found in the completion")
    assert "looked at 0 fenced blocks" in message


def test_error_counts_the_blocks_it_looked_at():
    message = error_of(fence(REF) + SCRATCH + fence("ls -l", "bash"))
    assert "looked at 3 fenced blocks [bash, python]" in message
    assert "class Model (the reference)" in message


def test_model_new_only_inside_think_is_an_error():
    message = error_of(f"<think>\n{fence(SOL)}</think>\nThe code above is my answer.")
    assert "only inside the <think> reasoning" in message


def test_unclosed_think_is_an_error_even_with_code_inside():
    message = error_of("<think>\nLet me draft it.\n" + fence(SOL) + "Now let me check the mask")
    assert "unclosed <think>" in message and "max tokens" in message


def test_unclosed_think_after_an_answer_keeps_the_answer():
    assert extract_code(fence(SOL) + "<think>\nShould I also tune BLOCK? Let") == SOL


def test_model_new_not_at_top_level():
    nested = "import torch\nif True:\n" + textwrap.indent(CLASS_PART, "    ")
    assert "not defined at the top level" in error_of(fence(nested))


def test_too_large_candidate():
    huge = SOL + "# padding\n" * 30_000
    assert "too large" in error_of(fence(huge))


@pytest.mark.parametrize("bad", [None, 42, ["a"]])
def test_try_extract_never_raises(bad):
    code, error = try_extract(bad)
    assert code is None and "must be str or bytes" in error


def test_try_extract_success():
    assert try_extract(fence(SOL)) == (SOL, None)


# ---------------------------------------------------------------- speed on huge inputs

TEN_MB = 10 * 1024 * 1024
# Shapes a real (if broken) generation can take: about a second at most, here.
REALISTIC = {
    "long reasoning then answer": lambda: (
        "<think>\n" + "We could tile this. " * (TEN_MB // 20) + "\n</think>\n" + fence(SOL)
    ),
    "prose then raw code": lambda: ("Some words here.\n" * (TEN_MB // 17)) + SOL,
    "many scratch blocks then answer": lambda: SCRATCH * (TEN_MB // len(SCRATCH)) + fence(SOL),
    "many drafts then answer": lambda: DRAFT * (TEN_MB // len(DRAFT)) + fence(SOL),
    "unclosed think": lambda: "<think>" + "x" * TEN_MB,
    "no newline prose": lambda: "word " * (TEN_MB // 5),
    "repeated answer loop": lambda: fence(SOL) * (TEN_MB // len(fence(SOL))),
}
# Hostile shapes aimed at quadratic scans and regex backtracking; a few Python-level
# operations per fence line (2.6 million of them): seconds, not the hours a quadratic
# scan would take; the bound is loose for a shared two-core machine.
HOSTILE = {
    "think openers": lambda: "<think>a" * (TEN_MB // 8),
    "tag openers then answer": lambda: "<code>x " * (TEN_MB // 8) + fence(SOL),
    "fence lines": lambda: "```\n" * (TEN_MB // 4),
    "fence lines then answer": lambda: "```\n" * (TEN_MB // 4) + fence(SOL),
    "one huge line": lambda: "```" + " " * TEN_MB + "`",
    "backtick storm": lambda: "`" * TEN_MB,
    "code storm then class": lambda: "x = (1,\n" * (TEN_MB // 8) + CLASS_PART,
    "nested fences": lambda: "````\n```\n" * (TEN_MB // 9),
    "glued fences": lambda: "a```\n" * (TEN_MB // 5) + SOL,
}


def _timed(make) -> tuple[str | None, str | None, float]:
    completion = make()
    assert len(completion) >= TEN_MB * 0.9
    start = time.perf_counter()
    code, error = try_extract(completion)
    elapsed = time.perf_counter() - start
    assert (code is None) != (error is None)
    return code, error, elapsed


@pytest.mark.parametrize("shape", sorted(REALISTIC))
def test_ten_megabyte_realistic_completions_are_fast(shape):
    code, error, elapsed = _timed(REALISTIC[shape])
    assert elapsed < 5.0, f"{shape}: {elapsed:.2f}s"
    if "answer" in shape or "then" in shape:
        assert code == SOL, error


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_ten_megabyte_hostile_completions_stay_linear(shape):
    code, error, elapsed = _timed(HOSTILE[shape])
    assert elapsed < 15.0, f"{shape}: {elapsed:.2f}s"
    if "answer" in shape:
        assert code == SOL, error
    if shape == "code storm then class":
        assert "too large" in error


def test_a_parse_hit_by_cpythons_recursion_depth_mismatch_is_tried_again(monkeypatch):
    # CPython 3.11 (gh-106905) can fail a parse with this SystemError when another thread
    # parsed at the same time; it cannot be produced on demand, so the parser raises it
    # once here. Any other SystemError is not hidden.
    import ast

    from tritonrl.extract import common

    real, calls = ast.parse, []

    def flaky(source, *args, **kwargs):
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=2, after=3)")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", flaky)
    tree, error = common.parse("x = 1\n")
    assert error is None and isinstance(tree, ast.Module) and len(calls) == 2

    def broken(source, *args, **kwargs):
        raise SystemError("something else")

    monkeypatch.setattr(ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        common.parse("x = 1\n")


def test_kernel_key_sets_comments_and_formatting_aside():
    kernel = (
        "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x * 2\n"
    )
    first = f"Here it is:\n```python\n{kernel}```"
    again = (
        "<think>the same again</think>\n```python\n# unchanged\n"
        + kernel.replace("x * 2", "x*2  # twice").replace("\n\n", "\n\n\n")
        + "```"
    )
    assert kernel_key(first) is not None and kernel_key(first) == kernel_key(again)
    changed = first.replace("x * 2", "x * 3")
    assert kernel_key(changed) != kernel_key(first)
    assert kernel_key("no code here, sorry") is None


KERNEL_WITH_DOCS = '''"""Triton solution (generated): SiLU -> Abs over 2-D tiles, fused."""
import torch
import triton
import triton.language as tl


@triton.jit
def silu_abs(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """One tile."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.abs(x * tl.sigmoid(x)), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        silu_abs[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
'''


def _answer(code: str) -> str:
    return f"```python\n{code}```"


def test_kernel_key_sees_through_a_docstring_edit_and_renamed_names():
    # What GRPO with feedback turns learnt in place of copying its kernel verbatim: the
    # same code under a reworded docstring ("Here's a faster solution").
    reworded = KERNEL_WITH_DOCS.replace(
        "SiLU -> Abs over 2-D tiles", "fused SiLU -> Abs, one pass, faster"
    ).replace('    """One tile."""\n', "")
    renamed = (
        KERNEL_WITH_DOCS.replace("silu_abs", "fused_kernel")
        .replace("offs", "idx")
        .replace("BLOCK", "BLOCK_SIZE")
        .replace("out_ptr", "y_ptr")
        .replace("import triton.language as tl", "import triton.language as tlang")
        .replace("tl.", "tlang.")
    )
    key = kernel_key(_answer(KERNEL_WITH_DOCS))
    assert kernel_key(_answer(reworded)) == key
    assert kernel_key(_answer(renamed)) == key


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("BLOCK=1024", "BLOCK=512"),  # a tuning change
        ("triton.cdiv(n, 1024)", "triton.cdiv(n, 512)"),
        ("tl.abs(x * tl.sigmoid(x))", "tl.abs(x * tl.sigmoid(x) + 0.0)"),
        ("tl.sigmoid", "tl.exp"),  # another library function: not a name it binds
        ("mask=mask)\n    tl.store", "mask=mask, other=0.0)\n    tl.store"),
        ("import triton.language as tl", "import triton.language as tl\nfrom math import e"),
    ],
)
def test_kernel_key_still_tells_a_changed_kernel(old, new):
    assert old in KERNEL_WITH_DOCS
    changed = KERNEL_WITH_DOCS.replace(old, new)
    assert kernel_key(_answer(changed)) != kernel_key(_answer(KERNEL_WITH_DOCS))


def test_kernel_key_keeps_what_an_import_names():
    # `from m import a` and `from m import b` bind different names to different things.
    first = "from torch import amax as f\n\nclass ModelNew:\n    def forward(self, x):\n" \
        "        return f(x)\n"  # fmt: skip
    assert kernel_key(_answer(first)) != kernel_key(_answer(first.replace("amax", "amin")))
    renamed = first.replace("as f", "as g").replace("f(x)", "g(x)")
    assert kernel_key(_answer(first)) == kernel_key(_answer(renamed))
