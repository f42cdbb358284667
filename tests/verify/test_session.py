"""A real sandboxed worker session: why a worker that gave no reply died, and what its
findings log says afterwards; the bounded reader of a worker's replies, and the
`Session` interface that a fresh worker and a pool lane's job both offer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.verify import sandbox as sb
from tritonrl.verify.session import (
    FreshSessions,
    ReplyReader,
    Session,
    SessionFactory,
    WorkerError,
    WorkerSession,
    died_error,
    limit_text,
    parse_reply,
    reply_limit,
    timeout_error,
)

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
    assert err.value.limit == "memory" and not err.value.timed_out, str(err.value)
    assert str(err.value).startswith(
        "the worker was killed by the memory limit (verify.memory_mb = 1536 MB; raise it "
        "with --verify.memory_mb or in the config's verify section) before answering"
    ), str(err.value)
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


def test_a_hung_worker_says_which_limit_and_how_to_raise_it(tmp_path) -> None:
    code = "import time\ntime.sleep(3600)\n"
    session = WorkerSession(_job(tmp_path, code), VerifyConfig(timeout_s=3), "cpu")
    with session, pytest.raises(WorkerError) as err:
        session.call(LOAD)
    assert err.value.limit == "timeout" and err.value.timed_out
    assert str(err.value) == (
        "timed out after 3 s: killed by the wall-clock limit (verify.timeout_s = 3 s; "
        "raise it with --verify.timeout_s or in the config's verify section)"
    )


@pytest.mark.parametrize(
    ("code", "stderr", "limit", "says"),
    [
        (-9, "", "memory", "the memory limit (verify.memory_mb = 2048 MB; raise it with "
         "--verify.memory_mb or in the config's verify section)"),
        (-24, "", "cpu_time", "the CPU-time limit of 7 s (verify.timeout_s = 3 s, times the "
         "cores; raise it with --verify.timeout_s"),
        (-25, "", "file_size", "the file-size limit (300 MB a file, sized from the task's "
         "outputs)"),
        (1, "OSError: [Errno 27] File too large", "file_size", "the file-size limit (300 MB"),
        (1, "RuntimeError: can't start new thread", "processes", "the process limit "
         "(verify.max_procs = 16 processes and threads; raise it with --verify.max_procs"),
        (-11, "", None, "the worker killed (signal 11 (SIGSEGV)) before answering"),
        (3, "ValueError: no", None, "the worker exited with status 3 before answering"),
    ],
)  # fmt: skip
def test_a_worker_killed_by_a_limit_says_which_and_how_to_raise_it(code, stderr, limit, says):
    box = sb.SandboxConfig(timeout_s=3, memory_mb=2048, max_procs=16, max_file_mb=300, cpu_s=7)
    err = died_error(code, stderr, oom_killed=code == -9, sandbox=box)
    assert err.limit == limit and not err.timed_out
    assert says in str(err), str(err)
    if limit:
        assert str(err).startswith(f"the worker was killed by {limit_text(limit, box)}")


def test_the_pool_names_its_own_file_size_limit() -> None:
    box = sb.SandboxConfig(max_file_mb=256)
    err = died_error(-25, "", sandbox=box, pool=True)
    assert err.limit == "file_size"
    assert "the file-size limit of the pool's lanes (256 MB a file: verify.max_file_mb" in str(err)
    assert "raise it with --verify.max_file_mb" in str(err)
    assert "timed out after 6 s: killed by the wall-clock limit (verify.timeout_s = 6 s" in str(
        timeout_error(6, box)
    )


def test_the_sandboxs_limits_are_verify_configs(tmp_path) -> None:
    """One source of the limits: a sandbox made with its defaults, a fresh worker's and a
    pool lane's for a default `VerifyConfig` all run under `VerifyConfig`'s values."""
    from tritonrl.verify.pool.lane import Lane

    verify = VerifyConfig(device="cpu")
    want = (verify.timeout_s, verify.memory_mb, verify.max_procs, verify.max_file_mb)
    lane = Lane(0, tmp_path / "lane", tmp_path / "cache", verify, "cpu")
    boxes = {
        "default": sb.SandboxConfig(),
        "fresh worker": WorkerSession(tmp_path, verify, "cpu").config,
        "pool lane": lane.sandbox,
    }
    for name, box in boxes.items():
        assert (box.timeout_s, box.memory_mb, box.max_procs, box.max_file_mb) == want, name
        assert box.strict == verify.sandbox_strict, name
    # a limit's message without the worker's sandbox names the default verify gives
    assert f"verify.timeout_s = {verify.timeout_s:g} s" in limit_text("timeout")


def test_the_file_size_limit_is_verify_max_file_mb(tmp_path) -> None:
    from tritonrl.verify.pool.lane import Lane, pool_file_mb

    roomy = VerifyConfig(device="cpu", max_file_mb=300)
    assert WorkerSession(tmp_path, roomy, "cpu").config.max_file_mb == 300
    assert Lane(0, tmp_path / "lane", tmp_path / "cache", roomy, "cpu").sandbox.max_file_mb == 300
    assert pool_file_mb(roomy, "cuda") == 8192  # room for full-size outputs on CUDA
    assert pool_file_mb(VerifyConfig(max_file_mb=10000), "cuda") == 10000
    with pytest.raises(ValueError, match="verify.max_file_mb"):
        VerifyConfig(max_file_mb=0)


def test_a_failed_reply_names_the_limit_its_error_says_was_hit() -> None:
    def failed(error):
        return {"ok": False, "error": error}

    assert reply_limit(failed("MemoryError:  (candidate.py line 29)")) == "memory"
    assert reply_limit(failed("RuntimeError: DefaultCPUAllocator: can't allocate memory")) == (
        "memory"
    )
    assert reply_limit(failed("OSError: [Errno 27] File too large")) == "file_size"
    assert reply_limit(failed("RuntimeError: can't start new thread")) == "processes"
    assert reply_limit(failed("ValueError: shapes differ")) is None
    assert reply_limit({"ok": True, "error": "MemoryError"}) is None
    assert reply_limit(failed(None)) is None


def test_a_cuda_allocation_refused_is_the_gpus_memory_not_the_host_limit():
    from tritonrl.verify.session import limit_text, reply_limit

    error = "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB."
    assert reply_limit({"ok": False, "error": error}) == "gpu_memory"
    assert "verify.memory_mb" not in limit_text("gpu_memory")
    assert reply_limit({"ok": False, "error": "MemoryError: cannot allocate"}) == "memory"


class _Ended(Exception):
    pass


class _TimedOut(Exception):
    pass


@pytest.fixture
def pipe():
    """A reader on a pipe's read end, and the write end's fd."""
    r, w = os.pipe()
    stream = os.fdopen(r, "rb", buffering=0)
    readers: list[ReplyReader] = []

    def reader(limit: int = 1 << 20) -> ReplyReader:
        readers.append(ReplyReader(stream, limit))
        return readers[-1]

    yield reader, w
    for each in readers:
        each.close()
    stream.close()
    with contextlib.suppress(OSError):  # unless the test closed it
        os.close(w)


def _line(reader: ReplyReader, seconds: float = 10.0) -> bytes:
    return reader.line(time.monotonic() + seconds, _TimedOut, _Ended)


def test_a_reply_split_across_reads_is_read_whole_and_the_rest_kept(pipe) -> None:
    make, w = pipe
    reader = make()
    os.write(w, b'{"ok": tr')
    later = threading.Timer(0.3, os.write, (w, b'ue}\n{"next"'))
    later.start()
    assert _line(reader) == b'{"ok": true}'
    later.join()
    os.write(w, b": 1}\n")
    assert _line(reader) == b'{"next": 1}'


def test_a_reply_over_the_bound_ends_the_session(pipe) -> None:
    make, w = pipe
    reader = make(limit=16)
    os.write(w, b"x" * 15 + b"\n")  # at the bound, its newline included
    assert _line(reader) == b"x" * 15
    os.write(w, b"y" * 17)
    with pytest.raises(WorkerError, match="oversized reply"):
        _line(reader)


def test_a_stream_that_ends_before_a_newline_is_the_callers_ended(pipe) -> None:
    make, w = pipe
    reader = make()
    os.write(w, b'{"ok": true}')
    os.close(w)
    with pytest.raises(_Ended):
        _line(reader)


def test_a_reply_that_never_comes_is_the_callers_timed_out(pipe) -> None:
    make, w = pipe
    reader = make()
    os.write(w, b'{"ok": ')  # a partial line does not count
    start = time.monotonic()
    with pytest.raises(_TimedOut):
        _line(reader, seconds=0.3)
    assert time.monotonic() - start < 3


@pytest.mark.parametrize(
    ("line", "error"),
    [(b"not json", "garbage instead of a reply"), (b"[1, 2]", "not an object"),
     (b"\xff\xfe", "garbage instead of a reply"), (b"", "garbage instead of a reply")],
)  # fmt: skip
def test_a_reply_that_is_not_a_json_object_is_refused(line, error) -> None:
    with pytest.raises(WorkerError, match=error):
        parse_reply(line)
    assert parse_reply(b'{"ok": true}') == {"ok": True}


def test_a_fresh_worker_and_a_pool_lanes_job_are_both_sessions(tmp_path) -> None:
    from tritonrl.verify.pool.gate import GpuGate
    from tritonrl.verify.pool.lane import Lane, PooledSession

    config = VerifyConfig(device="cpu")
    fresh = FreshSessions()
    gate = GpuGate()
    lane = Lane(0, tmp_path / "lane", tmp_path / "cache", config, "cpu", gpu_gate=gate)
    assert isinstance(fresh, SessionFactory) and isinstance(lane, SessionFactory)
    worker = fresh(tmp_path, config, "cpu")
    job = lane(lane.workdir(), config, "cpu")
    assert isinstance(worker, WorkerSession) and isinstance(job, PooledSession)
    assert isinstance(worker, Session) and isinstance(job, Session)
    # one attribute for the gate: none for a fresh worker on the CPU (on CUDA, its GPU's
    # gate: tests/verify/test_gate.py), the lane's for its jobs
    assert fresh.gpu_gate is None and worker.gpu_gate is None
    assert job.gpu_gate is gate and lane.gpu_gate is gate


def test_waiting_for_the_gpu_gate_does_not_count_against_the_wall_clock_limit(tmp_path):
    """The trusted side waits for the gate (another lane's timing has the GPU alone) with
    the worker idle: that queue moves the deadline, so a candidate is never timed out
    for the verifier's own wait, and it still has its whole limit once let in. The wait
    is the result's stage `gate_wait`, so a reader tells the queue from the work."""
    from tritonrl.tasks import load_builtin
    from tritonrl.verify.job import shared
    from tritonrl.verify.pool.gate import GpuGate
    from tritonrl.verify.result import VerifyResult

    task = load_builtin("level1/1_ReLU").tasks[0]
    config = VerifyConfig(device="cpu", timeout_s=10)
    gate = GpuGate()
    gate.exclusive.acquire()  # a timing phase holds the GPU alone for longer than the limit
    release = threading.Timer(12, gate.exclusive.release)
    session = WorkerSession(_job(tmp_path, task.solution), config, "cpu")
    session.gpu_gate = gate
    release.start()
    try:
        result = VerifyResult(task=task.id, device="cpu")
        with session, shared(session, config, "run", result)():
            waited = time.monotonic() - session.child.started
            reply = session.call(LOAD)
        with shared(session, config, "run", result)():  # the GPU is free now: no wait
            pass
    finally:
        release.cancel()
    assert waited >= 11.5, waited
    assert 11.5 <= result.stage_times["gate_wait"] <= waited + 1, result.stage_times
    assert reply.get("ok"), reply
    assert session.deadline - session.child.started >= config.timeout_s + 11
