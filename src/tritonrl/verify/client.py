"""The client of the verifier service (`tritonrl serve`, `tritonrl.verify.service`).

    client = VerifyClient("http://10.0.0.5:8765", token)
    results = client.verify_many([(task, completion), ...])   # -> [VerifyResult], in order

The reward adapters, `tritonrl verify` (one candidate and `--batch`) and `tritonrl eval`
use it instead of their in-process pool when `verify.endpoint` is set (`client_for(config)`;
or $TRITONRL_VERIFY_ENDPOINT). Each task travels whole (id, level, name, source), so the server
needs none of the client's files. A batch larger than the server's queue is sent in
pieces of that size. A connection error or a full queue (503) is tried again with a
doubling back-off; after `tries` attempts `ServiceError` names the endpoint and the last
failure. A refused token (401) or a refused request (400, 413) is not tried again.

`preflight(config)` asks the service's /health once, with the token, before a stage
loads its model (`tritonrl rl`, `tritonrl eval`): a wrong endpoint, a server that is not
running or a refused token stops the stage in one line naming the endpoint, what failed
(connection refused, 401, a timeout) and what to do, instead of at the first reward.

What it does NOT do: verify anything itself, or choose the verifier's settings (the
server's config decides them; see the service's docstring).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tritonrl.config import VerifyConfig
from tritonrl.tasks import Task
from tritonrl.verify.result import VerifyResult

TOKEN_ENV = "TRITONRL_SERVE_TOKEN"
ENDPOINT_ENV = "TRITONRL_VERIFY_ENDPOINT"
TOKEN_HEADER = "Authorization"
PREFLIGHT_TIMEOUT_S = 10.0  # a `tritonrl serve` answers /health at once, even when busy


class ServiceError(RuntimeError):
    """The verifier service did not answer, or refused the request; the message says
    which endpoint and why."""


def read_token(token_file: str | Path | None = None) -> str | None:
    """The token in `token_file` (stripped), else $TRITONRL_SERVE_TOKEN, else None."""
    if token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ValueError(f"token file {token_file}: {e.strerror or e}") from None
        if not token:
            raise ValueError(f"token file {token_file} is empty; write the token into it")
        return token
    return os.environ.get(TOKEN_ENV) or None


def task_payload(task: Task) -> dict[str, Any]:
    """A task as the service takes it: everything needed to rebuild it there."""
    return {"id": task.id, "level": task.level, "name": task.name, "source": task.source,
            "problem_id": task.problem_id}  # fmt: skip


def _text(completion: str | bytes) -> str:
    if isinstance(completion, bytes):
        return completion.decode("utf-8", errors="replace")
    return completion


class VerifyClient:
    """Verifies through a `tritonrl serve` at `endpoint` (http://host:port)."""

    def __init__(
        self,
        endpoint: str,
        token: str | None = None,
        tries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 3600.0,
    ):
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"verifier endpoint must be an http(s):// URL, not {endpoint!r}")
        if tries < 1:
            raise ValueError(f"tries must be at least 1, not {tries}")
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.tries = tries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s  # a whole batch's verification, queueing included
        self._max_queue: int | None = None

    def health(self) -> dict[str, Any]:
        """The server's /health answer: status, workers, max_queue, max_request_bytes."""
        return self.call("GET", "/health", None)

    def verify_many(self, jobs: list[tuple[Task, str | bytes]]) -> list[VerifyResult]:
        """Every (task, completion)'s verdict, in order, as the server's pool gives it."""
        if not jobs:
            return []
        if self._max_queue is None:
            self._max_queue = max(1, int(self.health()["max_queue"]))
        results: list[VerifyResult] = []
        for start in range(0, len(jobs), self._max_queue):
            piece = jobs[start : start + self._max_queue]
            body = {"jobs": [{"task": task_payload(t), "completion": _text(c)} for t, c in piece]}
            answer = self.call("POST", "/verify", body)
            results += [VerifyResult.from_dict(r) for r in answer["results"]]
        return results

    def imap(
        self, jobs: list[tuple[Task, str | bytes]], chunk: int = 64
    ) -> Iterator[tuple[int, VerifyResult]]:
        """(index, verdict) of every job, in order, `chunk` jobs a request: a caller writes
        rows as each request comes back instead of after the whole list."""
        for start in range(0, len(jobs), chunk):
            for k, r in enumerate(self.verify_many(jobs[start : start + chunk])):
                yield start + k, r

    def call(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        """`method` `path` with the JSON `body`, tried as the class says; the JSON answer."""
        url = self.endpoint + path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers[TOKEN_HEADER] = f"Bearer {self.token}"
        last = ""
        for attempt in range(self.tries):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as e:
                reason = _reason(e)
                if e.code != 503:
                    raise ServiceError(f"verifier service {url}: {e.code} {reason}") from None
                last = f"503 {reason}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = str(getattr(e, "reason", None) or e)
        raise ServiceError(
            f"verifier service {url}: no answer after {self.tries} tries ({last}); is "
            "`tritonrl serve` running there, and is verify.endpoint right?"
        )


def _reason(e: urllib.error.HTTPError) -> str:
    try:
        return json.loads(e.read()).get("error", e.reason)
    except Exception:  # noqa: BLE001 - any unreadable body: the status line's reason
        return str(e.reason)


def client_for(config: VerifyConfig) -> VerifyClient | None:
    """The client `config.endpoint` (or $TRITONRL_VERIFY_ENDPOINT) names, or None: verify
    in this process."""
    endpoint = config.endpoint or os.environ.get(ENDPOINT_ENV, "")
    if not endpoint:
        return None
    return VerifyClient(endpoint, read_token(config.endpoint_token_file))


def preflight(config: VerifyConfig, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> dict | None:
    """The /health answer of the service `config` names (verify.endpoint, else
    $TRITONRL_VERIFY_ENDPOINT), asked once with the configured token; None when there is
    no endpoint (verification in this process). A ServiceError in one line otherwise: the
    endpoint, what failed, and how to fix it."""
    client = client_for(config)
    if client is None:
        return None
    where = "verify.endpoint" if config.endpoint else f"${ENDPOINT_ENV}"
    url = client.endpoint + "/health"
    headers = {TOKEN_HEADER: f"Bearer {client.token}"} if client.token else {}
    try:
        request = urllib.request.Request(url, headers=headers, method="GET")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise ServiceError(_refusal(url, e, config, client.token, where)) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ConnectionRefusedError):
            what = (f"connection refused (nothing listens there): start `tritonrl serve "
                    f"--host HOST --port PORT` on that machine, or correct {where}")  # fmt: skip
        elif isinstance(reason, TimeoutError) or "timed out" in str(reason):
            what = (f"timeout (no answer in {timeout_s:g}s): check the host and port in "
                    f"{where} and that no firewall drops them; a `tritonrl serve` answers "
                    "/health at once")  # fmt: skip
        else:
            what = f"cannot connect ({reason}): check the host and port in {where}"
        raise ServiceError(f"verifier service {url}: {what}") from None
    except ValueError:  # not JSON
        answer = None
    if not isinstance(answer, dict) or answer.get("status") != "ok":
        raise ServiceError(
            f"verifier service {url}: answered, but not as `tritonrl serve` does "
            f"({str(answer)[:80]!r}); check that {where} names a `tritonrl serve`"
        )
    return answer


def _refusal(
    url: str, e: urllib.error.HTTPError, config: VerifyConfig, token: str | None, where: str
) -> str:
    """The one-line message of a /health the server refused."""
    if e.code in (401, 403):
        sent = (f"the token in verify.endpoint_token_file {config.endpoint_token_file}"
                if config.endpoint_token_file
                else f"${TOKEN_ENV}" if token else "no token")  # fmt: skip
        return (
            f"verifier service {url}: {e.code} bad token (sent {sent}): set "
            f"verify.endpoint_token_file (or ${TOKEN_ENV}) to the token `tritonrl serve` "
            f"was started with (its --token-file or ${TOKEN_ENV})"
        )
    return (f"verifier service {url}: {e.code} {_reason(e)}; check that {where} names a "
            "`tritonrl serve` (http://HOST:PORT)")  # fmt: skip
