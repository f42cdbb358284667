"""The child verifier service (`tritonrl.verify.child`): a real child process, a real pool,
real Triton (the CPU interpreter)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify.child import ChildServiceError, RemoteGate, child_service
from tritonrl.verify.client import ServiceError, VerifyClient, client_for, read_token
from tritonrl.verify.funnel import verify

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
BAD = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
HOSTILE = (Path(__file__).parent / "hostile" / "c01_torch_relu.py").read_text()
CONFIG = VerifyConfig(device="cpu", timing=False)


def _parent_named_in(log_path: Path) -> int:
    """The parent's pid, from the line the child logs once serving."""
    for line in log_path.read_text().splitlines():
        if line.startswith("verifier serving on"):
            return int(line.split("pid ")[-1])
    raise AssertionError(f"no serving line in {log_path.read_text()[-500:]}")


def _children_running(module: str = "tritonrl.verify.child") -> list[int]:
    out = subprocess.run(["pgrep", "-f", module], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_the_child_verifies_as_this_process_would_and_stops_on_leaving(tmp_path):
    log_path = tmp_path / "verifier.log"
    before = set(_children_running())
    with child_service(CONFIG, workers=1, log_path=log_path) as served:
        assert served.endpoint.startswith("http://127.0.0.1:")
        token_file = Path(served.endpoint_token_file)
        assert token_file.stat().st_mode & 0o077 == 0  # the token is ours alone
        client = client_for(served)
        remote = client.verify_many([(RELU, GOOD), (RELU, BAD), (RELU, HOSTILE)])
        local = [verify(RELU, code, CONFIG) for code in (GOOD, BAD, HOSTILE)]
        assert [r.stage for r in remote] == [x.stage for x in local]
        assert [r.correct for r in remote] == [True, False, False]
        assert "torch_compute" in remote[2].flags
        # without the token, nobody else on the machine is served
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(served.endpoint + "/health", timeout=10)
        assert refused.value.code == 401
        assert _parent_named_in(log_path) == os.getpid()
        running = set(_children_running()) - before
        assert len(running) == 1
    (child,) = running
    deadline = time.monotonic() + 30
    while child in _children_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert child not in _children_running()
    assert not token_file.exists()
    with pytest.raises(urllib.error.URLError):  # nothing listens there any more
        urllib.request.urlopen(served.endpoint + "/health", timeout=5)


def test_the_child_stops_when_its_parent_is_killed(tmp_path):
    """A parent killed with SIGKILL runs no cleanup; its child sees stdin close and stops."""
    address = tmp_path / "address"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from tritonrl.config import VerifyConfig
        from tritonrl.verify.child import child_service
        with child_service(VerifyConfig(device="cpu"), 1, {str(tmp_path / "v.log")!r}) as s:
            Path({str(address)!r}).write_text(s.endpoint + " " + s.endpoint_token_file)
            time.sleep(600)
        """)])  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not address.is_file() and time.monotonic() < deadline:
            assert parent.poll() is None, (tmp_path / "v.log").read_text()[-2000:]
            time.sleep(0.2)
        endpoint, token_file = address.read_text().split()
        client = VerifyClient(endpoint, read_token(token_file), tries=1)
        assert client.health()["status"] == "ok"
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client.health()
        except Exception:  # noqa: BLE001 - refused: the child is gone
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the child still answers 60 s after its parent was killed")


def test_a_child_that_cannot_start_says_why(tmp_path, monkeypatch):
    """A child that dies before answering: the error holds its log's tail."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # a tritonrl that cannot be imported
    (tmp_path / "tritonrl").mkdir()
    (tmp_path / "tritonrl" / "__init__.py").write_text("raise ImportError('no such build')\n")
    said = "exited 1 before answering(?s:.*)no such build"
    with pytest.raises(ChildServiceError, match=said), child_service(CONFIG, 1, tmp_path / "v"):
        pass


def test_a_hold_taken_from_the_parent_is_a_holder_of_the_childs_gate(tmp_path):
    """The trainer's hold in the child's gate: an exclusive hold there keeps a shared one
    waiting until it is let go, and the child's gate counts the window; an id that is not
    held is refused; a plain `tritonrl serve` has no holds to give."""
    with child_service(CONFIG, workers=1, log_path=tmp_path / "v.log") as served:
        gate = RemoteGate(served, "0")
        entered = threading.Event()

        def shared_hold():
            with gate.shared("trainer"):
                entered.set()

        with gate.exclusive:
            waiter = threading.Thread(target=shared_hold)
            waiter.start()
            assert not entered.wait(1.0)  # the timing side holds the GPU alone
        assert entered.wait(30)
        waiter.join()
        stats = gate.stats()
        assert stats["windows"] == 1 and stats["shared"]["trainer"]["holds"] == 1
        client = client_for(served)
        with pytest.raises(ServiceError, match="400 .*no hold 99 is held"):
            client.call("POST", "/gate/release", {"hold": 99})


def test_a_public_service_gives_no_gate_holds():
    from tritonrl.verify.pool.pool import VerifierPool
    from tritonrl.verify.service import VerifyService

    with VerifyService(VerifierPool(CONFIG, 1)) as service:
        client = VerifyClient(service.address, tries=1)
        with pytest.raises(ServiceError, match="404"):
            client.call("POST", "/gate/hold", {"gpu": "0"})
        with pytest.raises(ServiceError, match="404"):
            client.call("GET", "/gate/stats/0")
