"""Test-wide set-up: the Triton interpreter on machines without CUDA, the `gpu` marker,
the CLI app of the training commands (the model and training tests use it), a loopback
teacher endpoint (`chat_server`) and a run its answers were distilled into (`distill_run`)."""

import os
import shutil

import pytest
import torch
import typer

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must precede the definition of any @triton.jit kernel in the test process.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A failure's report parses the test's source (pytest's traceback formatting) while
    # background verifications may be parsing candidates: one lock for both, or CPython
    # 3.11 can fail the run with "AST constructor recursion depth mismatch".
    from tritonrl.astlock import AST_LOCK

    with AST_LOCK:
        yield


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """One SeaweedFS S3 server on loopback for the session (tests/s3server.py)."""
    from s3server import S3Server

    with S3Server(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def s3_bucket(s3, monkeypatch):
    """A fresh bucket on the test S3 server, with the AWS variables a user would set
    (AWS_ENDPOINT_URL included) in this process's environment; its name. Deleted after."""
    import uuid

    name = f"t-{uuid.uuid4().hex[:16]}"
    client = s3.client()
    client.create_bucket(Bucket=name)
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    yield name
    # Emptied and deleted: the server has room for a limited number of buckets' volumes.
    for page in client.get_paginator("list_object_versions").paginate(Bucket=name):
        for item in page.get("Versions", []) + page.get("DeleteMarkers", []):
            client.delete_object(Bucket=name, Key=item["Key"], VersionId=item["VersionId"])
    client.delete_bucket(Bucket=name)


@pytest.fixture(scope="session")
def train_app() -> typer.Typer:
    """A typer app with the training commands (tiny-model, convert-gguf, sft, rl) registered."""
    from tritonrl.train.commands import register  # lazy: loads the training stack

    app = typer.Typer()

    @app.callback()
    def main():
        pass

    register(app)
    return app


@pytest.fixture
def chat_server():
    """`start(script)`: a loopback OpenAI-compatible server answering as `script` says
    (tests/chat_server.py); every one started is shut down after the test."""
    from chat_server import ChatServer

    servers = []

    def start(script):
        servers.append(ChatServer(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


# The tasks the `distill_run_template` teacher answers: two verified answers each.
DISTILLED = ("builtin:level1/3_Tanh", "builtin:level1/5_LeakyReLU")


@pytest.fixture(scope="session")
def distill_run_template(tmp_path_factory):
    """A run whose only stage is `tritonrl distill --run` (the real command, in a
    subprocess) against a loopback teacher: two verified-correct answers each for
    DISTILLED, garbage for the third task asked (builtin:level1/6_Softplus). Do not change
    it: copy it with `distill_run`."""
    from chat_server import ChatServer, answer
    from cli_process import tritonrl
    from tritonrl.tasks import load_builtin

    script = {}
    for task in (load_builtin(i.removeprefix("builtin:")).tasks[0] for i in DISTILLED):
        second = task.solution.replace("class ModelNew", "# variation 2\nclass ModelNew")
        script[(task.source, 0)] = [(200, answer(task.solution))]
        script[(task.source, 1)] = [(200, answer(second, "Same, a second time."))]
    server = ChatServer(script)
    run_dir = tmp_path_factory.mktemp("distill") / "run"
    try:
        r = tritonrl("distill", "--endpoint", server.url, "--model", "teacher", "--variations",
                     "2", "--tasks", "builtin:level1", "--limit", "3", "--rate-limit", "100",
                     "--verify.device", "cpu", "--verify.timing", "false", "--run",
                     str(run_dir))  # fmt: skip
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    assert "kept 4 of 6 answers for 3 tasks" in r.stdout
    return run_dir


@pytest.fixture
def distill_run(distill_run_template, tmp_path):
    """A fresh copy of `distill_run_template` for one test (a run directory can be moved)."""
    run_dir = tmp_path / "run"
    shutil.copytree(distill_run_template, run_dir)
    return run_dir
