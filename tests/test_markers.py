"""The markers pyproject.toml declares select real tests: `pytest -m "not slow"` leaves out
the ones that take minutes (training a model, the whole builtin suite through the
verifier), as the README says."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_slow_marks_the_tests_that_train_or_check_every_builtin_task():
    files = [
        "tests/tasks/test_tasks_commands.py",
        "tests/test_pipeline.py",
        "tests/train/sft/test_sft.py",
    ]
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "slow", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    slow = {line for line in listed.stdout.splitlines() if "::" in line}
    assert {
        "tests/tasks/test_tasks_commands.py::test_tasks_check_builtin_all_passes",
        "tests/test_pipeline.py::test_prepare_tiny_model_sft_status",
        "tests/train/sft/test_sft.py::test_full_parameter_sft_on_the_cpu",
    } <= slow, listed.stdout + listed.stderr
    assert '-m "not slow"' in (ROOT / "README.md").read_text()
