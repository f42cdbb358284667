"""Pre-emption end to end, through the real CLI, a real S3 server (SeaweedFS) and a
loopback IMDSv2 server: a pipeline killed with -9 resumes from the bucket in a fresh
directory (skipping a corrupt newest checkpoint); a spot notice makes sft checkpoint,
sync and exit well inside two minutes, and resume continues from that step."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from s3server import READER_KEY, READER_SECRET

pytestmark = pytest.mark.slow  # trains the tiny model on the CPU


def _start(*args: str, env: dict, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tritonrl", *args], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip


def _tritonrl(*args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritonrl", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)  # fmt: skip


def _store_manifest(client, bucket: str, key: str) -> dict | None:
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    return json.loads(body)


def _wait(predicate, proc: subprocess.Popen, timeout: float, what: str, log_path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}:\n"
                                 + log_path.read_text()[-3000:])  # fmt: skip
        time.sleep(0.5)
    raise AssertionError(f"no {what} in {timeout} s:\n" + log_path.read_text()[-3000:])


@pytest.fixture
def env(s3_bucket, tmp_path):
    # No metadata service here: the spot watcher must switch itself off at once.
    return {**os.environ, "TRITONRL_IMDS_ENDPOINT": "http://127.0.0.1:9", "TQDM_DISABLE": "1"}


SHORT = ["--sft.max_steps", "8", "--rl.max_steps", "2", "--pipeline.eval_samples", "1",
         "--data.generated_tasks", "20", "--sft.max_length", "1024"]  # fmt: skip


def test_a_pipeline_killed_with_sigkill_resumes_from_the_bucket_in_a_fresh_directory(
    s3, s3_bucket, env, tmp_path
):
    store = f"s3://{s3_bucket}/runs"
    first = tmp_path / "machine-a" / "demo"
    log_path = tmp_path / "pipeline-a.log"
    client = s3.client()
    with open(log_path, "w") as log:
        proc = _start("pipeline", "--run-dir", str(first), "--store", store, *SHORT,
                      env=env, log=log)  # fmt: skip
        try:
            # Killed once the store's manifest names sft's second checkpoint (step 4).
            def stored_checkpoint():
                manifest = _store_manifest(client, s3_bucket, "runs/demo/manifest.json")
                sft = (manifest or {}).get("stages", {}).get("sft", {})
                return sft.get("step", 0) >= 4 and sft["artifacts"].get("checkpoint")

            named = _wait(stored_checkpoint, proc, 400, "a synced sft checkpoint", log_path)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    newest = int(named.rsplit("-", 1)[1])
    assert named == f"sft/checkpoints/checkpoint-{newest}" and 4 <= newest < 8, named
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="runs/demo/")
            .get("Contents", [])}  # fmt: skip
    previous = newest - 2  # checkpoints every 2 steps, the last 2 kept
    assert f"runs/demo/sft/checkpoints/checkpoint-{previous}/tritonrl-checkpoint.json" in keys
    # The newest checkpoint is damaged in the bucket (a truncated upload): resume must
    # skip it, with a warning, for the previous consistent one.
    folder = f"runs/demo/sft/checkpoints/checkpoint-{newest}/"
    weights = next(k for k in keys if k.startswith(folder) and k.endswith(".safetensors"))
    client.put_object(Bucket=s3_bucket, Key=weights, Body=b"truncated")

    second = tmp_path / "machine-b" / "restored"
    r = _tritonrl("resume", "--store", store, "--run-dir", str(second), env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = r.stdout + r.stderr
    assert f"checkpoint-{newest}" in said and "skipp" in said.lower(), said[-3000:]
    assert f"(went on from sft/checkpoints/checkpoint-{previous})" in r.stdout, r.stdout

    status = json.loads(_tritonrl("status", str(second), "--json", env=env).stdout)
    assert all(s["status"] == "done" for s in status["stages"].values()), status["stages"]
    assert status["stages"]["sft"]["step"] == 8
    assert status["resumed_from"] == {
        "stage": "sft", "step": previous, "checkpoint": f"sft/checkpoints/checkpoint-{previous}",
        "store": f"{store}/demo",
    }  # fmt: skip
    assert status["store"]["url"] == f"{store}/demo"
    assert (second / "report" / "report.md").is_file()
    # The store holds the finished run: its manifest says every stage is done.
    final = _store_manifest(client, s3_bucket, "runs/demo/manifest.json")
    assert all(s["status"] == "done" for s in final["stages"].values())
    listed = json.loads(_tritonrl("runs", "list", "--store", store, "--json", env=env).stdout)
    assert [r["name"] for r in listed] == ["demo"]


def test_a_spot_notice_checkpoints_syncs_and_exits_then_resume_goes_on_from_that_step(
    s3, s3_bucket, env, tmp_path
):
    from imds_server import ImdsServer

    store = f"s3://{s3_bucket}/runs"
    run_dir = tmp_path / "machine-a" / "spot"
    log_path = tmp_path / "sft-a.log"
    client = s3.client()
    with ImdsServer() as imds, open(log_path, "w") as log:
        spot_env = {**env, "TRITONRL_IMDS_ENDPOINT": imds.url}
        # No periodic checkpoint: the only one is the notice's.
        proc = _start("sft", "--run", str(run_dir), "--run.store", store,
                      "--sft.max_steps", "12", "--sft.save_steps", "1000",
                      "--data.generated_tasks", "20", "--sft.max_length", "1024",
                      env=spot_env, log=log)  # fmt: skip
        try:

            def training():
                manifest = run_dir / "manifest.json"
                if not manifest.is_file():
                    return False
                return json.loads(manifest.read_text())["stages"]["sft"]["step"] >= 2

            _wait(training, proc, 300, "two sft steps", log_path)
            imds.notice(action="terminate")
            noticed = time.monotonic()
            code = proc.wait(timeout=120)
            took = time.monotonic() - noticed
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    output = log_path.read_text()
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert took < 120, took
    print(f"spot notice to exit: {took:.1f} s")  # the figure docs quote (pytest -s)
    sft = json.loads((run_dir / "manifest.json").read_text())["stages"]["sft"]
    assert sft["status"] == "interrupted" and sft["signal"] == "spot-notice", sft
    step = sft["step"]
    assert 2 <= step < 12 and sft["artifacts"]["checkpoint"] == (
        f"sft/checkpoints/checkpoint-{step}"
    )
    # The emergency sync put that checkpoint and the manifest in the store before exit.
    stored = _store_manifest(client, s3_bucket, "runs/spot/manifest.json")
    assert stored["stages"]["sft"] == sft
    seal = f"runs/spot/sft/checkpoints/checkpoint-{step}/tritonrl-checkpoint.json"
    assert client.head_object(Bucket=s3_bucket, Key=seal)

    again = tmp_path / "machine-b" / "spot"
    r = _tritonrl("resume", "--store", f"{store}/spot", "--run-dir", str(again), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    status = json.loads(_tritonrl("status", str(again), "--json", env=env).stdout)
    assert status["stages"]["sft"]["status"] == "done" and status["stages"]["sft"]["step"] == 12
    assert status["resumed_from"]["stage"] == "sft" and status["resumed_from"]["step"] == step


@pytest.mark.parametrize("problem", ["missing bucket", "read-only key"])
@pytest.mark.parametrize("command", ["pipeline", "sft"])
def test_a_store_that_cannot_be_reached_stops_the_command_before_any_stage(
    s3, s3_bucket, env, tmp_path, command, problem
):
    if problem == "missing bucket":  # the endpoint answers; the bucket is not there
        store, said = f"s3://{s3_bucket}-missing/runs", "does not exist"
    else:  # the bucket lists, but the key may not write: no checkpoint would ever sync
        store, said = f"s3://{s3_bucket}/runs", "can be read but not written"
        env = {**env, "AWS_ACCESS_KEY_ID": READER_KEY, "AWS_SECRET_ACCESS_KEY": READER_SECRET}
    run_dir = tmp_path / "run"
    args = (["pipeline", "--run-dir", str(run_dir), "--store", store] if command == "pipeline"
            else ["sft", "--run", str(run_dir), "--run.store", store])  # fmt: skip
    r = _tritonrl(*args, env=env, timeout=120)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert store in r.stderr and "AWS_ENDPOINT_URL" in r.stderr and "Traceback" not in r.stderr
    assert said in r.stderr, r.stderr[-2000:]
    manifest = run_dir / "manifest.json"
    stages = json.loads(manifest.read_text())["stages"] if manifest.exists() else {}
    assert all(s["status"] == "pending" for s in stages.values()), stages


def test_a_store_holding_no_run_says_where_runs_are_stored(tmp_path):
    # A run stored with `--store URL --run-dir X` sits at URL/X: a user who gave the run's
    # name in both was told only "no runs" when listing or resuming from the bucket.
    from tritonrl.runs import Run

    Run.create(tmp_path / "store" / "runA" / "runA", {"x": 1})  # one level too deep
    url = (tmp_path / "store").as_uri()
    env = dict(os.environ)
    listed = _tritonrl("runs", "list", "--store", url, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    said = " ".join(listed.stdout.split())  # the console may wrap
    assert f"no runs in {url}" in said and "puts it at s3://B/P/X" in said, said
    r = _tritonrl("resume", "--store", url, "--run-dir", str(tmp_path / "restored"), env=env,
                  timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    said = " ".join(r.stderr.split())
    assert f"no run in {url}" in said and "puts it at s3://B/P/X" in said, said
    assert not (tmp_path / "restored" / "manifest.json").exists()
