"""What importing the package does to the process: idle OpenMP threads sleep."""

from __future__ import annotations

import os
import subprocess
import sys

_SHOW = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip()


def test_importing_tritonrl_before_torch_makes_openmp_threads_passive():
    assert _run(f"import tritonrl, torch; {_SHOW}") == "PASSIVE"


def test_a_users_setting_and_an_already_imported_torch_are_left_alone():
    assert _run(f"import tritonrl; {_SHOW}", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert _run(f"import torch, tritonrl; {_SHOW}") == "None"
