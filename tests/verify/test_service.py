"""The verifier as an HTTP service: the real server on loopback, its real pool, and the
guards (token, request size, queue, bad requests, binding)."""

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward import reward_for
from tritonrl.tasks import load_builtin
from tritonrl.verify.client import ServiceError, VerifyClient
from tritonrl.verify.funnel import verify
from tritonrl.verify.pool.pool import VerifierPool
from tritonrl.verify.service import VerifyService, is_loopback

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
BAD = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
HOSTILE = (Path(__file__).parent / "hostile" / "c01_torch_relu.py").read_text()
TOKEN = "correct horse battery staple"
CONFIG = VerifyConfig(device="cpu")


@pytest.fixture(scope="module")
def service():
    pool = VerifierPool(CONFIG, 1)
    with VerifyService(pool, token=TOKEN, max_queue=4, max_request_bytes=100_000,
                       score=lambda r: reward_for(r, CONFIG)) as s:  # fmt: skip
        yield s


def _post(service, body: bytes, token: str | None = TOKEN, path: str = "/verify"):
    """(status, JSON answer) of a raw POST."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(service.address + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _job(code: str) -> dict:
    return {"task": {"id": RELU.id, "source": RELU.source, "level": RELU.level}, "completion": code}


VERDICT = ("stage", "compiled", "tiny_correct", "correct", "flags", "limit", "timed_out")


def test_verdicts_are_the_in_process_verifiers(service):
    client = VerifyClient(service.address, TOKEN)
    remote = client.verify_many([(RELU, GOOD), (RELU, BAD), (RELU, HOSTILE)])
    local = [verify(RELU, code, CONFIG) for code in (GOOD, BAD, HOSTILE)]
    for r, x in zip(remote, local, strict=True):
        assert {k: getattr(r, k) for k in VERDICT} == {k: getattr(x, k) for k in VERDICT}
        assert r.task == RELU.id and (r.error is None) == (x.error is None)
    assert [r.correct for r in remote] == [True, False, False]
    assert "torch_compute" in remote[2].flags
    # The raw answer carries the reward under the server's scheme; a builtin id works too.
    body = json.dumps({"jobs": [{"task": RELU.id, "completion": BAD}]}).encode()
    status, answer = _post(service, body)
    assert status == 200
    (row,) = answer["results"]
    assert row["stage"] == "correctness" and row["reward"] == pytest.approx(0.3)


def test_a_missing_or_wrong_token_gets_401(service):
    body = json.dumps({"jobs": [_job(GOOD)]}).encode()
    for token in (None, "wrong", TOKEN + "x", ""):
        status, answer = _post(service, body, token)
        assert status == 401 and "token" in answer["error"]
    with pytest.raises(ServiceError, match="401"):
        VerifyClient(service.address, "wrong").health()
    assert VerifyClient(service.address, TOKEN).health()["max_queue"] == 4


def test_an_oversize_body_gets_413_unread(service):
    body = json.dumps({"jobs": [_job("x" * 200_000)]}).encode()
    status, answer = _post(service, body)
    assert status == 413 and "at most 100000" in answer["error"]
    host, port = service.address.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"POST /verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                  "Content-Length: -5\r\n\r\n".encode())  # fmt: skip
        assert s.recv(4096).startswith(b"HTTP/1.1 411")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "not JSON"),
        (b'{"jobs": 3}', '{"jobs": ['),
        (b'{"jobs": [{"task": "tasks/secret.py", "completion": "x"}]}', "builtin id"),
        (b'{"jobs": [{"task": {"id": "t", "source": "x = 1"}, "completion": "x"}]}', "jobs[0]"),
        (b'{"jobs": [{"task": "builtin:level1/1_ReLU"}]}', "string 'completion'"),
    ],
)
def test_bad_requests_get_400_with_the_reason(service, body, says):
    status, answer = _post(service, body)
    assert status == 400 and says in answer["error"]


def test_a_full_queue_answers_503_and_the_client_names_the_endpoint(service):
    body = json.dumps({"jobs": [_job(GOOD)]}).encode()
    with service.reserve(service.max_queue):  # the queue full, as other requests would hold it
        status, answer = _post(service, body)
        assert status == 503 and "try again" in answer["error"]
        client = VerifyClient(service.address, TOKEN, tries=2, backoff_s=0.01)
        with pytest.raises(ServiceError, match=f"{service.address}/verify: no answer after 2"):
            client.verify_many([(RELU, GOOD)])
    assert service.in_flight == 0


def test_binding_beyond_loopback_needs_a_token(service):
    with pytest.raises(ValueError, match="needs a token"):
        VerifyService(service.pool, "0.0.0.0", 0, token=None)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_a_hanging_candidate_holds_the_queue_until_its_timeout():
    """The queue counts real verifications: while a hanging kernel is in flight a second
    request does not fit; when the sandbox's timeout ends it, the verdict says so."""
    hang = (Path(__file__).parent / "hostile" / "c24_hang_at_import.py").read_text()
    config = VerifyConfig(device="cpu", timeout_s=3)
    pool = VerifierPool(config, 1)
    with VerifyService(pool, max_queue=1) as small:
        first: list = []
        thread = threading.Thread(
            target=lambda: first.extend(VerifyClient(small.address).verify_many([(RELU, hang)]))
        )
        thread.start()
        deadline = time.monotonic() + 60
        while small.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert small.in_flight == 1
        status, answer = _post(small, json.dumps({"jobs": [_job(GOOD)]}).encode(), None)
        assert status == 503 and "holds 1 of 1" in answer["error"]
        thread.join(120)
    (result,) = first
    assert result.limit == "timeout" and not result.correct


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_verify_and_its_batch_go_through_the_service_when_an_endpoint_is_set(service, tmp_path):
    """The command's own config allows torch's relu (partial); the server's is strict. The
    verdict is the server's, so the candidate went there, not to a local pool; with no
    server at the endpoint the command says so in one line instead of verifying here."""
    from typer.testing import CliRunner

    from tritonrl.cli import app

    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "k.py").write_text(HOSTILE)
    (tmp_path / "cases.jsonl").write_text(json.dumps({"task": RELU.id, "kernel_file": "k.py"}))
    mine = ["--verify.device", "cpu", "--verify.policy", "partial",
            "--verify.allowed_torch_ops", "[relu]"]  # fmt: skip
    local = CliRunner().invoke(app, ["verify", RELU.id, str(tmp_path / "k.py"), "--json", *mine])
    assert local.exit_code == 0 and json.loads(local.stdout)["correct"], local.output
    there = [*mine, "--verify.endpoint", service.address,
             "--verify.endpoint_token_file", str(tmp_path / "token")]  # fmt: skip
    r = CliRunner().invoke(app, ["verify", RELU.id, str(tmp_path / "k.py"), "--json", *there])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)
    assert not row["correct"] and "torch_compute" in row["flags"]
    out = tmp_path / "results.jsonl"
    r = CliRunner().invoke(app, ["verify", "--batch", str(tmp_path / "cases.jsonl"),
                                 "--out", str(out), *there])  # fmt: skip
    assert r.exit_code == 0 and f"through the service at {service.address}" in r.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert "torch_compute" in row["flags"]
    dead = f"http://127.0.0.1:{_free_port()}"
    r = CliRunner().invoke(app, ["verify", RELU.id, str(tmp_path / "k.py"), *mine,
                                 "--verify.endpoint", dead])  # fmt: skip
    assert r.exit_code == 1 and dead in r.output and "Traceback" not in r.output, r.output
