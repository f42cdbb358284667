"""What importing the package does to the process (idle OpenMP threads sleep), and what
a non-editable install of it holds (the builtin tasks, the named configs, the accelerate
configs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tritonrl

ROOT = Path(__file__).resolve().parents[1]

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


def _wheel(tmp_path: Path) -> Path:
    """A wheel built from a copy of the source tree (the checkout is left as it was)."""
    pytest.importorskip("setuptools", minversion="70.1")  # builds wheels on its own
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src", tree / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", str(tree), "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


def test_a_non_editable_install_resolves_config_names_and_reports_its_version(tmp_path):
    wheel = _wheel(tmp_path)
    assert wheel.name.startswith(f"tritonrl-{tritonrl.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"tritonrl/configs/tiny-cpu.yaml", "tritonrl/configs/qwen7b-1gpu.yaml"} <= set(names)
    assert "tritonrl/tasks/builtin/level1/1_ReLU.py" in names
    shipped = {f"tritonrl/configs/accelerate/{n}.yaml" for n in ("ddp", "zero2", "zero3", "fsdp")}
    assert shipped <= set(names)
    # Installed, the package is found first; the dependencies come from this environment.
    site = tmp_path / "site"
    install = ["install", "--no-deps", "-q", "--target", str(site), str(wheel)]
    subprocess.run([sys.executable, "-m", "pip", *install], check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(site)}
    show = "from tritonrl.config_loader import config_path; print(config_path('tiny-cpu'))"
    found = subprocess.run([sys.executable, "-c", show], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert found.stdout.strip() == str(site / "tritonrl" / "configs" / "tiny-cpu.yaml")
    version = subprocess.run([sys.executable, "-m", "tritonrl", "--version"], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert version.returncode == 0 and version.stdout == f"tritonrl {tritonrl.__version__}\n"
    accelerate = subprocess.run([sys.executable, "-m", "tritonrl", "accelerate-config", "ddp"],
                                env=env, cwd=tmp_path, capture_output=True, text=True,
                                timeout=120)  # fmt: skip
    assert accelerate.stdout.strip() == str(
        site / "tritonrl" / "configs" / "accelerate" / "ddp.yaml"
    )


def test_the_repository_configs_folder_is_the_packaged_one():
    assert (ROOT / "configs").resolve() == (ROOT / "src" / "tritonrl" / "configs").resolve()
    assert (ROOT / "configs" / "tiny-cpu.yaml").is_file()
