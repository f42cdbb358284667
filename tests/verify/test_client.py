"""The verifier service's client: tokens, endpoints, retries, results back from JSON, and
the preflight a stage runs before loading its model (against the real service on
loopback, a closed port and a port that never answers)."""

import json
import socket

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify.client import ServiceError, VerifyClient, client_for, preflight, read_token
from tritonrl.verify.pool.pool import VerifierPool
from tritonrl.verify.result import InputSetOutcome, VerifyResult
from tritonrl.verify.service import VerifyService

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


TOKEN = "the server's token"


@pytest.fixture(scope="module")
def service():
    with VerifyService(VerifierPool(VerifyConfig(device="cpu"), 1), token=TOKEN) as s:
        yield s


def test_preflight_answers_with_the_health_of_a_service_that_takes_the_token(
    service, tmp_path, monkeypatch
):
    monkeypatch.delenv("TRITONRL_VERIFY_ENDPOINT", raising=False)
    monkeypatch.delenv("TRITONRL_SERVE_TOKEN", raising=False)
    assert preflight(VerifyConfig()) is None  # no endpoint: nothing to ask
    (tmp_path / "token").write_text(TOKEN)
    config = VerifyConfig(endpoint=service.address, endpoint_token_file=str(tmp_path / "token"))
    assert preflight(config)["status"] == "ok"
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", TOKEN)  # the token from the environment
    assert preflight(VerifyConfig(endpoint=service.address))["workers"] == 1


def test_preflight_names_a_refused_token_and_where_it_came_from(service, tmp_path, monkeypatch):
    monkeypatch.delenv("TRITONRL_SERVE_TOKEN", raising=False)
    (tmp_path / "token").write_text("not it")
    config = VerifyConfig(endpoint=service.address, endpoint_token_file=str(tmp_path / "token"))
    with pytest.raises(ServiceError) as e:
        preflight(config)
    said = str(e.value)
    assert f"{service.address}/health: 401 bad token" in said and "\n" not in said
    assert f"verify.endpoint_token_file {tmp_path / 'token'}" in said
    assert "$TRITONRL_SERVE_TOKEN" in said
    with pytest.raises(ServiceError, match=r"401 bad token \(sent no token\)"):
        preflight(VerifyConfig(endpoint=service.address))
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", "also not it")
    with pytest.raises(ServiceError, match=r"401 bad token \(sent \$TRITONRL_SERVE_TOKEN\)"):
        preflight(VerifyConfig(endpoint=service.address))


def test_preflight_names_a_closed_port_as_connection_refused(monkeypatch):
    monkeypatch.delenv("TRITONRL_VERIFY_ENDPOINT", raising=False)
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(ServiceError) as e:
        preflight(VerifyConfig(endpoint=endpoint))
    said = str(e.value)
    assert said.startswith(f"verifier service {endpoint}/health: connection refused")
    assert "start `tritonrl serve" in said and "verify.endpoint" in said
    monkeypatch.setenv("TRITONRL_VERIFY_ENDPOINT", endpoint)  # named as where it came from
    with pytest.raises(ServiceError, match=r"correct \$TRITONRL_VERIFY_ENDPOINT"):
        preflight(VerifyConfig())


def test_preflight_names_a_server_that_never_answers_as_a_timeout():
    with socket.socket() as s:  # listening, so the connection opens, but never answering
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ServiceError, match=r"/health: timeout \(no answer in 0.5s\)"):
            preflight(VerifyConfig(endpoint=endpoint), timeout_s=0.5)


def test_preflight_refuses_a_server_that_is_not_tritonrl_serve(service, monkeypatch):
    monkeypatch.setenv("TRITONRL_SERVE_TOKEN", TOKEN)
    with pytest.raises(ServiceError, match="404 no /nowhere/health"):
        preflight(VerifyConfig(endpoint=service.address + "/nowhere"))
