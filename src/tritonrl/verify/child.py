"""A verifier service of this process's own: a `tritonrl serve` started as a child, on
loopback, behind a fresh token, for a trainer whose reward should not run in its process.

    with child_service(config, workers=8, log_path="runs/demo/rl/verifier.log") as served:
        reward = make_trl_reward(tasks, served)     # served: config with its endpoint

The verifier's trusted side (extraction, static checks, the reference's passes, comparing
outputs) otherwise runs in threads of the trainer's process, sharing its interpreter lock
and its CUDA streams with the update's kernel launches. The child is a process of its
own on the same GPUs (the same environment), with its own pool of lanes under the same
`VerifyConfig`. The trainer's hold on its GPU is taken in the child's gate
(`RemoteGate`, through the child's /gate/hold and /gate/release, which a public
`tritonrl serve` does not offer): the child's timing phases wait for it, and its lanes
fill those waits, as they do for a holder of their own process (held across processes
instead, a timing phase waiting for the trainer would keep every lane out meanwhile).

The child reads its settings and token from its stdin (nothing in its command line or
environment), serves on a free loopback port, writes its address to a file once it
answers, and stops when its stdin closes: when the parent leaves `child_service`, and
when the parent dies however it dies, so no child outlives its trainer. It runs in a
session of its own, so a Ctrl-C or a pre-emption's SIGTERM to the trainer's process
group does not take the verifier away under the step the trainer is finishing. Its log
(the pool's warnings, a failure to start) goes to `log_path`.

A child that dies while in use is not restarted: the work inside `child_service` fails,
and the error (`ChildServiceError`) names the child's exit and its log's tail (the RL
stage then fails at its last checkpoint; the same command resumes with a new child).

What it does NOT do: score (the parent's reward reads the verdicts under its own
scheme) or serve anyone but its parent (the token stays in a private temporary folder).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tritonrl.config import VerifyConfig
from tritonrl.verify.client import VerifyClient, read_token
from tritonrl.verify.pool.gate import CROSS_WAIT_S

START_S = 300.0  # the longest the child may take to answer (its pool's lanes start)
STOP_S = 60.0  # the longest it may take to stop once its stdin closes
MAX_QUEUE = 1 << 16  # one client: its batches are never turned away
HOLD_WAIT_S = 2 * CROSS_WAIT_S  # the longest a hold may wait (another process's timing)


class ChildServiceError(RuntimeError):
    """The child verifier did not start, or died while in use; the message holds the
    tail of its log."""


@contextmanager
def child_service(
    config: VerifyConfig, workers: int | None = None, log_path: str | Path | None = None
) -> Iterator[VerifyConfig]:
    """A child `tritonrl serve` verifying under `config` with `workers` lanes (None: the
    pool's default); yields `config` with `endpoint` and `endpoint_token_file` naming it.
    Stopped, and its token removed, on leaving."""
    private = Path(tempfile.mkdtemp(prefix="tritonrl-child-"))  # 0700: ours alone
    token = secrets.token_urlsafe(32)
    token_file = private / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    address_file = private / "address"
    log_path = Path(log_path) if log_path else private / "verifier.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    settings = {"verify": dataclasses.asdict(config), "workers": workers, "token": token,
                "address_file": str(address_file)}  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tritonrl.verify.child"],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        with suppress(BrokenPipeError):  # died at once: _wait_ready says how
            proc.stdin.write((json.dumps(settings) + "\n").encode())
            proc.stdin.flush()
        endpoint = _wait_ready(proc, address_file, log_path)
        try:
            yield dataclasses.replace(config, endpoint=endpoint,
                                      endpoint_token_file=str(token_file))  # fmt: skip
        except Exception as e:
            if proc.poll() is None:  # alive: the failure is the caller's own
                raise
            raise ChildServiceError(
                f"the reward's verifier service (a child process) exited {proc.returncode} "
                f"while in use, and the work with it failed ({e}); its log ({log_path}) "
                f"ends:\n{_tail(log_path)}"
            ) from e
    finally:
        _stop(proc)
        shutil.rmtree(private, ignore_errors=True)


class RemoteGate:
    """The GPU gate of the child's process, held from its parent: the trainer's hold
    (`GpuHold`: the shared side under its label, or the exclusive side) taken in the
    child's gate for GPU `gpu`, so the child's timing phases wait for the trainer and its
    lanes fill the wait as they fill it for holders of their own process. The same calls
    as `GpuGate` that a hold makes: `shared(label)`, `exclusive`, `stats()`."""

    def __init__(self, served: VerifyConfig, gpu: str):
        self.gpu = gpu
        self._client = VerifyClient(served.endpoint, read_token(served.endpoint_token_file),
                                    tries=1, timeout_s=HOLD_WAIT_S)  # fmt: skip

    def shared(self, label: str = "run") -> _RemoteHold:
        return _RemoteHold(self._client, {"gpu": self.gpu, "label": label})

    @property
    def exclusive(self) -> _RemoteHold:
        return _RemoteHold(self._client, {"gpu": self.gpu, "exclusive": True})

    def stats(self) -> dict:
        return self._client.call("GET", f"/gate/stats/{self.gpu}")


class _RemoteHold:
    """One hold of a `RemoteGate`: taken on entering (waiting as the child's holders wait),
    let go on leaving."""

    def __init__(self, client: VerifyClient, body: dict):
        self._client, self._body, self._id = client, body, None

    def __enter__(self) -> float:
        answer = self._client.call("POST", "/gate/hold", self._body)
        self._id = answer["hold"]
        return answer["waited_s"]

    def __exit__(self, *exc) -> None:
        held, self._id = self._id, None
        if held is not None:
            self._client.call("POST", "/gate/release", {"hold": held})


def _wait_ready(proc: subprocess.Popen, address_file: Path, log_path: Path) -> str:
    deadline = time.monotonic() + START_S
    while not address_file.is_file():
        if proc.poll() is not None:
            raise ChildServiceError(
                f"the reward's verifier service exited {proc.returncode} before answering; "
                f"its log ({log_path}) ends:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            raise ChildServiceError(
                f"the reward's verifier service did not answer in {START_S:.0f} s; its log "
                f"({log_path}) ends:\n{_tail(log_path)}"
            )
        time.sleep(0.1)
    return address_file.read_text().strip()


def _stop(proc: subprocess.Popen) -> None:
    """Close its stdin (it stops and closes its pool), then wait; kill past STOP_S."""
    with suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"(unreadable: {e})"


def main() -> None:
    """The child: settings from the first line of stdin, serve until stdin closes."""
    from tritonrl.verify.pool.pool import VerifierPool  # lazy: the child's own imports
    from tritonrl.verify.service import VerifyService

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when it stops
    settings = json.loads(sys.stdin.readline())
    config = VerifyConfig(**settings["verify"])
    config = dataclasses.replace(config, endpoint="", endpoint_token_file="")
    pool = VerifierPool(config, settings["workers"])
    service = VerifyService(pool, "127.0.0.1", 0, settings["token"], MAX_QUEUE,
                            gate_holds=True)  # fmt: skip
    stopping = threading.Event()

    def stop(*_) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=service.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    # stdin's end: the parent left child_service, or died
    threading.Thread(target=lambda: (sys.stdin.read(), stop()), daemon=True).start()
    address = Path(settings["address_file"])
    partial = address.with_suffix(".partial")
    partial.write_text(service.address)
    os.replace(partial, address)
    lanes = f"{len(pool.lanes)} lane{'s' if len(pool.lanes) != 1 else ''}"
    print(f"verifier serving on {service.address} ({lanes}) for pid {os.getppid()}",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        service.serve_forever()
    finally:
        service.close()


if __name__ == "__main__":
    main()
