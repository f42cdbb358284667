"""`tritonrl verify` as a user runs it (`tritonrl.verify.commands`): one kernel under the
config's limits, and `--batch`; a real subprocess, real exit codes."""

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

from cli_process import tritonrl
from tritonrl.verify.client import VerifyClient

HANG = Path(__file__).parent / "hostile" / "c24_hang_at_import.py"


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
    assert r.returncode == 2 and "verify.timeout_s must be a positive, finite" in r.stderr
    r = tritonrl("verify", task, str(HANG), "--device", "cpu", "--verify.device", "cpu")
    assert r.returncode == 2 and "--device is short for --verify.device" in r.stderr
    r = tritonrl("verify", task, str(HANG), "extra.py")
    assert r.returncode == 2 and "unexpected argument 'extra.py'" in r.stderr


def test_serve_answers_health_with_its_token_and_stops_on_sigterm(tmp_path):
    token = tmp_path / "token"
    token.write_text("cmd-token\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tritonrl", "serve", "--port", "0", "--workers", "1",
         "--token-file", str(token), "--max-queue", "7", "--verify.device", "cpu"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        address = re.search(r"serving on (http://\S+)", line)
        assert address, line + proc.stderr.read()
        health = VerifyClient(address.group(1), "cmd-token").health()
        assert health["max_queue"] == 7 and health["workers"] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.stderr.close()


def test_serve_refuses_a_public_address_without_a_token(monkeypatch):
    monkeypatch.delenv("TRITONRL_SERVE_TOKEN", raising=False)
    r = tritonrl("serve", "--host", "0.0.0.0", "--port", "0")
    assert r.returncode == 2 and "not loopback" in r.stderr
