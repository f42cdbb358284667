"""The AWS spot two-minute notice, watched from a daemon thread (EC2 IMDSv2).

    with StopSignals() as stop, watch_spot(stop):     # a notice asks `stop` to stop
        ...
    watcher = SpotWatcher(on_notice=print)            # or any callback, started by hand
    watcher.start(); ...; watcher.stop()

The watcher asks the instance metadata service for a session token
(`PUT /latest/api/token`, header `X-aws-ec2-metadata-token-ttl-seconds`), then polls
`GET /latest/meta-data/spot/instance-action` with it every `interval_s` (5 s): 404 is no
notice; 401 fetches a new token at once (and the token is renewed before its TTL ends);
200 is the notice: `on_notice(action)` is called once with its JSON (e.g.
`{"action": "terminate", "time": "2026-11-24T12:00:00Z"}`) and the polling ends. The
endpoint is the argument, else `TRITONRL_IMDS_ENDPOINT`, else `http://169.254.169.254`.

Off AWS it costs nothing: `start()` returns at once, and when the first token request
finds no metadata service (refused, no answer within `timeout_s`, an answer that is no
token), the thread logs one debug line and ends. Once it has a token, errors (a timeout, a
5xx) are logged at debug and the polling goes on.

What it does NOT do: it does not checkpoint, sync or stop anything itself (`on_notice`
does; `watch_spot` hands the notice to `StopSignals.notice`), it does not watch the EC2
rebalance recommendation or scheduled events, it never goes through an HTTP proxy, and it
does not retry a first token request that failed (a machine whose IMDS answers later is
taken for a machine without one).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "http://169.254.169.254"
ENDPOINT_ENV = "TRITONRL_IMDS_ENDPOINT"
TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_TTL_S = 21600  # the longest IMDS allows; renewed a minute before it ends
NOTICE = "spot-notice"  # the stop's name (the manifest's interrupt signal)


class _NoToken(Exception):
    """The answer to a token request was no token."""


# What a request can fail with: refused, timed out, reset (OSError), not HTTP at all.
_ERRORS = (OSError, http.client.HTTPException, ValueError, _NoToken)


class SpotWatcher:
    """Polls the spot instance-action from a daemon thread; see the module docstring.

    `active` is True while it polls (a token was given and no notice, stop or give-up
    yet); `notice` is the notice's JSON once one came. `on_notice` is never called after
    `stop()` has returned, unless it was already under way.
    """

    def __init__(
        self,
        on_notice: Callable[[dict], object],
        endpoint: str | None = None,
        interval_s: float = 5.0,
        timeout_s: float = 1.0,
    ):
        self.on_notice = on_notice
        self.endpoint = (endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.notice: dict | None = None
        self._active = False
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._token: str | None = None
        self._token_at = 0.0
        # IMDS is link-local: never through HTTP(S)_PROXY.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> SpotWatcher:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="spot-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end; returns at once (a request in flight ends within
        `timeout_s`, and nothing comes of it)."""
        with self._lock:
            self._stopping.set()
            self._active = False

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; whether it did."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def __enter__(self) -> SpotWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the thread ---------------------------------------------------------------------

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body) of one request; HTTP errors are statuses, others raise OSError."""
        request = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return response.status, response.read(4096)
        except urllib.error.HTTPError as e:
            with contextlib.suppress(OSError):
                e.read()
            return e.code, b""

    def _new_token(self) -> str:
        status, body = self._request(
            "PUT", TOKEN_PATH, {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)}
        )
        token = body.decode("ascii", "replace").strip()
        # A token is one short printable word; a captive portal's page is not.
        if status != 200 or not token or len(token) > 1024 or not token.isprintable() or (
            any(c.isspace() or c in "<>" for c in token)
        ):  # fmt: skip
            raise _NoToken(f"HTTP {status} to the token request")
        self._token, self._token_at = token, time.monotonic()
        return token

    def _token_now(self) -> str:
        if self._token is None or time.monotonic() - self._token_at > TOKEN_TTL_S - 60:
            return self._new_token()
        return self._token

    def _poll(self) -> dict | None:
        """The notice, or None; one 401 renews the token and asks again."""
        for _ in range(2):
            status, body = self._request(
                "GET", ACTION_PATH, {"X-aws-ec2-metadata-token": self._token_now()}
            )
            if status == 401:
                self._token = None
                continue
            if status == 404:
                return None
            if status != 200:
                raise OSError(f"HTTP {status} from {ACTION_PATH}")
            try:
                action = json.loads(body)
            except ValueError:
                action = None
            return action if isinstance(action, dict) else {"action": body.decode(errors="replace")}
        raise OSError(f"HTTP 401 from {ACTION_PATH} with a new token")

    def _run(self) -> None:
        try:
            self._new_token()
        except _ERRORS as e:
            log.debug("no instance metadata service at %s (%s): spot watcher off", self.endpoint, e)
            return
        with self._lock:
            self._active = not self._stopping.is_set()
        log.debug("watching the spot notice at %s every %s s", self.endpoint, self.interval_s)
        while not self._stopping.is_set():
            try:
                action = self._poll()
            except _ERRORS as e:
                log.debug("spot notice poll failed (%s); polling on", e)
                action = None
            if action is not None:
                with self._lock:
                    if self._stopping.is_set():
                        return
                    self.notice, self._active = action, False
                    self._stopping.set()
                try:
                    self.on_notice(action)
                except Exception:
                    log.exception("the spot notice callback failed")
                return
            self._stopping.wait(self.interval_s)


@contextlib.contextmanager
def watch_spot(
    stop, endpoint: str | None = None, interval_s: float = 5.0, timeout_s: float = 1.0
) -> Iterator[SpotWatcher]:
    """A SpotWatcher for the body's duration whose notice asks `stop` (a `StopSignals`)
    for the stop a SIGTERM gives, named `spot-notice` (the manifest's interrupt signal)."""

    def on_notice(action: dict) -> None:
        detail = f"AWS spot notice: {action.get('action', '?')} at {action.get('time', '?')}"
        stop.notice(NOTICE, detail)

    watcher = SpotWatcher(on_notice, endpoint, interval_s, timeout_s).start()
    try:
        yield watcher
    finally:
        watcher.stop()
