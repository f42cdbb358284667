"""Test-wide set-up: the Triton interpreter on machines without CUDA, the `gpu` marker,
and the CLI app of the training commands (the model and training tests use it)."""

import os

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
