"""The object store: the errors of a store that cannot be used (unreachable, wrong
credentials, a missing backend, a local path that cannot be a folder), against a real S3
server (SeaweedFS, tests/s3server.py). Push, pull and list_runs: test_transfer.py."""

import socket

import pytest

from tritonrl.runs.store import StoreError, open_store


@pytest.fixture
def bucket(s3_bucket):
    """`s3_bucket` (emptied and deleted after the test by the fixture itself)."""
    return s3_bucket


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_store_is_an_error_naming_the_url_and_the_variables(
    s3, bucket, monkeypatch, tmp_path
):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # boto's own retries: fail at once here
    with pytest.raises(StoreError, match="does not exist") as e:
        open_store("s3://no-such-bucket-here/runs")
    assert "s3://no-such-bucket-here/runs" in str(e.value)
    assert "tritonrl bucket create no-such-bucket-here" in str(e.value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(StoreError) as e:
        open_store(f"s3://{bucket}/runs")
    message = str(e.value)
    assert f"s3://{bucket}/runs" in message
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):  # fmt: skip
        assert name in message
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StoreError, match="AWS_SECRET_ACCESS_KEY"):
        open_store(f"s3://{bucket}/runs")


def test_a_missing_backend_or_an_unusable_local_path_is_an_error(tmp_path):
    with pytest.raises(StoreError, match="pip install gcsfs") as e:
        open_store("gs://bucket/runs")
    assert "gs://bucket/runs" in str(e.value)
    with pytest.raises(StoreError, match="Protocol not known"):
        open_store("nosuch://bucket/runs")
    (tmp_path / "a-file").write_bytes(b"x")
    with pytest.raises(StoreError, match="a-file"):
        open_store(str(tmp_path / "a-file" / "runs"))
