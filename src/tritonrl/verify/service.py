"""The verifier as an HTTP service (`tritonrl serve`), for trainers whose rollout
processes see no GPU (TRL's AsyncGRPOTrainer, verl's reward workers on other nodes).

    POST /verify   {"jobs": [{"task": TASK, "completion": TEXT}, ...]}
                -> {"results": [VerifyResult dict + "reward" (the server's scheme)]}
    GET  /health   {"status": "ok", "workers", "max_queue", "max_request_bytes", "in_flight"}

TASK is an object `{"id", "source", "level"?, "name"?, "problem_id"?}` (the reference
travels whole) or a string naming a builtin task (`builtin:level1/1_ReLU`); the server
reads no file a request names. Verdicts come from a `VerifierPool` the service owns, under
the server's `VerifyConfig`, fixed at start: a request cannot change any setting (not the
policy, the timeouts or the reward scheme), so every client gets the verdicts the server's
operator chose, the same as `verify()` in-process with that config.

Guards: with a token, every request needs `Authorization: Bearer TOKEN` (compared in
constant time) or gets 401; binding anywhere but loopback without a token is refused at
start. A body over `max_request_bytes` gets 413 unread; more completions than the queue
has room for (`max_queue`, the completions queued or being verified, all requests
together) gets 503 at once (the client backs off and tries again); bad JSON or a bad task
gets 400 with the reason. A token holder is trusted as far as a task file is: the
reference code a request sends runs in the server's trusted process, as every task's
reference does; the candidates run in the sandbox.

What it does NOT do: TLS (put it behind a proxy, or keep it on a private network) or
compute rewards itself (the caller passes `score`; the verifier computes none).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tritonrl.tasks import Task, TaskLoadError, load_source
from tritonrl.verify.client import TOKEN_HEADER
from tritonrl.verify.pool.gate import gate_for
from tritonrl.verify.pool.pool import VerifierPool, unshared
from tritonrl.verify.result import VerifyResult

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """More completions than the service's queue has room for now."""


class BadRequest(ValueError):
    """A request the service cannot take; the message says what to fix."""


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_task(spec: Any) -> Task:
    """A request's task: an object with the reference source, or a builtin task's id."""
    if isinstance(spec, str):
        if not spec.startswith("builtin:"):
            raise BadRequest(
                f"task {spec!r}: a string task must be a builtin id (builtin:level1/1_ReLU); "
                "send other tasks as {id, source, level}"
            )
        try:
            report = load_source(spec)
        except TaskLoadError as e:
            raise BadRequest(f"task {spec!r}: {e.reason}") from None
        if len(report.tasks) != 1:
            raise BadRequest(f"task {spec!r} names {len(report.tasks)} tasks, not one")
        return report.tasks[0]
    if not isinstance(spec, dict):
        raise BadRequest(f"task must be an object or a builtin id, not {type(spec).__name__}")
    if not isinstance(spec.get("id"), str) or not isinstance(spec.get("source"), str):
        raise BadRequest("task needs 'id' and 'source', both strings")
    level, problem_id = spec.get("level", 1), spec.get("problem_id")
    if not isinstance(level, int) or not (problem_id is None or isinstance(problem_id, int)):
        raise BadRequest("task 'level' and 'problem_id' must be integers")
    name = spec.get("name") or spec["id"].rsplit("/", 1)[-1]
    try:
        return Task(spec["id"], level, str(name), spec["source"], "service", problem_id)
    except (TaskLoadError, ValueError, SyntaxError) as e:
        raise BadRequest(f"task {spec['id']!r}: {e}") from None


def parse_jobs(body: Any) -> list[tuple[Task, str]]:
    """A /verify body's (task, completion) pairs; BadRequest names what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("jobs"), list):
        raise BadRequest('the body must be {"jobs": [{"task": ..., "completion": "..."}, ...]}')
    tasks: dict[str, Task] = {}
    jobs = []
    for i, job in enumerate(body["jobs"]):
        if not isinstance(job, dict) or not isinstance(job.get("completion"), str):
            raise BadRequest(f"jobs[{i}] must be an object with a string 'completion'")
        key = json.dumps(job.get("task"), sort_keys=True)
        if key not in tasks:
            try:
                tasks[key] = parse_task(job.get("task"))
            except BadRequest as e:
                raise BadRequest(f"jobs[{i}]: {e}") from None
        jobs.append((tasks[key], job["completion"]))
    return jobs


class VerifyService:
    """A running service: `start()` serves on a thread, `close()` stops it and the pool.
    `port` 0 takes a free port (`address` says which)."""

    def __init__(
        self,
        pool: VerifierPool,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        max_queue: int = 256,
        max_request_bytes: int = 16 << 20,
        score: Callable[[VerifyResult], float] | None = None,
        gate_holds: bool = False,
    ):
        if not token and not is_loopback(host):
            raise ValueError(
                f"serving on {host} (not loopback) needs a token: pass --token-file FILE "
                "or set $TRITONRL_SERVE_TOKEN, or bind 127.0.0.1"
            )
        if max_queue < 0 or max_request_bytes < 1:
            raise ValueError("max_queue must be >= 0 and max_request_bytes >= 1")
        self.pool, self.token, self.score = pool, token, score
        self.max_queue, self.max_request_bytes = max_queue, max_request_bytes
        self.in_flight = 0
        self.gate_holds = gate_holds
        self._holds: dict[int, Any] = {}  # hold id -> its entered side of a gate
        self._next_hold = 0
        self._lock = threading.Lock()
        self._server = _Server((host, port), _handler_for(self))
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @contextmanager
    def reserve(self, n: int) -> Iterator[None]:
        """Room for `n` completions in the queue while inside, or QueueFull."""
        with self._lock:
            if self.in_flight + n > self.max_queue:
                raise QueueFull(
                    f"the queue holds {self.in_flight} of {self.max_queue} completions; "
                    f"{n} more do not fit: try again later"
                )
            self.in_flight += n
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= n

    def verify(self, jobs: list[tuple[Task, str]]) -> list[dict[str, Any]]:
        """The verdicts of `jobs`, each with the reward when the service scores."""
        futures = self.pool.submit_many(jobs)
        results = unshared([f.result() for f in futures], futures)
        rows = [r.to_dict() for r in results]
        if self.score is not None:
            for row, r in zip(rows, results, strict=True):
                row["reward"] = self.score(r)
        return rows

    def hold(self, gpu: str, label: str, exclusive: bool) -> dict[str, Any]:
        """Take GPU `gpu`'s gate for a holder in the client's process (the shared side
        under `label`, or the exclusive side), waiting as this process's own holders
        wait; {"hold": id, "waited_s"}. Only with `gate_holds`."""
        gate = gate_for(gpu)
        held = gate.exclusive if exclusive else gate.shared(label)
        asked = time.monotonic()
        held.__enter__()
        with self._lock:
            hold, self._next_hold = self._next_hold, self._next_hold + 1
            self._holds[hold] = held
        return {"hold": hold, "waited_s": round(time.monotonic() - asked, 4)}

    def release(self, hold: int) -> None:
        """Let go of a hold `hold` took; an unknown id is a BadRequest."""
        with self._lock:
            held = self._holds.pop(hold, None)
        if held is None:
            raise BadRequest(f"no hold {hold!r} is held")
        held.__exit__(None, None, None)

    def release_all(self) -> None:
        """Every hold let go (the service stops: its client is gone)."""
        for hold in list(self._holds):
            with suppress(BadRequest):
                self.release(hold)

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "workers": len(self.pool.lanes),
            "max_queue": self.max_queue,
            "max_request_bytes": self.max_request_bytes,
            "in_flight": self.in_flight,
        }

    def authorized(self, header: str | None) -> bool:
        if not self.token:
            return True
        given = (header or "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), self.token.encode())

    def start(self) -> VerifyService:
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="tritonrl-serve"
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until `stop()` (from another thread)."""
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
        self.release_all()
        self.pool.close()

    def __enter__(self) -> VerifyService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler):
        host = address[0]
        if ":" in host:  # an IPv6 address
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


def _handler_for(service: VerifyService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's name
            log.info("%s %s", self.address_string(), format % args)

        def _send(self, code: int, body: dict[str, Any], close: bool = False) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, close: bool = False) -> None:
            self._send(code, {"error": message}, close)

        def _allowed(self) -> bool:
            if service.authorized(self.headers.get(TOKEN_HEADER)):
                return True
            self._error(401, "missing or wrong token (Authorization: Bearer TOKEN)", True)
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not self._allowed():
                return
            if self.path.startswith("/gate/stats/") and service.gate_holds:
                self._send(200, gate_for(self.path.removeprefix("/gate/stats/")).stats())
                return
            if self.path != "/health":
                self._error(404, f"no {self.path}: GET /health or POST /verify")
                return
            self._send(200, service.health())

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if not self._allowed():
                return
            if self.path in ("/gate/hold", "/gate/release") and service.gate_holds:
                self._gate(self.path)
                return
            if self.path != "/verify":
                self._error(404, f"no {self.path}: POST /verify or GET /health", True)
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                length = -1
            if length < 0:
                self._error(411, "a Content-Length header (a byte count) is needed", True)
                return
            if length > service.max_request_bytes:
                self._error(413, f"the body is {length} bytes; the server takes at most "
                                 f"{service.max_request_bytes} (send fewer completions)",
                            True)  # fmt: skip
                return
            try:
                jobs = parse_jobs(json.loads(self.rfile.read(length)))
            except json.JSONDecodeError as e:
                self._error(400, f"the body is not JSON: {e}")
                return
            except BadRequest as e:
                self._error(400, str(e))
                return
            try:
                with service.reserve(len(jobs)):
                    rows = service.verify(jobs)
            except QueueFull as e:
                self._error(503, str(e))
                return
            except Exception as e:  # noqa: BLE001 - the pool closed under it: say so
                log.exception("serve: verifying a request failed")
                self._error(500, f"verification failed: {e!r}")
                return
            self._send(200, {"results": rows})

        def _gate(self, path: str) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                if path == "/gate/hold":
                    answer = service.hold(str(body["gpu"]), str(body.get("label", "client")),
                                          bool(body.get("exclusive", False)))  # fmt: skip
                else:
                    service.release(int(body["hold"]))
                    answer = {"released": True}
            except (ValueError, KeyError, TypeError, BadRequest) as e:
                self._error(400, f"{path}: {e!r}")
                return
            self._send(200, answer)

    return Handler
