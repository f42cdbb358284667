"""Fixtures of the training tests: a tiny run after a short SFT that RL tests start from
(each test copies it). The training commands' app, `train_app`, is in tests/conftest.py."""

import shutil
from pathlib import Path

import pytest

# The tiny-cpu config, cut to a size that trains in well under a minute on 2 cores.
SMALL_DATA = ["--data.generated_tasks", "20", "--tiny_model.generated_tasks", "50"]


@pytest.fixture(scope="session")
def sft_run_template(tmp_path_factory) -> Path:
    """A run whose tiny model had 2 SFT steps on the builtin suite: RL's starting point.
    Do not change it: copy it with the `sft_run` fixture."""
    pytest.importorskip("trl")
    from tritonrl.config_loader import load_config
    from tritonrl.train.sft import run_sft

    run_dir = tmp_path_factory.mktemp("sft") / "run"
    run_sft(load_config(None, ["--sft.max_steps", "2", *SMALL_DATA]), run_dir)
    return run_dir


@pytest.fixture
def sft_run(sft_run_template, tmp_path) -> Path:
    """A fresh copy of `sft_run_template` for one test (a run directory can be moved)."""
    run_dir = tmp_path / "run"
    shutil.copytree(sft_run_template, run_dir)
    return run_dir
