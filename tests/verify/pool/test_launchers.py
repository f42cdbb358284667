"""The shared store of Triton's C modules, the trusted side: the bounded reading of a
job's (untrusted) request file, links and FIFOs refused, the builder run. The worker's
hook and the signature check: tests/verify/inside/test_launcher_cache.py; the real
launchers on a GPU: the pool's GPU tests.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from tritonrl.verify.inside.launcher_cache import REQUESTS
from tritonrl.verify.pool.launchers import LauncherStore

pytest.importorskip("triton.backends.nvidia.driver")


def _wait_stats(store: LauncherStore) -> dict:
    store.wait()
    return dict(store.stats)


def test_store_reads_a_jobs_requests_bounded(tmp_path):
    store = LauncherStore(tmp_path / "store")
    job = tmp_path / "job"
    job.mkdir()
    lines = [
        json.dumps({"launcher": ["*fp32", "*fp32", "i32", "constexpr"]}),
        json.dumps({"launcher": ["*fp32", "*fp32", "i32", "constexpr"]}),  # a repeat
        "not json",
        json.dumps({"launcher": ["*fp32; rm -rf /"]}),
        json.dumps({"launcher": ["*bf16", "i64"]}),  # the 5th line: over the cap
    ]
    (job / REQUESTS).write_text("\n".join(lines) + "\n")
    try:
        store.take(job)
        stats = _wait_stats(store)
        assert stats["requested"] == 1  # the repeat taken once, the 5th line not read
        assert stats["refused"] == 2
        # The builder really ran: on this machine (no libcuda) it fails, and says so.
        assert stats["built"] + stats["failed"] == 1
        store.take(job)  # the same job again: nothing new is queued
        assert _wait_stats(store)["requested"] == 1
    finally:
        store.close()


def test_store_ignores_links_and_fifos(tmp_path):
    store = LauncherStore(tmp_path / "store")
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"launcher": ["i32"]}) + "\n")
    linked, fifo = tmp_path / "linked", tmp_path / "fifo"
    linked.mkdir()
    fifo.mkdir()
    (linked / REQUESTS).symlink_to(secret)
    os.mkfifo(fifo / REQUESTS)  # a blocking open would hang the lane's thread
    try:
        done = threading.Event()
        worker = threading.Thread(
            target=lambda: (store.take(linked), store.take(fifo), done.set()), daemon=True
        )  # fmt: skip
        worker.start()
        assert done.wait(10), "reading a job's FIFO blocked the trusted side"
        assert _wait_stats(store)["requested"] == 0
    finally:
        store.close()
