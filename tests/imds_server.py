"""A real EC2 instance metadata service (IMDSv2) on loopback, as far as tritonrl uses it:
the session token and the spot instance-action (`tritonrl.runs.spot`).

    from imds_server import ImdsServer          # tests/ is on sys.path (no __init__.py)

    with ImdsServer() as imds:
        monkeypatch.setenv("TRITONRL_IMDS_ENDPOINT", imds.url)   # http://127.0.0.1:PORT
        ...                                      # the watcher polls: 404, no notice yet
        imds.notice()                            # now 200 {"action": "terminate", "time": ...}
        imds.wait_for(imds.ACTION_PATH)          # a request for it has arrived
        imds.requests                            # every request seen: method, path, headers

The protocol, as AWS documents it:

* `PUT /latest/api/token` with header `X-aws-ec2-metadata-token-ttl-seconds` (1..21600)
  answers a token (text) and echoes the TTL header; 400 without the header or with a bad
  TTL; 403 with `X-Forwarded-For` (IMDS refuses tokens through a proxy).
* `GET /latest/meta-data/spot/instance-action` needs header `X-aws-ec2-metadata-token`
  equal to a token it gave (401 otherwise, or after `expire_tokens()`); 404 until
  `notice(action, time)` is called, then 200 with `{"action": ..., "time": ...}` (the
  time two minutes ahead, `%Y-%m-%dT%H:%M:%SZ`, unless given).
* Anything else: 404.

API (kept stable: other tests import it): `ImdsServer()`; `start()`/`close()` or the
context manager; `url`; `notice(action="terminate", time=None)`; `clear_notice()`;
`expire_tokens()`; `fail_next(count=1, status=500)` (the next requests answer `status`);
`tokens` (those given, in order); `requests` (a copy of the list of
`Seen(method, path, headers)`, header names in lower case); `wait_for(path, count=1,
timeout=10.0, method=None) -> bool`.

What it does NOT do: no token expiry by time (only `expire_tokens()`), no other metadata
paths, no IMDSv1 answers without a token, no hop-limit (TTL 1) emulation.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"


@dataclass(frozen=True)
class Seen:
    """One request the server saw; `headers` keyed by lower-case name."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


class ImdsServer:
    TOKEN_PATH = TOKEN_PATH
    ACTION_PATH = ACTION_PATH

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._requests: list[Seen] = []
        self._valid: set[str] = set()
        self.tokens: list[str] = []
        self.action: dict | None = None
        self._failures: list[int] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the test's side ---------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the IMDS server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self._requests)

    def notice(self, action: str = "terminate", time: str | None = None) -> dict:
        """From now on the instance-action answers 200 with this notice (returned)."""
        if time is None:
            when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=2)
            time = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            self.action = {"action": action, "time": time}
            return dict(self.action)

    def clear_notice(self) -> None:
        with self._lock:
            self.action = None

    def expire_tokens(self) -> None:
        """Every token given so far answers 401 from now on."""
        with self._lock:
            self._valid.clear()

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        """The next `count` requests (any path) answer `status` with no body."""
        with self._lock:
            self._failures += [status] * count

    def wait_for(
        self, path: str, count: int = 1, timeout: float = 10.0, method: str | None = None
    ) -> bool:
        """Whether `count` requests for `path` (and `method`) arrived within `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                seen = [r for r in self._requests
                        if r.path == path and (method is None or r.method == method)]  # fmt: skip
                if len(seen) >= count:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)

    def start(self) -> ImdsServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="imds-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)

    def __enter__(self) -> ImdsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the handler's side -------------------------------------------------------------

    def _record(self, seen: Seen) -> int | None:
        """Record a request; the status to fail it with, if one is due."""
        with self._lock:
            self._requests.append(seen)
            self._lock.notify_all()
            return self._failures.pop(0) if self._failures else None

    def _new_token(self) -> str:
        token = secrets.token_urlsafe(42)
        with self._lock:
            self._valid.add(token)
            self.tokens.append(token)
        return token

    def _valid_token(self, token: str | None) -> bool:
        with self._lock:
            return token is not None and token in self._valid


def _handler(imds: ImdsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args) -> None:  # quiet: the tests read `requests`
            pass

        def _seen(self) -> bool:
            """Record the request; whether it is answered (False: failed as asked)."""
            headers = {k.lower(): v for k, v in self.headers.items()}
            failure = imds._record(Seen(self.command, self.path, headers))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if failure is not None:
                self._answer(failure)
            return failure is None

        def _answer(self, status: int, body: str = "", headers: dict | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            if not self._seen():
                return
            if self.path != TOKEN_PATH:
                return self._answer(404)
            if self.headers.get("X-Forwarded-For"):
                return self._answer(403)
            ttl = self.headers.get(TTL_HEADER, "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return self._answer(400)
            self._answer(200, imds._new_token(), {TTL_HEADER: ttl})

        def do_GET(self) -> None:
            if not self._seen():
                return
            if self.path != ACTION_PATH:
                return self._answer(404)
            if not imds._valid_token(self.headers.get(TOKEN_HEADER)):
                return self._answer(401)
            with imds._lock:
                action = imds.action
            if action is None:
                return self._answer(404)
            self._answer(200, json.dumps(action))

        def do_POST(self) -> None:
            if self._seen():
                self._answer(405)

    return Handler
