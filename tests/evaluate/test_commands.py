"""`tritonrl eval` on the command line: the tiny LoRA run on builtin tasks (2 samples),
a second run into the finished folder, an API model's eval, and --compare's table and
JSON of both."""

import json

import pytest
from typer.testing import CliRunner

from tritonrl.cli import app

CPU = ["--verify.device", "cpu", "--rl.max_completion_length", "16"]


def _eval(*args: str):
    return CliRunner().invoke(app, ["eval", *args, *CPU], terminal_width=200)


@pytest.fixture(scope="module")
def evals(lora_run, tmp_path_factory):
    """(the run's eval folder, the first CLI result)."""
    out = tmp_path_factory.mktemp("evals") / "run"
    r = _eval("--model", str(lora_run), "--tasks", "builtin:level1", "--limit", "2",
              "--samples", "2", "--out", str(out))  # fmt: skip
    return out, r


def test_the_tiny_run_on_two_builtin_tasks(evals):
    out, r = evals
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["model"], summary["tasks"], summary["samples"]) == ("run/sft", 2, 2)
    o = summary["metrics"]["overall"]
    assert o["n"] == 4 and set(summary["metrics"]["levels"]) == {"1"}
    assert {"pass@1", "pass@2", "valid", "compiled", "correct", "flags"} <= set(o)
    assert o["fast_1"] is None and summary["versions"] and summary["config"]["verify"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(isinstance(row["truncated"], bool) for row in rows)
    assert summary["truncated"] == sum(row["truncated"] for row in rows)
    assert "eval of run/sft: 2 tasks x 2" in r.output and "note: " in r.output


def test_a_second_run_into_a_finished_folder_says_so(evals, lora_run):
    out, _ = evals
    before = (out / "samples.jsonl").read_text()
    r = _eval("--model", str(lora_run), "--tasks", "builtin:level1", "--limit", "2",
              "--samples", "2", "--out", str(out))  # fmt: skip
    assert r.exit_code == 0 and "already holds this finished evaluation" in r.output
    assert (out / "samples.jsonl").read_text() == before
    r = _eval("--model", "openai:x@http://127.0.0.1:9/v1", "--tasks", "builtin:level1",
              "--out", str(out))  # fmt: skip
    assert r.exit_code == 2 and "holds samples of run/sft" in r.output


def test_compare_puts_evaluations_side_by_side(evals, server, tmp_path):
    out, _ = evals
    api = tmp_path / "api"
    r = _eval("--model", f"openai:teacher@{server}", "--tasks", "builtin:level1/1_ReLU",
              "--samples", "2", "--out", str(api))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "2 flagged" in r.output  # the cheat, twice
    r = CliRunner().invoke(app, ["eval", "--compare", str(out), str(api)], terminal_width=250)
    assert r.exit_code == 0, r.output
    cells = [[c.strip() for c in x.split("│")[1:-1]] for x in r.output.splitlines()]
    table = {c[0]: c[1:] for c in cells if c}
    assert table["answers (n)"] == ["4", "2"] and table["flagged"] == ["0", "2"]
    assert table["tasks"] == ["2", "1"] and table["samples per task"] == ["2", "2"]
    assert "asked different tasks (run: 2, api: 1;" in r.output  # not the same questions
    same = CliRunner().invoke(app, ["eval", "--compare", str(out), str(out)], terminal_width=250)
    assert same.exit_code == 0 and "different tasks" not in same.output
    assert table["flag torch_compute"] == ["0", "2"]  # by category
    assert "pass@2" in table and "correct" in table and table["fast_1"] == ["-", "-"]
    assert "run/sft" in r.output and "openai:teacher" in r.output
    r = CliRunner().invoke(app, ["eval", "--compare", str(out), str(api), "--json"])
    rows = json.loads(r.output)
    assert rows[str(api)]["flags"] == {"no_triton_kernel": 2, "torch_compute": 2}
    assert rows[str(out)]["n"] == 4 and rows[str(out)]["correct L1"] == 0.0
    r = CliRunner().invoke(app, ["eval", "--compare", str(tmp_path)])
    assert r.exit_code == 2 and "no summary.json" in r.output


def test_an_api_model_gets_room_to_answer_and_cut_answers_are_counted(server, tmp_path):
    """The config's completion length is its own model's (64 tokens in tiny-cpu): an
    openai: model gets API_MAX_TOKENS unless --max-tokens says otherwise, and answers the
    server cut at the limit (finish_reason "length") are marked, counted and warned of."""
    from eval_loopback import Teacher

    from tritonrl.evaluate.commands import API_MAX_TOKENS

    Teacher.chars_per_token = 4  # this server honours max_tokens
    args = ["eval", "--model", f"openai:teacher@{server}", "--tasks", "builtin:level1/1_ReLU",
            "--verify.device", "cpu"]  # fmt: skip
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "room")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert [b["max_tokens"] for b in Teacher.bodies] == [API_MAX_TOKENS]
    summary = json.loads((tmp_path / "room" / "summary.json").read_text())
    assert summary["truncated"] == 0 and "token limit" not in r.output
    assert summary["config"]["max_completion_length"] == API_MAX_TOKENS
    assert summary["metrics"]["overall"]["flagged"] == 1  # the whole cheat came back

    out = tmp_path / "cut"
    r = CliRunner().invoke(app, [*args, "--max-tokens", "8", "--out", str(out)],
                           terminal_width=200)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert Teacher.bodies[-1]["max_tokens"] == 8
    (row,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert row["truncated"] and len(row["completion"]) == 32
    assert json.loads((out / "summary.json").read_text())["truncated"] == 1
    assert "1 of 1 answers stopped at the token limit (8 new tokens)" in r.output
    assert "--max-tokens" in r.output
    r = CliRunner().invoke(app, [*args, "--max-tokens", "8", "--rl.max_completion_length", "9",
                                 "--out", str(tmp_path / "both")])  # fmt: skip
    assert r.exit_code == 2 and "give one of them" in r.output
