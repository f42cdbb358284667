"""The `tritonrl` command as a user runs it: a real subprocess, real exit codes."""

import json
import subprocess
import sys
from pathlib import Path

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
