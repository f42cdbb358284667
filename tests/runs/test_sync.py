"""The background sync: pushes when asked (interval 0) or every interval, one push at a
time, the final sync of the context manager when the body raises, and a store that goes
away mid-run (a loopback TCP proxy in front of the real S3 server, stopped and started):
warnings, retries with backoff, nothing raised, and the next push catches up."""

import contextlib
import json
import logging
import os
import socket
import threading
import time

import pytest

from tritonrl.runs import Interrupted, Run
from tritonrl.runs import checkpoint as ck
from tritonrl.runs.store import Store, open_store
from tritonrl.runs.sync import StoreSync
from tritonrl.runs.syncdir import store_status


@pytest.fixture
def bucket(s3_bucket):
    """`s3_bucket` (emptied and deleted after the test by the fixture itself)."""
    return s3_bucket


def _checkpoint(run: Run, step: int) -> None:
    folder = run.path / "sft" / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(os.urandom(2000))
    ck.seal(folder)
    if run.status("sft") == "pending":
        run.start_stage("sft")
    run.add_artifact("sft", "checkpoint", folder)
    run.set_step("sft", step)


def _stored_step(client, bucket: str) -> int | None:
    try:
        body = client.get_object(Bucket=bucket, Key="runs/demo/manifest.json")["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    return json.loads(body)["stages"]["sft"]["step"]


def _until(predicate, timeout: float = 15.0, what: str = "it"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


def test_interval_zero_pushes_only_when_asked_and_records_the_sync(s3, bucket, tmp_path):
    run = Run.create(tmp_path / "demo", {"x": 1})
    url = f"s3://{bucket}/runs/demo"
    client = s3.client()
    assert store_status(run.path) is None
    with StoreSync(run.path, url, interval_s=0) as sync:
        _checkpoint(run, 2)
        time.sleep(0.5)
        assert _stored_step(client, bucket) is None  # nothing asked yet
        sync.request()
        _until(lambda: _stored_step(client, bucket) == 2, what="pushed step 2")
        _checkpoint(run, 4)  # not asked for: the exit's final sync sends it
    assert _stored_step(client, bucket) == 4
    status = store_status(run.path)
    assert status == sync.status()
    assert status["url"] == url and status["last_error"] is None
    assert status["last_sync"]["files"] >= 3 and status["last_sync"]["at"]
    # `tritonrl status` shows the store and the last sync from this record.
    run.set_fields(store=url)
    assert Run.open(run.path).status_dict()["store"]["last_sync"] == status["last_sync"]


def test_a_positive_interval_pushes_without_being_asked(s3, bucket, tmp_path):
    run = Run.create(tmp_path / "demo", {"x": 1})
    client = s3.client()
    with StoreSync(run.path, f"s3://{bucket}/runs/demo", interval_s=0.3):
        _checkpoint(run, 2)
        _until(lambda: _stored_step(client, bucket) == 2, what="a periodic push")
        _checkpoint(run, 4)
        _until(lambda: _stored_step(client, bucket) == 4, what="a second periodic push")


ERRORS = [RuntimeError("boom"), KeyboardInterrupt(), Interrupted("SIGTERM")]


@pytest.mark.parametrize("error", ERRORS, ids=["exception", "ctrl-c", "interrupted"])
def test_the_context_manager_syncs_when_the_body_raises_then_reraises(bucket, tmp_path, s3, error):
    run = Run.create(tmp_path / "demo", {"x": 1})
    with pytest.raises(type(error)), StoreSync(run.path, f"s3://{bucket}/runs/demo", 0):
        _checkpoint(run, 6)
        raise error
    assert _stored_step(s3.client(), bucket) == 6
    seal = f"runs/demo/sft/checkpoints/checkpoint-6/{ck.SEAL}"
    assert s3.client().head_object(Bucket=bucket, Key=seal)


class SlowStore(Store):
    """A real (local) store whose uploads take a while and note how many run at once."""

    def __init__(self, store: Store, delay_s: float = 0.05):
        super().__init__(store.url, store.fs, store.root)
        self.delay_s = delay_s
        self.active = 0
        self.most = 0
        self.lock = threading.Lock()

    def upload(self, local, rel):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(self.delay_s)
        super().upload(local, rel)
        with self.lock:
            self.active -= 1


def test_sync_now_waits_for_a_push_in_flight_instead_of_running_two(tmp_path):
    run = Run.create(tmp_path / "demo", {"x": 1})
    for step in (2, 4, 6):
        _checkpoint(run, step)
    store = SlowStore(open_store((tmp_path / "store" / "demo").as_uri()))
    sync = StoreSync(run.path, store, 0)
    results = []
    threads = [threading.Thread(target=lambda: results.append(sync.sync_now())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True, True] and store.most == 1
    assert (tmp_path / "store" / "demo" / "sft/checkpoints/checkpoint-6" / ck.SEAL).is_file()


def test_sync_now_with_a_timeout_says_false_and_the_push_goes_on(tmp_path):
    run = Run.create(tmp_path / "demo", {"x": 1})
    _checkpoint(run, 2)
    store = SlowStore(open_store((tmp_path / "store" / "demo").as_uri()), delay_s=0.3)
    sync = StoreSync(run.path, store, 0)
    started = time.monotonic()
    assert sync.sync_now(timeout_s=0.1) is False
    assert time.monotonic() - started < 0.3
    assert sync.sync_now() is True  # waits for the one in flight, then pushes the rest
    assert (tmp_path / "store" / "demo" / "manifest.json").is_file()


class Proxy:
    """A loopback TCP proxy to `target`; `stop()` closes it and every connection through
    it (the store is unreachable), `start()` opens it again on the same port."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.05)
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _retry_waits(caplog) -> list[float]:
    return [float(r.getMessage().split("retrying in ")[1].split(" s")[0])
            for r in list(caplog.records) if "retrying in" in r.getMessage()]  # fmt: skip


def test_a_store_that_goes_away_mid_run_is_retried_with_backoff_and_caught_up(
    s3, bucket, tmp_path, monkeypatch, caplog
):
    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = Proxy((host, int(port)))
    proxy.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # boto's own retries: fail at once here
    run = Run.create(tmp_path / "demo", {"x": 1})
    url = f"s3://{bucket}/runs/demo"
    client = s3.client()
    sync = StoreSync(run.path, url, interval_s=0, retry_s=(0.2, 0.8)).start()
    try:
        _checkpoint(run, 2)
        assert sync.sync_now() is True
        proxy.stop()  # the store is unreachable from here on
        with caplog.at_level(logging.WARNING, logger="tritonrl.runs.sync"):
            _checkpoint(run, 4)
            sync.request()  # the training thread asks and goes on: nothing raises
            assert sync.sync_now() is False
            # the warning follows the counted failure: wait for the fourth warning itself
            _until(lambda: len(_retry_waits(caplog)) >= 4, what="four failed pushes")
        waits = _retry_waits(caplog)
        assert waits[:4] == [0.2, 0.4, 0.8, 0.8]  # doubling, capped
        assert url in caplog.text and "training goes on" in caplog.text
        failing = store_status(run.path)
        assert failing["last_error"]["error"] and failing["failures"] >= 4
        assert failing["last_sync"]["at"]  # the last sync that went through stays
        assert _stored_step(client, bucket) == 2
        proxy.start()  # back: the next retry sends everything that changed meanwhile
        _until(lambda: _stored_step(client, bucket) == 4, what="the catch-up push")
        seal = f"runs/demo/sft/checkpoints/checkpoint-4/{ck.SEAL}"
        assert client.head_object(Bucket=bucket, Key=seal)
        _until(lambda: sync.status()["failures"] == 0, what="a cleared error")
        assert store_status(run.path)["last_error"] is None
    finally:
        sync.stop()
        proxy.stop()


def test_a_stage_process_syncs_its_recorded_checkpoints_through_stage_services(tmp_path):
    from types import SimpleNamespace

    from tritonrl.runs.commands import _summary
    from tritonrl.runs.lifecycle import record_checkpoint, stage_services

    root = (tmp_path / "store").as_uri()
    config = SimpleNamespace(run=SimpleNamespace(store=root, sync_interval_s=0, spot_watch=False))
    run = Run.create(tmp_path / "demo", {"x": 1})
    run.start_stage("sft")
    stored = tmp_path / "store" / "demo"
    with stage_services(run, config):
        folder = run.path / "sft" / "checkpoints" / "checkpoint-2"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"w" * 100)
        record_checkpoint(run, "sft", folder, 2)  # seals it and wakes the sync
        _until(lambda: (stored / "sft/checkpoints/checkpoint-2" / ck.SEAL).is_file(),
               what="the checkpoint in the store")  # fmt: skip
    manifest = json.loads((stored / "manifest.json").read_text())
    assert manifest["stages"]["sft"]["artifacts"]["checkpoint"] == "sft/checkpoints/checkpoint-2"
    lines = _summary(Run.open(run.path).status_dict())
    assert any(line.startswith(f"store: {root}/demo; last sync: ") for line in lines), lines
