"""`tritonrl tasks list` and `tritonrl tasks check` as a user runs them (`tritonrl.tasks.commands`):
a real subprocess, real exit codes."""

import json
from pathlib import Path

import pytest

from cli_process import tritonrl

FIXTURES = Path(__file__).parent / "fixtures"


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
