"""The verifier service's client: tokens, endpoints, retries, results back from JSON."""

import json
import socket

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify.client import ServiceError, VerifyClient, client_for, read_token
from tritonrl.verify.result import InputSetOutcome, VerifyResult

RELU = load_builtin("level1/1_ReLU").tasks[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_is_tried_again_then_named():
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    client = VerifyClient(endpoint, "t", tries=3, backoff_s=0.01)
    with pytest.raises(ServiceError, match=f"{endpoint}/health: no answer after 3 tries"):
        client.verify_many([(RELU, "code")])
    assert client.verify_many([]) == []  # nothing to send: no call


def test_token_from_file_else_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITONRL_SERVE_TOKEN", raising=False)
    assert read_token(None) is None
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", "from-env")
    assert read_token(None) == "from-env"
    f = tmp_path / "token"
    f.write_text("from-file\n")
    assert read_token(f) == "from-file"
    f.write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        read_token(f)
    with pytest.raises(ValueError, match="token file"):
        read_token(tmp_path / "missing")


def test_client_for_follows_the_config_then_the_environment(monkeypatch):
    monkeypatch.delenv("TRITONRL_VERIFY_ENDPOINT", raising=False)
    assert client_for(VerifyConfig()) is None
    assert client_for(VerifyConfig(endpoint="http://h:1/")).endpoint == "http://h:1"
    monkeypatch.setenv("TRITONRL_VERIFY_ENDPOINT", "http://e:2")
    assert client_for(VerifyConfig()).endpoint == "http://e:2"
    with pytest.raises(ValueError, match="http"):
        VerifyClient("h:1")
    with pytest.raises(ValueError, match="verify.endpoint"):
        VerifyConfig(endpoint="localhost:8765")


def test_a_result_survives_json():
    r = VerifyResult("t", "cpu", stage="done", compiled=True, correct=True, flags=["x"],
                     speedup_ci=(0.9, 1.1), input_sets=[InputSetOutcome("tiny", True)])  # fmt: skip
    back = VerifyResult.from_dict(json.loads(r.to_json()))
    assert back == r
    with pytest.raises(ValueError, match="needs"):
        VerifyResult.from_dict({"stage": "done"})
