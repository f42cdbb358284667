"""The run manifest: lifecycle, artifact lookup errors, atomic writes under a real crash,
no lost updates between processes, and the `status` command's output."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import typer
from typer.testing import CliRunner

from tritonrl.pipeline import continue_pipeline
from tritonrl.runs import MANIFEST, PIPELINE, ArtifactNotFound, Run, RunError
from tritonrl.runs.commands import register


def _file(run: Run, rel: str, text: str = "x") -> str:
    path = run.path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return rel


def test_create_records_config_versions_and_pending_stages(tmp_path):
    run = Run.create(tmp_path / "r", {"sft": {"learning_rate": 1e-5}})
    again = Run.open(tmp_path / "r")
    assert again.config == {"sft": {"learning_rate": 1e-5}}
    assert again.resumed_from() is None and "resumed_from" not in again.data  # one home
    assert set(again.data["versions"]) == {
        "python",
        "torch",
        "triton",
        "transformers",
        "trl",
        "peft",
    }
    assert again.data["versions"]["torch"].startswith("2.")
    assert list(again.stages) == list(PIPELINE)
    assert all(s["status"] == "pending" and s["step"] == 0 for s in again.stages.values())
    assert run.path == again.path


def test_create_refuses_an_existing_run_and_open_refuses_a_non_run(tmp_path):
    Run.create(tmp_path / "r")
    with pytest.raises(RunError, match="already holds a run"):
        Run.create(tmp_path / "r")
    with pytest.raises(RunError, match="does not exist: it is not a run directory"):
        Run.open(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match="has no manifest.json"):
        Run.open(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / MANIFEST).write_text("{not json")
    with pytest.raises(RunError, match="cannot be read as JSON"):
        Run.open(tmp_path / "bad")


def test_stage_lifecycle(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.set_step("sft", 50)
    run.add_artifact("sft", "checkpoint", _file(run, "sft/checkpoints/checkpoint-50/w"))
    run.add_artifact("sft", "adapter", run.path / _file(run, "sft/final/a"))  # absolute ok
    run.set_info("sft", first_loss=2.5)
    run.finish_stage("sft")
    stage = Run.open(run.path).stage("sft")
    assert stage["status"] == "done" and stage["step"] == 50
    assert stage["artifacts"] == {
        "checkpoint": "sft/checkpoints/checkpoint-50/w",
        "adapter": "sft/final/a",
    }
    assert stage["info"] == {"first_loss": 2.5}
    assert stage["started_at"] and stage["finished_at"] and stage["error"] is None
    assert run.artifact("sft", "adapter") == run.path / "sft/final/a"
    with pytest.raises(RunError, match="already done; start a new run"):
        run.start_stage("sft")
    run.start_stage("sft", reopen=True)  # its budget was raised: it continues
    assert Run.open(run.path).stage("sft")["status"] == "running"


def test_an_interrupted_stage_records_its_signal_and_resumes(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.add_artifact("sft", "checkpoint", _file(run, "sft/checkpoints/checkpoint-8/w"))
    run.set_step("sft", 8)
    run.interrupt_stage("sft", "SIGTERM")
    stage = Run.open(run.path).stage("sft")
    assert stage["status"] == "interrupted" and stage["signal"] == "SIGTERM"
    assert stage["error"].startswith("interrupted by SIGTERM at step 8 (last checkpoint sft/")
    assert stage["finished_at"]
    run.start_stage("sft")  # an interrupted stage runs again (the resume)
    stage = Run.open(run.path).stage("sft")
    assert stage["status"] == "running" and stage["signal"] is None and stage["error"] is None


def test_resumed_from_is_read_from_the_stage_that_resumed(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    assert run.resumed_from() is None
    run.set_info("sft", resumed_from_checkpoint="sft/checkpoints/checkpoint-8")
    assert Run.open(run.path).resumed_from() == {
        "stage": "sft",
        "step": 8,
        "checkpoint": "sft/checkpoints/checkpoint-8",
    }
    run.start_stage("sft")  # a new attempt: it records its own resume point, if any
    assert Run.open(run.path).resumed_from() is None


def test_a_run_restored_into_a_stage_without_a_checkpoint_says_so(tmp_path):
    """sft resumed from a checkpoint on the first machine; the run was then restored from
    the store while rl had no checkpoint yet: rl, from the store, not sft's old resume."""
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.set_info("sft", resumed_from_checkpoint="sft/checkpoints/checkpoint-14")
    run.finish_stage("sft")
    run.set_fields(restored_from={"store": "s3://b/runs/r", "stage": "rl", "step": 0,
                                  "at": "2026-11-25T00:00:00+00:00"})  # fmt: skip
    run.start_stage("rl")
    assert Run.open(run.path).resumed_from() == {
        "stage": "rl",
        "step": 0,
        "checkpoint": None,
        "store": "s3://b/runs/r",
    }
    run.set_info("rl", resumed_from_checkpoint="rl/checkpoints/checkpoint-4")  # later
    assert Run.open(run.path).resumed_from() == {
        "stage": "rl", "step": 4, "checkpoint": "rl/checkpoints/checkpoint-4",
        "store": "s3://b/runs/r",
    }  # fmt: skip


def test_replace_config(tmp_path):
    run = Run.create(tmp_path / "r", {"sft": {"max_steps": 20}})
    run.replace_config({"sft": {"max_steps": 25}})
    assert Run.open(run.path).config == {"sft": {"max_steps": 25}}


def test_a_new_stage_is_added_when_it_starts(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("best_of_n")
    assert Run.open(run.path).stages["best_of_n"]["status"] == "running"
    run.start_stage("tiny_model")
    run.start_stage("zeta")  # a stage of no known place goes last
    run.start_stage("distill")
    assert list(Run.open(run.path).stages) == [
        "prepare", "distill", "tiny_model", "sft", "best_of_n", "rl", "eval", "zeta"]  # fmt: skip
    with pytest.raises(RunError, match="not valid"):
        run.start_stage("../escape")


def test_stages_read_in_the_order_they_run_whatever_order_the_manifest_wrote(tmp_path):
    run = Run.create(tmp_path / "r")
    manifest = json.loads((run.path / "manifest.json").read_text())
    manifest["stages"]["distill"] = manifest["stages"]["prepare"]  # an older tritonrl's place
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    run = Run.open(run.path)
    assert list(run.stages) == ["prepare", "distill", "sft", "rl", "eval"]
    assert list(run.status_dict()["stages"]) == list(run.stages)


def test_fail_stage_keeps_artifacts_and_error(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.add_artifact("sft", "checkpoint", _file(run, "sft/ck"))
    run.fail_stage("sft", "RuntimeError: out of memory")
    stage = Run.open(run.path).stage("sft")
    assert stage["status"] == "failed"
    assert stage["error"] == "RuntimeError: out of memory"
    assert stage["artifacts"] == {"checkpoint": "sft/ck"}
    run.start_stage("sft")  # a failed stage may run again (resume)
    assert Run.open(run.path).stage("sft")["error"] is None


def test_artifact_lookup_names_stage_artifact_and_what_is_recorded(tmp_path):
    """The prototype's bug: RL saved to `rl_best_of_n`, eval read `rl_final`."""
    run = Run.create(tmp_path / "r")
    run.start_stage("rl")
    run.add_artifact("rl", "best_of_n", _file(run, "rl/best_of_n/model"))
    with pytest.raises(ArtifactNotFound) as e:
        run.artifact("rl", "final")
    message = str(e.value)
    assert "rl/final" in message and "rl/best_of_n" in message and "running" in message
    with pytest.raises(ArtifactNotFound, match="has no stage 'grpo'.*stages: prepare"):
        run.artifact("grpo", "model")
    with pytest.raises(ArtifactNotFound, match="records: none"):
        run.artifact("sft", "adapter")
    (run.path / "rl/best_of_n/model").unlink()
    with pytest.raises(ArtifactNotFound, match="does not exist"):
        run.artifact("rl", "best_of_n")


def test_add_artifact_refuses_missing_files_and_paths_outside_the_run(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    with pytest.raises(RunError, match="does not exist; write the artifact before"):
        run.add_artifact("sft", "model", "sft/final")
    outside = tmp_path / "elsewhere.bin"
    outside.write_text("x")
    with pytest.raises(RunError, match="outside the run directory"):
        run.add_artifact("sft", "model", outside)
    with pytest.raises(RunError, match="outside the run directory"):
        run.add_artifact("sft", "model", "../elsewhere.bin")
    with pytest.raises(RunError, match="no stage 'nope'"):
        run.add_artifact("nope", "model", _file(run, "f"))
    assert Run.open(run.path).stage("sft")["artifacts"] == {}


def test_a_value_that_cannot_be_written_leaves_the_manifest_as_it_was(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    before = (run.path / MANIFEST).read_bytes()
    with pytest.raises(TypeError):
        run.set_info("sft", loss=object())  # not JSON
    assert (run.path / MANIFEST).read_bytes() == before
    assert sorted(p.name for p in run.path.iterdir()) == [".manifest.lock", MANIFEST]


def test_a_nan_or_infinite_value_is_recorded_as_a_string_in_strict_json(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.set_info("sft", loss=float("nan"), losses=[1.5, float("inf"), -float("inf")])

    def refuse(name):
        raise ValueError(f"{name} in the manifest")

    data = json.loads((run.path / MANIFEST).read_text(), parse_constant=refuse)
    assert data["stages"]["sft"]["info"] == {"loss": "nan", "losses": [1.5, "inf", "-inf"]}
    assert math.isnan(float(data["stages"]["sft"]["info"]["loss"]))  # float() reads it back


WRITER = textwrap.dedent(
    """
    import sys
    from tritonrl.runs import Run
    run = Run.open(sys.argv[1])
    i = 0
    while True:
        i += 1
        run.set_info("sft", blob=str(i % 10) * (1_000_000 + 100_000 * (i % 7)), i=i)
    """
)


def test_a_crash_mid_write_leaves_a_readable_manifest(tmp_path):
    """A writer rewrites a ~1 MB manifest in a loop; it is read meanwhile and killed with
    SIGKILL. Every read, and the manifest after the kill, is whole JSON."""
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(run.path)])
    reads = 0
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                data = json.loads((run.path / MANIFEST).read_text())
            except FileNotFoundError:  # pragma: no cover - replace never removes it
                pytest.fail("manifest missing during a rewrite")
            info = data["stages"]["sft"]["info"]
            if info:
                assert info["blob"] == info["blob"][0] * len(info["blob"])
                reads += 1
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert reads > 0, "the writer never wrote"
    info = Run.open(run.path).stage("sft")["info"]
    assert len(info["blob"]) == 1_000_000 + 100_000 * (info["i"] % 7)


ADDER = textwrap.dedent(
    """
    import sys
    from tritonrl.runs import Run
    run = Run.open(sys.argv[1])
    for i in range(25):
        run.set_info("sft", **{f"{sys.argv[2]}{i}": i})
    """
)


def test_concurrent_writers_lose_no_update(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(run.path), tag]) for tag in "ab"]
    assert [p.wait() for p in procs] == [0, 0]
    assert len(Run.open(run.path).stage("sft")["info"]) == 50


def test_a_stage_running_in_a_live_process_cannot_start_twice(tmp_path):
    run = Run.create(tmp_path / "r")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from tritonrl.runs import Run; Run.open(sys.argv[1])"
            ".start_stage('sft'); print('started', flush=True); time.sleep(60)",
            str(run.path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "started"
        with pytest.raises(RunError, match=f"running in process {child.pid}"):
            run.start_stage("sft")
    finally:
        child.kill()
        child.wait()
    run.start_stage("sft")  # its owner is gone: a resume may take it over


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main():  # a group, so that `status` is a sub-command as in tritonrl
        pass

    register(app, continue_pipeline)
    return app


def test_status_json_shape(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.set_step("sft", 7)
    result = CliRunner().invoke(_app(), ["status", str(run.path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"stages", "resumed_from", "store"}
    assert data["resumed_from"] is None and data["store"] is None
    run.set_info("sft", resumed_from_checkpoint="sft/checkpoints/checkpoint-6")
    again = CliRunner().invoke(_app(), ["status", str(run.path), "--json"])
    assert json.loads(again.stdout)["resumed_from"] == {
        "stage": "sft",
        "step": 6,
        "checkpoint": "sft/checkpoints/checkpoint-6",
    }
    table = CliRunner().invoke(_app(), ["status", str(run.path)])
    assert "resumed from: sft step 6, sft/checkpoints/checkpoint-6" in table.stdout
    assert "store: none (this run is kept only here" in table.stdout
    assert list(data["stages"]) == list(PIPELINE)
    assert data["stages"]["sft"]["status"] == "running"
    assert data["stages"]["sft"]["step"] == 7
    assert data["stages"]["eval"]["status"] == "not run"  # no pipeline plans it


def _one_status_each(tmp_path, run: Run) -> dict[str, dict[str, str]]:
    """{view: {stage: status}} as `status --json`, the `status` table, `report` and
    `runs list` (the run lies in a file:// store's folder) each show the run."""
    from tritonrl.evaluate.report import write_report

    shown = {}
    data = json.loads(CliRunner().invoke(_app(), ["status", str(run.path), "--json"]).stdout)
    shown["status --json"] = {n: r["status"] for n, r in data["stages"].items()}
    table = CliRunner().invoke(_app(), ["status", str(run.path)], env={"COLUMNS": "200"})
    rows = [line.split("│")[1:3] for line in table.stdout.splitlines() if line.count("│") > 3]
    shown["status"] = {n.strip(): s.strip() for n, s in rows}
    report = write_report([run.path], tmp_path / "report").read_text()
    lines = report.split("| stage |")[1].splitlines()[2:]
    rows = [line.split("|")[1:3] for line in lines[: lines.index("")]]
    shown["report"] = {n.strip(): s.strip() for n, s in rows}
    listed = CliRunner().invoke(_app(), ["runs", "list", "--store",
                                         run.path.parent.as_uri(), "--json"])  # fmt: skip
    assert listed.exit_code == 0, listed.output
    shown["runs list"] = {n: r["status"] for n, r in json.loads(listed.stdout)[0]["stages"].items()}
    return shown


def test_a_stage_no_one_will_run_is_not_run_not_pending_in_every_view(tmp_path):
    """A run `sft --run runs/s` made (sft built its own examples; no prepare, no pipeline)
    lists prepare, rl and eval from its creation. None is work still to do: status (table
    and JSON), report and runs list all say "not run", and resume has nothing to do."""
    from tritonrl.runs.resume import continue_run

    run = Run.create(tmp_path / "store" / "s", {"sft": {"max_steps": 2}})  # as sft does
    run.start_stage("sft")
    run.finish_stage("sft")
    expected = {"prepare": "not run", "sft": "done", "rl": "not run", "eval": "not run"}
    for view, stages in _one_status_each(tmp_path, run).items():
        assert stages == expected, view
    said: list[str] = []
    assert continue_run(Run.open(run.path), continue_pipeline, say=said.append) == 0
    assert said == [f"{run.path}: no stage is pending, interrupted or failed; nothing to resume"]


def test_a_pipeline_run_shows_pending_the_stages_its_config_plans(tmp_path):
    """A pipeline run records the stages its config plans: those not done are pending
    (tiny_model too, before the manifest lists it), one it skips (`pipeline.rl false`) is
    not run; resume goes on with the first pending one."""
    from tritonrl.config_loader import load_config
    from tritonrl.pipeline import planned
    from tritonrl.runs.resume import _next_stage

    run = Run.create(tmp_path / "store" / "p")
    run.set_fields(driver="pipeline", plan=planned(load_config(None, ["--pipeline.rl", "false"])))
    run.start_stage("prepare")
    run.finish_stage("prepare")
    expected = {"prepare": "done", "tiny_model": "pending", "sft": "pending", "rl": "not run",
                "eval": "pending"}  # fmt: skip
    for view, stages in _one_status_each(tmp_path, run).items():
        assert stages == expected and list(stages) == list(expected), view
    assert _next_stage(Run.open(run.path)) == ("tiny_model", 0)
    for stage in ("tiny_model", "sft", "eval"):
        run.start_stage(stage)
        run.finish_stage(stage)
    assert _next_stage(Run.open(run.path)) == (None, 0)  # rl is not waiting
    old = Run.create(tmp_path / "old")  # a pipeline run from before plans were recorded
    old.set_fields(driver="pipeline")
    assert {n: r["status"] for n, r in old.status_dict()["stages"].items()} == dict.fromkeys(
        PIPELINE, "pending"
    )


def test_status_table_and_errors(tmp_path):
    run = Run.create(tmp_path / "r")
    run.start_stage("sft")
    run.fail_stage("sft", "boom [bad markup")
    run.start_stage("rl")
    run.interrupt_stage("rl", "SIGTERM")
    result = CliRunner().invoke(_app(), ["status", str(run.path)])
    assert result.exit_code == 0, result.output
    assert "failed" in result.stdout and "boom [bad markup" in result.stdout
    assert "interrupted" in result.stdout and "interrupted by SIGTERM at step 0" in result.stdout
    for name in ("model", "tokenizer", "checkpoint", "log_history"):
        (run.path / "sft" / name).mkdir(parents=True)
        run.add_artifact("sft", name, run.path / "sft" / name)
    narrow = CliRunner().invoke(_app(), ["status", str(run.path)], env={"COLUMNS": "80"})
    for name in ("model", "tokenizer", "checkpoint", "log_history"):  # never cut mid-path
        assert f"{name}=sft/{name}" in narrow.stdout, narrow.stdout
    missing = CliRunner().invoke(_app(), ["status", str(tmp_path / "none")])
    assert missing.exit_code == 2
    assert "not a run directory" in missing.output


def test_a_stage_whose_process_was_killed_is_shown_as_such(tmp_path):
    """A process that marks sft running and is then gone without a word (as a SIGKILL
    leaves it): status says so, in JSON and in the table, with what to do."""
    import subprocess
    import sys

    run = Run.create(tmp_path / "r")
    code = f"from tritonrl.runs import Run; Run.open({str(run.path)!r}).start_stage('sft')"
    subprocess.run([sys.executable, "-c", code], check=True)
    again = Run.open(run.path)
    assert again.stage("sft")["status"] == "running" and again.orphaned("sft")
    stages = again.status_dict()["stages"]
    assert stages["sft"]["process_gone"] and "process_gone" not in stages["prepare"]
    table = CliRunner().invoke(_app(), ["status", str(run.path)], env={"COLUMNS": "300"})
    assert "running? (its process is gone)" in table.stdout
    assert "run the same command" in table.stdout
    run.start_stage("rl")  # this process: alive
    assert not Run.open(run.path).orphaned("rl")


def test_a_readonly_run_changes_nothing_and_reloads_what_another_process_wrote(tmp_path):
    writer = Run.create(tmp_path / "r", {"a": 1})
    reader = Run.open(tmp_path / "r", readonly=True)
    before = (tmp_path / "r" / MANIFEST).read_bytes()
    (tmp_path / "r" / "x.txt").write_text("x")
    reader.start_stage("sft")
    reader.add_artifact("sft", "x", tmp_path / "r" / "x.txt")
    reader.set_step("sft", 3)
    reader.set_info("sft", loss=1.0)
    reader.interrupt_stage("sft", "SIGTERM")
    reader.set_fields(store="file:///elsewhere")
    assert (tmp_path / "r" / MANIFEST).read_bytes() == before  # neither the file
    assert reader.status("sft") == "pending" and not reader.has_artifact("sft", "x")  # nor data
    with pytest.raises(RunError, match="does not exist"):  # still checked: a caller's bug
        reader.add_artifact("sft", "y", tmp_path / "r" / "missing")
    writer.start_stage("sft")
    writer.add_artifact("sft", "x", tmp_path / "r" / "x.txt")
    assert reader.status("sft") == "pending"
    reader.reload()
    assert reader.status("sft") == "running" and reader.has_artifact("sft", "x")
    assert reader.readonly and not Run.open(tmp_path / "r").readonly
