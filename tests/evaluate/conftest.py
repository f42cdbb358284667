"""A run after a short SFT of the tiny model, shared by the evaluation tests."""

import pytest


@pytest.fixture(scope="session")
def sft_run_dir(tmp_path_factory):
    pytest.importorskip("trl")
    from tritonrl.config import load_config
    from tritonrl.train.sft import run_sft

    run_dir = tmp_path_factory.mktemp("eval") / "run"
    run_sft(load_config(None, ["--sft.max_steps", "2", "--data.generated_tasks", "20",
                               "--tiny_model.generated_tasks", "50",
                               "--run.report_to", "[none]"]), run_dir)  # fmt: skip
    return run_dir
