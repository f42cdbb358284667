"""A real sandboxed worker session: why a worker that gave no reply died, and what its
findings log says afterwards.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.verify.session import WorkerError, WorkerSession

LOAD = {"op": "load", "device": "cpu", "policy": "strict", "allowed": []}


def _job(tmp_path: Path, code: str) -> Path:
    work = tmp_path / "work"
    (work / "sets").mkdir(parents=True)
    (work / "candidate.py").write_text(code)
    return work


def test_a_worker_killed_by_the_memory_cgroup_says_memory(tmp_path) -> None:
    """With gpu=True (as on a CUDA machine) there is no RLIMIT_AS: the memory cgroup's
    OOM kill ends a memory bomb at once, and the error says "memory", not a timeout."""
    code = "hoard = []\nwhile True:\n    hoard.append(bytearray(b'x') * (64 << 20))\n"
    session = WorkerSession(_job(tmp_path, code), VerifyConfig(memory_mb=1536), "cpu")
    session.config = dataclasses.replace(session.config, gpu=True, timeout_s=90)
    start = time.monotonic()
    with session, pytest.raises(WorkerError) as err:
        session.call(LOAD)
    assert "memory-cgroup" in session.enforced and "rlimit-as" not in session.enforced
    assert "killed (memory)" in str(err.value) and not err.value.timed_out, str(err.value)
    assert time.monotonic() - start < 45


def test_findings_written_before_a_crash_are_read_back(tmp_path) -> None:
    code = "import gc, os\ngc.get_objects()\nos.abort()\n"
    with WorkerSession(_job(tmp_path, code), VerifyConfig(), "cpu") as session:
        with pytest.raises(WorkerError, match="SIGABRT"):
            session.call(LOAD)
        found = session.findings()
    assert found == {"introspection": "gc.get_objects"}


def test_cuda_workers_get_one_hardware_queue_and_one_passive_thread_by_default():
    from tritonrl.verify.session import sandbox_config

    env = sandbox_config(VerifyConfig(), "cuda").env
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    default = sandbox_config(VerifyConfig(cuda_max_connections=0), "cuda").env
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in default  # the driver's own
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in sandbox_config(VerifyConfig(), "cpu").env
