"""The data-and-SFT chain as a user runs it, on the CPU: prepare (the KernelBook-schema
fixture, and the builtin suite) -> tiny-model -> sft -> status, through the real CLI."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "data" / "fixtures" / "kernelbook_fixture.jsonl"
ROOT = Path(__file__).resolve().parents[1]


def tritonrl(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "tritonrl", *args], capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def test_prepare_builtin_source(tmp_path):
    tritonrl("prepare", "--source", "builtin", "--max-samples", "80", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = (tmp_path / "train.jsonl").read_text().splitlines()
    assert len(rows) >= 40 and summary
    assert {"prompt", "completion", "task_id", "level"} <= set(json.loads(rows[0]))


@pytest.mark.slow  # trains a model
def test_prepare_tiny_model_sft_status(tmp_path):
    start = time.monotonic()
    run, tiny = tmp_path / "run", tmp_path / "tiny"
    tritonrl("prepare", "--source", str(FIXTURE), "--max-samples", "30", "--run", str(run))
    tritonrl("tiny-model", "--out", str(tiny))
    steps = ["--sft.max_steps", "8", "--sft.max_length", "1024", "--sft.eval_steps", "4"]
    tritonrl("sft", "--run", str(run), "--model.name_or_path", str(tiny), *steps)
    status = json.loads(tritonrl("status", str(run), "--json").stdout)
    assert status["resumed_from"] is None
    prepare, sft = status["stages"]["prepare"], status["stages"]["sft"]
    assert prepare["status"] == "done" and sft["status"] == "done" and sft["step"] == 8
    info = sft["info"]
    assert info["data_source"] == "prepare"  # the stage found its data through the manifest
    assert info["last_loss"] < info["first_loss"] - 0.3, info
    assert time.monotonic() - start < 180

    # The saved model reloads exactly as a hub model would, and generates.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = run / sft["artifacts"]["model"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    prompt = tok.apply_chat_template([{"role": "user", "content": "write a kernel"}],
                                     tokenize=False, add_generation_prompt=True)  # fmt: skip
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids.shape[1]


def test_a_failing_pipeline_stage_is_named_with_its_log(tmp_path):
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "tritonrl", "pipeline", "--run-dir", str(run),
                        "--pipeline.prepare_source", str(tmp_path / "missing.jsonl")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr  # the stage's own exit: bad usage
    log = run / "logs" / "prepare.log"
    assert "pipeline stopped: stage prepare failed" in r.stderr and str(log) in r.stderr
    missing = tmp_path / "missing.jsonl"
    assert f"failed (exit 2): {missing}: no such file" in r.stderr  # the cause, said
    assert "missing.jsonl" in log.read_text()  # the stage's own error, in its log
    status = json.loads(tritonrl("status", str(run), "--json").stdout)["stages"]
    assert status["prepare"]["status"] == "failed" and status["sft"]["status"] == "pending"
    assert not (run / "sft").exists()  # nothing after the failed stage ran


@pytest.mark.slow  # the whole chain: trains a model
def test_the_readme_pipeline_on_the_embedded_default(tmp_path):
    """`tritonrl pipeline` with no config, in a fresh directory, as the README's first
    command runs it: every stage done, a report with plots, then nothing left to do."""
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tritonrl", "pipeline"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    seconds = time.monotonic() - start
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert seconds < 600, f"the pipeline took {seconds:.0f}s"
    run = tmp_path / "runs" / "pipeline"
    report = run / "report" / "report.md"
    assert f"pipeline done: report in {report}" in r.stdout
    status = json.loads(tritonrl("status", str(run), "--json").stdout)["stages"]
    assert {name: s["status"] for name, s in status.items()} == dict.fromkeys(
        ["prepare", "tiny_model", "sft", "rl", "eval"], "done")  # fmt: skip
    assert list(status) == ["prepare", "tiny_model", "sft", "rl", "eval"]  # as they ran
    assert status["rl"]["step"] == 2 and status["eval"]["artifacts"]["dir"] == "eval"
    text = report.read_text()
    summary = json.loads((run / "eval" / "summary.json").read_text())
    n = summary["metrics"]["overall"]["n"]
    assert summary["samples"] == 2 and f"| pipeline | {n} |" in text  # from the files
    pngs = sorted(p.name for p in report.parent.glob("*.png"))
    assert "pipeline_sft_loss.png" in pngs and "eval_funnel.png" in pngs
    assert all(f"]({png})" in text for png in pngs)
    for stage in ("prepare", "sft", "rl", "eval"):
        assert (run / "logs" / f"{stage}.log").stat().st_size > 0

    # again through run_pipeline.sh, with this environment's tritonrl on the PATH
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    again = subprocess.run([str(ROOT / "run_pipeline.sh")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    for stage in ("prepare", "tiny_model", "sft", "rl", "eval"):
        assert f"{stage}: done, skipped" in again.stdout
    assert f"pipeline done: report in {report}" in again.stdout
    # another setting for done stages is refused, not skipped in silence
    other = subprocess.run([str(ROOT / "run_pipeline.sh"), "--sft.learning_rate", "5e-4"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert other.returncode == 2 and "differing: sft.learning_rate" in other.stderr, other.stdout
    bad = subprocess.run([str(ROOT / "run_pipeline.sh"), "--config", "no-such-config"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "no-such-config" in bad.stdout + bad.stderr


@pytest.mark.slow  # trains a model
def test_the_pipeline_measures_the_sft_models_pass_rates_and_rl_trains_on_those_kept(tmp_path):
    """With `pipeline.pass_rate_samples`, a stage between sft and rl answers every training
    task (no timing) and rl takes those answers as `rl.pass_rates`. The tiny model solves
    nothing: a range of [0, 0] keeps every task, the default range none (rl refuses)."""
    run = tmp_path / "run"
    small = ["--data.generated_tasks", "10", "--tiny_model.generated_tasks", "30",
             "--sft.max_steps", "2", "--rl.max_steps", "1", "--pipeline.eval_samples", "1",
             "--pipeline.eval_tasks", "[builtin:level1/1_ReLU]", "--run.report_to", "[none]",
             "--pipeline.pass_rate_samples", "2"]  # fmt: skip
    cmd = [sys.executable, "-m", "tritonrl", "pipeline", "--run-dir", str(run), *small]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 2 and "stage rl failed (exit 2)" in r.stderr, r.stdout[-2000:] + r.stderr
    assert "no training task's pass rate lies within [0.01, 0.99]" in r.stderr
    stages = json.loads(tritonrl("status", str(run), "--json").stdout)["stages"]
    assert list(stages)[:5] == ["prepare", "tiny_model", "sft", "pass_rates", "rl"]
    rows = [json.loads(x) for x in (run / "pass_rates" / "samples.jsonl").read_text().splitlines()]
    train = {json.loads(x)["task_id"] for x in (run / stages["prepare"]["artifacts"]["train"])
             .read_text().splitlines()}  # fmt: skip
    assert {r["task"] for r in rows} == train and len(rows) == 2 * len(train)
    assert all(not r["verdict"]["correct"] and r["verdict"]["speedup"] is None for r in rows)
    generation = json.loads((run / "pass_rates" / "eval.json").read_text())["generation"]
    assert not generation["greedy"] and generation["temperature"] == 0.8

    r = subprocess.run([*cmd, "--rl.pass_rate_max", "0", "--rl.pass_rate_min", "0"],
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "pass_rates: done, skipped" in r.stdout
    stages = json.loads(tritonrl("status", str(run), "--json").stdout)["stages"]
    kept = stages["rl"]["info"]["pass_rate_filter"]
    assert (kept["tasks"], kept["kept"], kept["below_min"], kept["above_max"]) == (
        len(train), len(train), 0, 0)  # fmt: skip
    assert kept["file"] == str(run / "pass_rates") and stages["eval"]["status"] == "done"


def test_a_running_stage_shows_its_progress_and_streams_it_to_its_log(tmp_path):
    """The pipeline's sft said `sft: running` for minutes while its log held only the
    command line until the stage ended. A real sft stage as the pipeline runs it: its
    progress (step/total, loss, ETA) is said, each line already in the log when said."""
    from tritonrl.pipeline import _run_process

    log, said, in_log = tmp_path / "logs" / "sft.log", [], []

    def say(text: str) -> None:
        said.append(text)
        in_log.append(text.split(", ")[0].split()[-1] in log.read_text())  # "2/3"

    cmd = [sys.executable, "-m", "tritonrl", "sft", "--run", str(tmp_path / "run"),
           "--sft.max_steps", "3", "--data.generated_tasks", "20",
           "--tiny_model.generated_tasks", "50", "--run.report_to", "[none]"]  # fmt: skip
    _run_process("sft", cmd, log, say)
    assert said and all(s.startswith("sft: training step ") for s in said) and all(in_log)
    assert said[-1].startswith("sft: training step 3/3, loss ") and "ETA 00:00" in said[-1]
    assert said[-1].count("3/3") == 1 and len(said) == len(set(said))
    lines = log.read_text().splitlines()
    assert lines[0].startswith("$ ") and "\r" not in log.read_text()
    bars = [x for x in lines if x.startswith("training:")]
    assert bars and "3/3" in bars[-1] and "loss=" in bars[-1]


def test_a_stopped_stage_says_how_to_go_on_and_a_failed_one_names_its_failure(tmp_path):
    from tritonrl.pipeline import StageFailed

    log = tmp_path / "sft.log"
    stopped = StageFailed("sft", log, 143)
    assert stopped.stopped and "stopped by SIGTERM" in str(stopped) and "failed" not in str(stopped)
    assert "same pipeline command" in str(stopped) and str(log) in str(stopped)
    assert StageFailed("rl", log, 130).stopped
    failed = StageFailed("sft", log, 1)
    assert not failed.stopped and str(failed) == f"stage sft failed (exit 1); its log: {log}"


def test_a_stage_that_ends_says_why_in_the_pipelines_own_words(tmp_path):
    """What stopped a stage is in its manifest entry, and what failed it in its log: the
    pipeline's line says which signal (not "SIGTERM or a spot notice") and the error (a
    stage refused by the store's write check said only "failed (exit 2)")."""
    from tritonrl.pipeline import StageFailed, _why
    from tritonrl.runs import Run

    run = Run.create(tmp_path / "demo", {"x": 1})
    log = run.path / "logs" / "sft.log"
    log.parent.mkdir()
    run.start_stage("sft")
    run.interrupt_stage("sft", "spot-notice")
    stopped = StageFailed("sft", log, 143, _why("sft", log, 143))
    assert "stopped by spot-notice after its checkpoint" in str(stopped)
    log.write_text("$ python -m tritonrl rl ...\nstore: probing s3://b/demo\n"
                   "error: store s3://b/demo refuses writes (No writable volumes); check ...\n"
                   "Aborted.\n")  # fmt: skip
    failed = StageFailed("rl", log, 2, _why("rl", log, 2))
    assert str(failed) == ("stage rl failed (exit 2): store s3://b/demo refuses writes "
                           f"(No writable volumes); check ...; its log: {log}")  # fmt: skip
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "    raise ValueError('bad rows')\nValueError: bad rows\n")  # fmt: skip
    assert _why("eval", log, 1) == "ValueError: bad rows"
    assert _why("eval", tmp_path / "missing.log", 1) is None


def test_the_pipeline_says_when_its_store_does_not_hold_the_last_state(tmp_path):
    """The final sync's failure (recorded by the real sync in RUN/.sync/status.json)
    is named, with the store, the error and how to push again; a good push clears it."""
    from tritonrl.pipeline import _unsynced
    from tritonrl.runs import Run
    from tritonrl.runs.sync import StoreSync

    run = Run.create(tmp_path / "demo", {"x": 1})
    assert _unsynced(run.path) is None  # no store: nothing to say
    blocker = tmp_path / "store"
    blocker.write_text("a file where the store's folder should be")
    url = (blocker / "demo").as_uri()
    run.set_fields(store=url)
    assert not StoreSync(run.path, url, 0).sync_now()
    said = _unsynced(run.path)
    assert said and url in said and "last sync: never" in said and "again to push" in said
    blocker.unlink()
    assert StoreSync(run.path, url, 0).sync_now()
    assert _unsynced(run.path) is None


def _done_pipeline_run(run_dir: Path, *overrides: str):
    """A run as `tritonrl pipeline` leaves it with every planned stage done (no training:
    the manifest only), rl's settings recorded as the rl stage records them."""
    from tritonrl.config import RL_SECTIONS
    from tritonrl.config_loader import config_to_dict, load_config
    from tritonrl.pipeline import planned
    from tritonrl.runs import Run

    config = load_config(None, list(overrides), stage="sft")
    recorded = config_to_dict(config)
    run = Run.create(run_dir, recorded)
    for stage in planned(config):
        run.start_stage(stage)
        run.finish_stage(stage)
    run.set_info("rl", config={k: recorded[k] for k in RL_SECTIONS})
    return Run.open(run_dir), config


def test_a_pipeline_refuses_settings_that_only_its_done_stages_would_take(tmp_path):
    """A pipeline run again on a finished run with --sft.learning_rate 5e-4 said `done,
    skipped` for every stage and exited 0: the ablation never ran. It is refused as
    `tritonrl sft` refuses it, naming what differs and what to do, and writes nothing."""
    run_dir = tmp_path / "run"
    _done_pipeline_run(run_dir)
    manifest = (run_dir / "manifest.json").read_bytes()

    def pipeline(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tritonrl", "pipeline", "--run-dir",
                               str(run_dir), *args], capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    r = pipeline("--sft.learning_rate", "5e-4")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "was created with a different config; differing: sft.learning_rate: 0.001 -> " \
           "0.0005" in r.stderr and "a new --run-dir" in r.stderr  # fmt: skip
    assert "done, skipped" not in r.stdout
    r = pipeline("--rl.generated_tasks", "40", "--curriculum.retire_after", "4")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "curriculum.retire_after: 0 -> 4; rl.generated_tasks: 0 -> 40" in r.stderr
    r = pipeline("--rl.max_steps", "5")  # a budget: rl goes on from its checkpoint by hand
    assert r.returncode == 2 and f"`tritonrl rl --run {run_dir} --rl.max_steps N`" in r.stderr
    assert (run_dir / "manifest.json").read_bytes() == manifest


def test_a_pipeline_leaves_a_change_to_the_stage_still_to_run(tmp_path):
    """What a stage still to run takes is not refused (that stage accepts or refuses it),
    nor is the run's own config, nor another store."""
    from tritonrl.config_loader import load_config
    from tritonrl.pipeline import check_done_stages

    run, config = _done_pipeline_run(tmp_path / "run", "--pipeline.pass_rate_samples", "0")
    check_done_stages(run, config)
    check_done_stages(run, load_config(None, ["--pipeline.pass_rate_samples", "0",
                                              "--run.store", "file:///x"]))  # fmt: skip
    run.interrupt_stage("rl", "SIGTERM")
    check_done_stages(run, load_config(None, ["--pipeline.pass_rate_samples", "0",
                                              "--rl.generated_tasks", "40"]))  # fmt: skip
    with pytest.raises(ValueError, match=r"differing: sft.max_steps: -1 -> 99\. .*`tritonrl sft"):
        check_done_stages(run, load_config(None, ["--pipeline.pass_rate_samples", "0",
                                                  "--sft.max_steps", "99"]))  # fmt: skip
