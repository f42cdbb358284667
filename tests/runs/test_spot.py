"""The spot watcher against a real IMDSv2 server on loopback (tests/imds_server.py): the
token protocol read back from the requests the server saw, one notice -> one callback,
a 401 -> a new token, errors after the start polled through, and no metadata service
(a closed port, a port that never answers, a server that is no IMDS) -> off within about
`timeout_s`, quietly."""

import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from imds_server import ImdsServer
from tritonrl.runs import StopSignals
from tritonrl.runs.spot import ACTION_PATH, TOKEN_PATH, SpotWatcher, watch_spot

FAST = 0.05  # the polling interval of the tests


def _until(predicate, timeout: float = 10.0, what: str = "it"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"no {what} within {timeout} s")


@pytest.fixture
def imds():
    with ImdsServer() as server:
        yield server


class Calls(list):
    """on_notice that records its calls."""

    def __call__(self, action: dict) -> None:
        self.append(action)


def test_it_takes_a_token_then_polls_with_it(imds):
    calls = Calls()
    with SpotWatcher(calls, endpoint=imds.url, interval_s=FAST) as watcher:
        assert imds.wait_for(ACTION_PATH, count=3)
        assert watcher.active
    assert watcher.join(5) and not watcher.active
    seen = imds.requests
    assert (seen[0].method, seen[0].path) == ("PUT", TOKEN_PATH)
    assert seen[0].headers["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    assert "x-aws-ec2-metadata-token" not in seen[0].headers
    polls = seen[1:]
    assert polls and all((r.method, r.path) == ("GET", ACTION_PATH) for r in polls)
    assert {r.headers["x-aws-ec2-metadata-token"] for r in polls} == {imds.tokens[0]}
    assert imds.tokens == [imds.tokens[0]] and calls == []


def test_a_notice_calls_on_notice_once_and_ends_the_polling(imds):
    calls = Calls()
    watcher = SpotWatcher(calls, endpoint=imds.url, interval_s=FAST).start()
    assert imds.wait_for(ACTION_PATH)
    sent = imds.notice("terminate")
    assert watcher.join(5), "the watcher goes on after a notice"
    assert calls == [sent] == [watcher.notice]
    assert sent["action"] == "terminate" and sent["time"].endswith("Z")
    assert not watcher.active
    polls = len(imds.requests)
    time.sleep(5 * FAST)
    assert len(imds.requests) == polls and calls == [sent]


def test_a_401_fetches_a_new_token(imds):
    calls = Calls()
    with SpotWatcher(calls, endpoint=imds.url, interval_s=FAST) as watcher:
        assert imds.wait_for(ACTION_PATH)
        imds.expire_tokens()
        assert imds.wait_for(TOKEN_PATH, count=2, method="PUT")
        polls = sum(r.path == ACTION_PATH for r in imds.requests)
        assert imds.wait_for(ACTION_PATH, count=polls + 1)  # a poll with the new token
        imds.notice()
        assert watcher.join(5)
    assert len(calls) == 1
    seen = imds.requests
    renewal = max(i for i, r in enumerate(seen) if r.method == "PUT")
    refused = seen[renewal - 1]  # the poll with the old token, answered 401
    assert refused.headers["x-aws-ec2-metadata-token"] == imds.tokens[0]
    after = seen[renewal + 1 :]
    assert after and all(r.headers["x-aws-ec2-metadata-token"] == imds.tokens[1] for r in after)


def test_errors_after_the_start_are_polled_through(imds, caplog):
    calls = Calls()
    caplog.set_level(logging.DEBUG, logger="tritonrl.runs.spot")
    with SpotWatcher(calls, endpoint=imds.url, interval_s=FAST) as watcher:
        assert imds.wait_for(ACTION_PATH)
        imds.fail_next(3, status=503)
        polls = sum(r.path == ACTION_PATH for r in imds.requests)
        assert imds.wait_for(ACTION_PATH, count=polls + 4)  # 3 failed, 1 answered
        assert watcher.active
        imds.notice()
        assert watcher.join(5)
    assert len(calls) == 1
    assert any("503" in r.getMessage() for r in caplog.records)
    assert all(r.levelno <= logging.DEBUG for r in caplog.records)


def test_the_endpoint_comes_from_the_environment(imds, monkeypatch):
    monkeypatch.setenv("TRITONRL_IMDS_ENDPOINT", imds.url + "/")
    watcher = SpotWatcher(Calls(), interval_s=FAST)
    assert watcher.endpoint == imds.url
    with watcher:
        assert imds.wait_for(ACTION_PATH)
    assert SpotWatcher(Calls(), endpoint="http://127.0.0.1:1").endpoint == "http://127.0.0.1:1"
    monkeypatch.delenv("TRITONRL_IMDS_ENDPOINT")
    assert SpotWatcher(Calls()).endpoint == "http://169.254.169.254"


def test_no_callback_after_stop(imds):
    calls = Calls()
    watcher = SpotWatcher(calls, endpoint=imds.url, interval_s=FAST).start()
    assert imds.wait_for(ACTION_PATH)
    watcher.stop()
    assert not watcher.active
    imds.notice()
    assert watcher.join(5)
    assert calls == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NotImds(BaseHTTPRequestHandler):
    """A web server on the address: a 200 page for every method (a captive portal)."""

    def log_message(self, *args) -> None:
        pass

    def _page(self) -> None:
        body = b"<html><body>Welcome</body></html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = _page


@pytest.fixture(params=["closed port", "silent port", "not imds", "501 to all"])
def nothing(request):
    """An endpoint where no metadata service answers."""
    if request.param == "closed port":
        yield f"http://127.0.0.1:{_closed_port()}"
    elif request.param == "silent port":  # accepts connections, never answers
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            yield f"http://127.0.0.1:{s.getsockname()[1]}"
    else:
        handler = _NotImds if request.param == "not imds" else BaseHTTPRequestHandler
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()
        server.server_close()


def test_without_a_metadata_service_it_turns_itself_off_quietly(nothing, caplog):
    caplog.set_level(logging.DEBUG, logger="tritonrl.runs.spot")
    calls = Calls()
    timeout_s = 0.5
    began = time.monotonic()
    watcher = SpotWatcher(calls, endpoint=nothing, interval_s=FAST, timeout_s=timeout_s)
    watcher.start()
    assert time.monotonic() - began < 0.1, "start() waits for the metadata service"
    assert watcher.join(timeout_s + 1.0), "the give-up takes longer than timeout_s"
    assert not watcher.active and calls == []
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "spot watcher off" in caplog.records[0].getMessage()


def test_watch_spot_asks_the_stage_to_stop_at_the_next_step(imds):
    with StopSignals() as stop, stop.graceful():
        with watch_spot(stop, endpoint=imds.url, interval_s=FAST) as watcher:
            assert imds.wait_for(ACTION_PATH)
            assert stop.signal is None
            imds.notice()
            _until(lambda: stop.signal, what="stop.signal")
        assert watcher.join(5)
    assert stop.signal == "spot-notice"
