"""The `tritonrl` command as a user runs it: a real subprocess, real exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "tasks" / "fixtures"


def tritonrl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonrl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_tasks_list_builtin_levels():
    for level in (1, 2):
        r = tritonrl("tasks", "list", f"builtin:level{level}")
        assert r.returncode == 0, r.stderr
        rows = [line.split("\t") for line in r.stdout.splitlines()]
        assert len(rows) >= 20
        assert all(row[0].startswith(f"builtin:level{level}/") for row in rows)
        assert all(row[1] == str(level) for row in rows)


def test_tasks_list_json_and_a_kernelbench_checkout():
    r = tritonrl("tasks", "list", str(FIXTURES / "kernelbench_like"), "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["level"] for row in rows] == [1, 1, 1, 2, 3]
    assert rows[0]["id"] == "level1/1_Huge_Softmax" and rows[0]["has_solution"] is False


def test_tasks_list_reports_bad_files_and_exits_1():
    r = tritonrl("tasks", "list", str(FIXTURES / "bad_tasks"))
    assert r.returncode == 1
    assert r.stdout.splitlines() == ["level1/1_Good_Tanh\t1\tGood_Tanh"]
    assert "2_Syntax_Error.py: syntax error at line 4" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_usage_exits_2_without_a_traceback():
    r = tritonrl("tasks", "list", "no/such/dir")
    assert r.returncode == 2 and "no such file or directory" in r.stderr
    assert "Traceback" not in r.stderr
    r = tritonrl("tasks", "check", "builtin:level1/1_ReLU", "--device", "tpu")
    assert r.returncode == 2 and "unknown device" in r.stderr


def test_tasks_check_fails_for_tasks_without_solutions():
    r = tritonrl("tasks", "check", str(FIXTURES / "kernelbench_like" / "KernelBench" / "level3"))
    assert r.returncode == 1
    assert "no reference solution" in r.stdout


def test_tasks_check_takes_a_solution_for_a_users_own_task_file(tmp_path):
    from tritonrl.tasks import load_builtin

    relu = load_builtin("level1/1_ReLU").tasks[0]
    task, answer = tmp_path / "my_relu.py", tmp_path / "answer.py"
    task.write_text(relu.source)
    answer.write_text(relu.solution)
    r = tritonrl("tasks", "check", str(task), "--device", "cpu")
    assert r.returncode == 1
    assert "no reference solution (pass --solution FILE, or save it as " in r.stdout
    assert str(tmp_path / "solutions" / "my_relu.py") in r.stdout
    r = tritonrl("tasks", "check", str(task), "--solution", str(answer), "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("PASS my_relu")
    r = tritonrl("tasks", "check", "builtin:level1", "--solution", str(answer))
    assert r.returncode == 2 and "--solution goes with one task" in r.stderr
    r = tritonrl("tasks", "check", str(task), "--solution", str(tmp_path / "none.py"))
    assert r.returncode == 2 and "No such file" in r.stderr


def test_a_task_with_a_syntax_error_says_so_and_nothing_else(tmp_path):
    broken = tmp_path / "7_Broken.py"
    broken.write_text((FIXTURES / "bad_tasks" / "level1" / "2_Syntax_Error.py").read_text())
    r = tritonrl("tasks", "check", str(broken))
    assert r.returncode == 2 and "syntax error at line 4" in r.stderr
    assert "level 1" not in r.stderr and "Traceback" not in r.stderr


def test_version():
    import tritonrl as package

    r = tritonrl("--version")
    assert r.returncode == 0 and r.stdout == f"tritonrl {package.__version__}\n"


@pytest.mark.slow  # every builtin solution through the full verifier
def test_tasks_check_builtin_all_passes():
    """The done-criterion of the builtin suite: every solution against its reference."""
    r = tritonrl("tasks", "check", "builtin:all", "--device", "cpu", "--json", timeout=1200)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    failed = {row["task"]: row["error"] for row in rows if not row["ok"]}
    assert failed == {}
    assert r.returncode == 0, r.stderr
    assert len(rows) >= 40
    # Through the full verifier: at least 5 input sets each, no flag on any solution.
    assert all(len(row["input_sets"]) >= 5 and row["flags"] == [] for row in rows)


def test_verify_batch_streams_one_row_per_case_and_names_bad_lines(tmp_path):
    from tritonrl.tasks import load_builtin

    relu = load_builtin("level1/1_ReLU").tasks[0]
    wrong = relu.solution.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
    lines = [
        json.dumps({"task": relu.id, "kernel": relu.solution}),
        json.dumps({"task": relu.id, "kernel": wrong}),
        "{not json",
        "",
        json.dumps({"task": "builtin:level1/no_such_task", "kernel": relu.solution}),
        json.dumps({"task": relu.id}),
        json.dumps({"task": relu.id, "kernel": relu.solution}),  # a duplicate
    ]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.jsonl"
    r = tritonrl("verify", "--batch", str(cases), "--out", str(out), "--device", "cpu")
    assert r.returncode == 1, r.stderr  # some lines got no verdict
    rows = {row["line"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert sorted(rows) == [1, 2, 3, 5, 6, 7]
    assert [rows[n]["index"] for n in sorted(rows)] == [0, 1, 2, 3, 4, 5]
    assert rows[1]["correct"] and rows[7]["correct"] and not rows[2]["correct"]
    assert rows[2]["stage"] == "correctness" and rows[2]["kernel"] == wrong
    assert all(rows[n]["task"] == relu.id and rows[n]["task_id"] == relu.id for n in (1, 2, 7))
    assert rows[3]["input_error"].startswith("line 3: not valid JSON")
    assert rows[5]["input_error"].startswith("line 5: unknown task 'builtin:level1/no_such_task'")
    assert rows[5]["task"] == "builtin:level1/no_such_task"
    assert rows[6]["input_error"].startswith("line 6: neither 'kernel' nor 'kernel_file' given")
    assert rows[6]["kernel"] is None
    assert "6 cases: 2 correct, 1 not correct, 3 without" in r.stderr
    assert "Traceback" not in r.stderr
    # Never overwritten silently; --force overwrites.
    before = out.read_text()
    again = tritonrl("verify", "--batch", str(cases), "--out", str(out))
    assert again.returncode == 2 and "--force" in again.stderr and out.read_text() == before
    cases.write_text(lines[0] + "\n")
    forced = tritonrl("verify", "--batch", str(cases), "--out", str(out), "--force",
                      "--device", "cpu", "--workers", "1")  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert [json.loads(x)["correct"] for x in out.read_text().splitlines()] == [True]


def test_verify_batch_reads_kernel_file_beside_the_cases_and_names_a_path_given_as_kernel(
    tmp_path,
):
    from tritonrl.tasks import load_builtin

    relu = load_builtin("level1/1_ReLU").tasks[0]
    folder = tmp_path / "batch"
    (folder / "answers").mkdir(parents=True)
    (folder / "answers" / "relu.md").write_text(f"Here:\n```python\n{relu.solution}```\n")
    cases = folder / "cases.jsonl"
    cases.write_text(
        json.dumps({"task": relu.id, "kernel_file": "answers/relu.md"}) + "\n"
        + json.dumps({"task": relu.id, "kernel": "answers/relu.md"}) + "\n"
    )  # fmt: skip
    out = tmp_path / "results.jsonl"
    r = tritonrl("verify", "--batch", str(cases), "--out", str(out), "--device", "cpu",
                 "--workers", "1")  # fmt: skip
    assert r.returncode == 1, r.stderr
    rows = {row["line"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows[1]["correct"] and rows[1]["kernel_file"] == "answers/relu.md"
    assert 'give {"kernel_file": "answers/relu.md"}' in rows[2]["input_error"]
    assert "Traceback" not in r.stderr


def test_verify_batch_usage_errors_exit_2(tmp_path):
    out = tmp_path / "results.jsonl"
    r = tritonrl("verify", "--batch", str(tmp_path / "missing.jsonl"), "--out", str(out))
    assert r.returncode == 2 and "missing.jsonl" in r.stderr and "No such file" in r.stderr
    r = tritonrl("verify", "builtin:level1/1_ReLU", "x.py", "--batch", "c.jsonl", "--out", "o")
    assert r.returncode == 2 and "--batch takes no TASK" in r.stderr
    r = tritonrl("verify", "--batch", "c.jsonl")
    assert r.returncode == 2 and "go together" in r.stderr
    r = tritonrl("verify")
    assert r.returncode == 2 and "give TASK and KERNEL" in r.stderr
    assert not out.exists()


# ------------------------------------------------------------------ config on every command

HANG = Path(__file__).parent / "verify" / "hostile" / "c24_hang_at_import.py"


def test_every_stage_command_takes_config_and_overrides():
    from typer.testing import CliRunner

    from tritonrl.cli import app

    for command in (["verify"], ["tasks", "check"], ["prepare"], ["distill"],
                    ["tiny-model"], ["sft"]):  # fmt: skip
        r = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
        assert r.exit_code == 0 and "--config" in r.output and "FILE|NAME" in r.output, command


def test_rl_help_names_every_section_and_key_a_resumed_rl_may_change():
    import re

    from typer.testing import CliRunner

    from tritonrl.cli import app
    from tritonrl.train.rl import RL_FREE_KEYS, RL_SECTIONS

    r = CliRunner().invoke(app, ["rl", "--help"], terminal_width=400)
    text = re.sub(r"[\s│]+", " ", r.output)  # the help box's wrapping and borders
    for section in RL_SECTIONS:
        assert f" {section}" in text, section
    for section, keys in RL_FREE_KEYS.items():
        for key in keys:
            assert f"{section}.{key}" in text, key


def test_verify_config_and_overrides_set_the_verifiers_timeout(tmp_path):
    """A kernel that hangs at import is killed at the configured wall-clock limit: the
    file's verify.timeout_s, then the override's, given before the positional arguments."""
    config = tmp_path / "quick.yaml"
    config.write_text("verify:\n  device: cpu\n  timeout_s: 3\n")
    task = "builtin:level1/1_ReLU"
    r = tritonrl("verify", "--verify.timeout_s=2", task, str(HANG), "--config", str(config),
                 "--json", timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["timed_out"] and result["device"] == "cpu"
    assert "verify.timeout_s = 2 s" in result["error"]
    r = tritonrl("verify", task, str(HANG), "--config", str(config), "--verify.timeout_s", "0")
    assert r.returncode == 2 and "verify.timeout_s must be positive" in r.stderr
    r = tritonrl("verify", task, str(HANG), "--device", "cpu", "--verify.device", "cpu")
    assert r.returncode == 2 and "--device is short for --verify.device" in r.stderr
    r = tritonrl("verify", task, str(HANG), "extra.py")
    assert r.returncode == 2 and "unexpected argument 'extra.py'" in r.stderr


def test_tasks_check_takes_verify_overrides_among_its_sources():
    r = tritonrl("tasks", "check", "--verify.device", "cpu", "builtin:level1/1_ReLU",
                 "--verify.num_input_sets=3", "--json", "--workers", "1")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads(r.stdout)
    assert row["ok"] and row["device"] == "cpu"
    assert [s.split(":")[0] for s in row["input_sets"]] == ["tiny", "seed_a", "seed_b"]
    r = tritonrl("tasks", "check", "builtin:level1/1_ReLU", "--verify.devise", "cpu")
    assert r.returncode == 2 and "unknown key verify.devise; valid keys of verify:" in r.stderr
    r = tritonrl("tasks", "check", "builtin:level1/1_ReLU", "--verify.trials", "many")
    assert r.returncode == 2 and "verify.trials must be int, not 'many'" in r.stderr


def test_a_config_that_sets_a_removed_key_is_refused_by_every_command(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("data:\n  kernelbook: GPUMODE/KernelBook\n")
    for command in (["verify", "builtin:level1/1_ReLU", str(HANG)],
                    ["tasks", "check", "builtin:level1/1_ReLU"],
                    ["prepare", "--source", "builtin", "--out", str(tmp_path / "o")],
                    ["tiny-model", "--out", str(tmp_path / "m")]):  # fmt: skip
        r = tritonrl(*command, "--config", str(old))
        assert r.returncode == 2, (command, r.stderr)
        assert "old.yaml: data.kernelbook is not used by any command" in r.stderr, command
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "m").exists()
    r = tritonrl("prepare", "--source", "builtin", "--out", str(tmp_path / "o"),
                 "--data.kernelbook", "GPUMODE/KernelBook")  # fmt: skip
    assert r.returncode == 2 and "data.kernelbook is not used by any command" in r.stderr
    assert "prepare --source" in r.stderr


def test_prepare_writes_the_prompts_eval_and_rl_build_for_the_config(tmp_path):
    # data.include_example decides the one-shot example for every stage of a run: SFT's
    # prompts from prepare must be the ones eval asks with (tiny-cpu: no example).
    from tritonrl.data.prompts import build_messages
    from tritonrl.tasks import load_builtin

    for flag, with_example in ((), False), (("--data.include_example", "true"), True):
        out = tmp_path / f"p{int(with_example)}"
        r = tritonrl("prepare", "--source", "builtin", "--out", str(out),
                     "--data.max_samples", "3", *flag)  # fmt: skip
        assert r.returncode == 0, r.stderr
        rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
        task = {t.id: t for t in load_builtin("all").tasks}[rows[0]["task_id"]]
        assert rows[0]["prompt"] == build_messages(task.source, include_example=with_example)


def test_prepare_takes_the_validation_fraction_from_the_config(tmp_path):
    def prepare(out: str, *args: str) -> dict:
        r = tritonrl("prepare", "--source", "builtin", "--out", str(tmp_path / out),
                     "--json", *args)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    # The embedded default (tiny-cpu): data.validation_fraction 0.1, as SFT splits.
    summary = prepare("default", "--data.max_samples", "20")
    assert (summary["val_fraction"], summary["kept"], summary["validation"]) == (0.1, 20, 2)
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  validation_fraction: 0.25\n  max_samples: 20\n")
    summary = prepare("file", "--config", str(config))
    assert (summary["val_fraction"], summary["kept"], summary["validation"]) == (0.25, 20, 5)
    summary = prepare("flag", "--config", str(config), "--val-fraction", "0.5")
    assert (summary["val_fraction"], summary["validation"]) == (0.5, 10)
    r = tritonrl("prepare", "--source", "builtin", "--out", str(tmp_path / "x"),
                 "--val-fraction", "0.2", "--data.validation_fraction", "0.3")  # fmt: skip
    assert r.returncode == 2 and "--val-fraction is short for" in r.stderr
