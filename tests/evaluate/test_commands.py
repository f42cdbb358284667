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
    assert len((out / "samples.jsonl").read_text().splitlines()) == 4
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
    assert table["n"] == ["4", "2"] and table["flagged"] == ["0", "2"]
    assert table["flag torch_compute"] == ["0", "2"]  # by category
    assert "pass@2" in table and "correct" in table and table["fast_1"] == ["-", "-"]
    assert "run/sft" in r.output and "openai:teacher" in r.output
    r = CliRunner().invoke(app, ["eval", "--compare", str(out), str(api), "--json"])
    rows = json.loads(r.output)
    assert rows[str(api)]["flags"] == {"no_triton_kernel": 2, "torch_compute": 2}
    assert rows[str(out)]["n"] == 4 and rows[str(out)]["correct L1"] == 0.0
    r = CliRunner().invoke(app, ["eval", "--compare", str(tmp_path)])
    assert r.exit_code == 2 and "no summary.json" in r.output
