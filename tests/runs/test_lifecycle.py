"""A stage's record around its work (`runs.lifecycle.stage`) and the checkpoint it goes
on from (`resume_point`): done, failed with the error, interrupted with the signal."""

import logging

import pytest

from tritonrl.runs import RESUMED, Interrupted, Run
from tritonrl.runs.checkpoint import seal
from tritonrl.runs.lifecycle import record_checkpoint, resume_point, stage


@pytest.fixture
def run(tmp_path) -> Run:
    return Run.create(tmp_path / "run", {"x": 1})


def test_a_block_that_ends_marks_the_stage_done(run):
    with stage(run, "sft"):
        assert run.status("sft") == "running"
    assert Run.open(run.path).status("sft") == "done"


def test_an_error_marks_the_stage_failed_with_it_and_is_raised(run):
    with pytest.raises(ValueError, match="bad data"), stage(run, "sft"):
        raise ValueError("bad data")
    record = Run.open(run.path).stage("sft")
    assert record["status"] == "failed" and record["error"] == "ValueError: bad data"


@pytest.mark.parametrize(
    "raised, signal", [(Interrupted("SIGTERM"), "SIGTERM"), (KeyboardInterrupt(), "SIGINT")]
)
def test_a_signal_marks_the_stage_interrupted_with_it(run, raised, signal):
    with pytest.raises(type(raised)), stage(run, "rl"):
        raise raised
    record = Run.open(run.path).stage("rl")
    assert record["status"] == "interrupted" and record["signal"] == signal


def test_a_done_stage_starts_again_only_when_reopened(run):
    with stage(run, "sft"):
        pass
    with stage(run, "sft", reopen=True):
        assert run.status("sft") == "running"
    assert run.status("sft") == "done"


def test_the_resume_point_is_the_recorded_checkpoint_and_is_noted(run, caplog):
    assert resume_point(run, "sft") is None
    run.start_stage("sft")
    checkpoint = run.stage_dir("sft") / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "weights.bin").write_bytes(b"w")
    seal(checkpoint)
    record_checkpoint(run, "sft", checkpoint, step=2)
    with caplog.at_level(logging.INFO, logger="tritonrl.runs.lifecycle"):
        assert resume_point(run, "sft") == str(checkpoint)
    assert "resuming SFT of" in caplog.text and "(step 2)" in caplog.text
    assert run.stage("sft")["info"][RESUMED] == run.relpath(checkpoint)


def test_a_readonly_run_neither_opens_nor_syncs_the_store(tmp_path):
    from tritonrl.config_loader import load_config
    from tritonrl.runs.lifecycle import stage_services

    Run.create(tmp_path / "run")
    store = tmp_path / "store"
    config = load_config(None, ["--run.store", str(store), "--run.spot_watch", "false"])
    reader = Run.open(tmp_path / "run", readonly=True)
    with stage_services(reader, config) as sync:
        assert sync is None
    assert not store.exists() and Run.open(tmp_path / "run").store is None
    with stage_services(Run.open(tmp_path / "run"), config) as sync:  # rank 0 does both
        assert sync is not None
    assert (store / "run" / "manifest.json").is_file()
