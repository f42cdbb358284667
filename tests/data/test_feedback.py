"""Tests for `tritonrl.data.feedback`: the feedback turn for every stage an answer can
reach, from real verdicts of the verifier (extract, static, compile, correctness, correct
on the CPU) and from verdicts only a GPU gives (timed, run-time findings, limits)."""

from __future__ import annotations

import re

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.data.feedback import (
    ERROR_CHARS,
    RULES,
    feedback_message,
    feedback_text,
    goes_on,
    trim_error,
)
from tritonrl.tasks import load_builtin
from tritonrl.verify.result import CHEAT_FLAGS, InputSetOutcome, VerifyResult

RELU = load_builtin("level1/1_ReLU").tasks[0]
HEAD = "Your answer was verified. Result: "
CHEAT = (
    "```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)\n```"
)
WRONG = RELU.solution.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")
NO_LOAD = RELU.solution.replace("import triton\n", "import triton\nBLOCK = int('1024 elements')\n")
RAISES = RELU.solution.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) + not_defined")
CANDIDATES = {
    "extract": "I would use a Triton kernel, but here is no code.",
    "static": CHEAT,
    "compile": f"```python\n{NO_LOAD}```",
    "correctness": f"```python\n{WRONG}```",
    "run": f"```python\n{RAISES}```",
    "correct": f"```python\n{RELU.solution}```",
}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, VerifyResult]:
    """The real verifier's verdict on each of CANDIDATES (the CPU: nothing timed)."""
    from tritonrl.verify.pool.pool import close_shared_pools, shared_pool

    config = VerifyConfig(device="cpu")
    results = shared_pool(config).verify_many([(RELU, c) for c in CANDIDATES.values()], config)
    yield dict(zip(CANDIDATES, results, strict=True))
    close_shared_pools()


def _said(verdict) -> str:
    text = feedback_text(verdict)
    assert text.startswith(HEAD) and "OUTPUT CONTRACT" in text  # the one template
    assert feedback_message(verdict) == {"role": "user", "content": text}
    assert feedback_text(verdict.to_dict()) == text  # a row's verdict reads the same
    return text


def test_no_code_says_how_an_answer_must_hold_its_code(verdicts):
    v = verdicts["extract"]
    assert v.stage == "extract"
    text = _said(v)
    assert "no code could be read" in text and "```python block" in text


def test_a_static_finding_names_the_rule_by_category_and_no_way_around_it(verdicts):
    v = verdicts["static"]
    assert v.stage == "static" and "torch_compute" in v.flags
    text = _said(v)
    assert "rejected: it breaks the rules (before it ran)" in text
    assert f"- torch_compute: {RULES['torch_compute']}." in text
    # the category and its rule only: nothing of where or how the check found it
    assert not any(note.split(": ", 1)[-1] in text for note in v.notes)
    assert "line" not in text and "torch.relu" not in text


def test_every_cheating_category_has_a_rule():
    assert set(RULES) == set(CHEAT_FLAGS)


def test_a_load_failure_quotes_the_error_without_paths(verdicts):
    v = verdicts["compile"]
    assert v.stage == "compile" and not v.compiled
    text = _said(v)
    assert "it did not compile or load" in text and "invalid literal" in text
    assert not re.search(r"/[\w.-]+/[\w.-]+", text)  # no file paths, the sandbox's or any


def test_a_wrong_answer_names_the_input_set_and_the_error(verdicts):
    v = verdicts["correctness"]
    assert v.stage == "correctness" and v.compiled and not v.correct
    text = _said(v)
    assert "wrong output on input set `tiny` (small shapes)" in text
    assert "elements differ (max abs error" in text
    assert "Find and fix the bug" in text


def test_an_error_while_running_is_quoted_as_an_error(verdicts):
    v = verdicts["run"]
    assert v.stage == "correctness" and v.compiled and not v.correct
    text = _said(v)
    assert "it failed while running on input set `tiny` (small shapes)" in text
    assert "not_defined" in text and "wrong output" not in text


def test_a_correct_untimed_answer_is_told_so(verdicts):
    v = verdicts["correct"]
    assert v.correct and v.speedup is None
    text = _said(v)
    assert "correct on every input set" in text and "not timed here" in text


def test_a_conversation_goes_on_unless_its_answer_is_correct_and_untimed(verdicts):
    assert not goes_on(verdicts["correct"]) and not goes_on(verdicts["correct"].to_dict())
    assert goes_on(verdicts["static"]) and goes_on(verdicts["extract"].to_dict())
    timed = {"stage": "done", "correct": True, "speedup": 1.2}
    assert goes_on(timed)  # asked for a faster kernel
    with pytest.raises(TypeError, match="feedback needs a VerifyResult"):
        goes_on({"correct": True})


def test_a_timed_answer_gets_its_speedup_and_interval_and_is_asked_for_a_faster_one():
    v = VerifyResult(
        task="t",
        device="cuda",
        stage="done",
        compiled=True,
        tiny_correct=True,
        correct=True,
        runtime_ms=0.8,
        ref_runtime_ms=1.0,
        speedup=1.25,
        speedup_ci=(1.1, 1.4),
        reward_speedup=1.25,
    )
    text = _said(v)
    assert "Speedup over the PyTorch reference: 1.25x (95% interval 1.10x to 1.40x)" in text
    assert "0.8 ms against the reference's 1 ms" in text and "Write a faster kernel" in text


def test_a_run_time_finding_and_a_wrong_shape_and_a_limit():
    caching = VerifyResult(
        task="t",
        device="cuda",
        stage="correctness",
        compiled=True,
        flags=["output_caching"],
        error="run-time check: output_caching",
    )
    caching.notes.append("output_caching: seed_b returned seed_a's outputs by pointer")
    text = _said(caching)
    assert "(while it ran)" in text and RULES["output_caching"] in text
    assert "pointer" not in text  # how it was caught stays with the verifier
    shape = VerifyResult(
        task="t",
        device="cuda",
        stage="correctness",
        compiled=True,
        input_sets=[
            InputSetOutcome("tiny", True),
            InputSetOutcome("odd", False, "output 0: shape (6,), expected (7,)"),
        ],
    )
    text = _said(shape)
    assert "input set `odd` (every size moved to an odd value" in text
    assert "shape (6,), expected (7,)" in text
    slow = VerifyResult(
        task="t",
        device="cuda",
        stage="correctness",
        compiled=True,
        timed_out=True,
        limit="timeout",
        error="timed out after 60 s",
        input_sets=[InputSetOutcome("seed_a", False, "timed out")],
    )
    assert "stopped by a limit on input set `seed_a`" in _said(slow)
    assert "time limit" in _said(slow)


def test_errors_are_trimmed_to_what_matters():
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/tmp/tritonrl-sbx-81x/work/candidate.py", line 12, in forward\n\n'
        + "    frame\n" * 200
        + "ValueError: BLOCK must be a power of 2"
    )
    short = trim_error(tb)
    assert len(short) <= ERROR_CHARS and "/tmp" not in short and "candidate.py" in short
    assert short.endswith("ValueError: BLOCK must be a power of 2") and "\n\n" not in short
    assert trim_error(None) == "no message"
    with pytest.raises(TypeError, match="VerifyResult or its to_dict"):
        feedback_text("stage compile")
