"""The worker pool for real: sandboxed zygotes, forked workers, the Triton interpreter.

A pool's verdicts must be a fresh worker's; identical cases are verified once; nothing
outlives `close()`; and a warm pool must be faster per candidate than a fresh worker per
candidate. What one lane keeps from job to job (hangs, crashes, survivors, patches,
writes) is tested in test_lane.py, its zygote alone in test_zygote.py.
"""

from __future__ import annotations

import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward import SCHEMES, compute_reward
from tritonrl.tasks import load_builtin
from tritonrl.verify import verify
from tritonrl.verify.pool.pool import VerifierPool, program_key

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = RELU.solution
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
CHEAT = GOOD.replace("        return y\n", "        return torch.relu(x)\n")
RUNTIME = VerifyConfig(static_checks=False)  # the run-time layer alone
CPU = VerifyConfig(device="cpu")


def at_import(code: str) -> str:
    """The correct ReLU with `code` run when the module is imported."""
    return GOOD.replace("\n\n@triton.jit", "\n\n" + code.strip() + "\n\n\n@triton.jit", 1)


NO_COMPILE = at_import("BLOCK_DEFAULT = undefined_constant")


def verdict(r) -> tuple:
    """What must agree between two verifications (numbers in messages vary per seed)."""
    error = re.sub(r"\d+(\.\d+)?", "#", r.error) if r.error else None
    sets = [(o.name, o.ok) for o in r.input_sets]
    return (r.stage, r.compiled, r.tiny_correct, r.correct, r.flags, r.timed_out, compute_reward(r),
            sets, error)  # fmt: skip


def host_processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(CPU, workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def lane1():
    """One lane: consecutive jobs share the zygote (unless it is recycled)."""
    with VerifierPool(CPU, workers=1) as p:
        yield p


def test_pool_verdicts_equal_fresh_worker_verdicts(pool):
    cases = [(GOOD, CPU), (WRONG, CPU), (NO_COMPILE, CPU), (CHEAT, CPU), (CHEAT, RUNTIME)]
    pooled = [pool.submit(RELU, code, config) for code, config in cases]
    with ThreadPoolExecutor(2) as ex:
        fresh = list(ex.map(lambda case: verify(RELU, *case), cases))
    pooled = [f.result() for f in pooled]
    for p, f in zip(pooled, fresh, strict=True):
        assert verdict(p) == verdict(f)
        assert p.sandbox == f.sandbox
    assert [p.correct for p in pooled] == [True, False, False, False, False]
    assert pooled[2].stage == "compile" and "undefined_constant" in pooled[2].error
    assert pooled[3].stage == "static" and "torch_fallback" in pooled[4].flags


def test_limits_in_a_pool_are_named_like_a_fresh_workers_and_earn_nothing():
    """A pooled job ended by a limit gets a fresh worker's verdict: the limit in the
    result, its setting in the error (the file-size limit as the pool's lanes' own,
    verify.max_file_mb when the lane started), reward 0 in every scheme; the lane serves
    the next job."""
    config = VerifyConfig(device="cpu", memory_mb=3072, timeout_s=30, static_checks=False)
    hostile = Path(__file__).parents[1] / "hostile"
    bomb = (hostile / "c24_memory_bomb.py").read_text()
    fill = (hostile / "c24_giant_file.py").read_text()
    with VerifierPool(config, workers=1) as pool:
        pooled = [pool.submit(RELU, code, config).result() for code in (bomb, fill, GOOD)]
    memory, size, good = pooled
    assert memory.limit == "memory" and verdict(memory) == verdict(verify(RELU, bomb, config))
    assert "the memory limit (verify.memory_mb = 3072 MB; raise it with --verify.memory_mb" in (
        memory.error
    )
    assert size.limit == "file_size", size.error
    assert (
        "the file-size limit of the pool's lanes (256 MB a file: verify.max_file_mb" in size.error
    )
    for r in (memory, size):
        assert [compute_reward(r, scheme) for scheme in SCHEMES] == [0.0] * len(SCHEMES)
    assert good.correct and good.limit is None


def test_every_command_and_the_exit_of_a_job_hold_the_gpu_gates_shared_side(lane1, monkeypatch):
    # A worker makes its CUDA context at `load` and tears it down as it exits: both use
    # the GPU, so neither may overlap a timing phase. (A CPU lane given a gate: the
    # worker is the real one; the CUDA lanes' own test times on the GPU.)
    from tritonrl.verify.pool.gate import GpuGate
    from tritonrl.verify.pool.lane import PooledSession

    gate, seen = GpuGate(), []
    call, leave = PooledSession.call, PooledSession.__exit__

    def watched_call(self, cmd):
        seen.append((cmd["op"], gate._shared))
        return call(self, cmd)

    def watched_exit(self, *exc):
        seen.append(("exit", gate._shared))
        return leave(self, *exc)

    monkeypatch.setattr(PooledSession, "call", watched_call)
    monkeypatch.setattr(PooledSession, "__exit__", watched_exit)
    monkeypatch.setattr(lane1.lanes[0], "gpu_gate", gate)
    assert lane1.verify_many([(RELU, GOOD)])[0].correct
    ops = [op for op, _ in seen]
    assert ops[0] == "load" and ops[-1] == "exit" and set(ops[1:-1]) == {"run"}, seen
    assert all(held == 1 for _, held in seen), seen
    assert gate._shared == 0
    holds = {label: c["holds"] for label, c in gate.stats()["shared"].items()}
    assert holds == {"load": 1, "tiny": 1, "correctness": len(ops) - 3, "teardown": 1}
    monkeypatch.setattr(lane1.lanes[0], "gpu_gate", None)  # as a CPU lane is
    assert lane1.verify_many([(RELU, WRONG)])[0].correct is False


def test_a_job_must_agree_with_its_pool_on_what_its_lanes_sandbox_is_built_from(pool):
    # the lanes' file-size limit is fixed when their zygotes start, as their memory is
    for field, value in (("max_file_mb", 512), ("memory_mb", 4096)):
        config = VerifyConfig(device="cpu", **{field: value})
        with pytest.raises(ValueError, match=field):
            pool.submit(RELU, GOOD, config)


def test_identical_cases_are_verified_once(pool):
    before = dict(pool.stats)
    results = pool.verify_many([(RELU, GOOD), (RELU, WRONG), (RELU, GOOD)])
    assert [r.correct for r in results] == [True, False, True]
    assert pool.stats["verified"] - before["verified"] == 2
    assert pool.stats["deduplicated"] - before["deduplicated"] == 1
    assert results[0] is not results[2] and results[0].to_dict() == results[2].to_dict()


def test_a_program_is_its_code_as_python_reads_it_not_its_text():
    commented = GOOD.replace(
        "        x = x.contiguous()", "        # one contiguous copy\n\n        x = x.contiguous()"
    )
    fenced = f"Here is the kernel.\n\n```python\n{commented}```\nIt is fast."
    assert commented != GOOD and program_key(fenced) == program_key(GOOD)
    assert program_key(WRONG) != program_key(GOOD)
    renamed = GOOD.replace("relu_kernel", "relu")
    assert program_key(renamed) != program_key(GOOD)  # names are part of the program
    assert program_key("no code here") == ("text", "no code here")
    broken = "```python\nclass ModelNew(:\n```"
    assert program_key(broken) == ("text", broken)
    # a text that spells out a program's key is still only a text
    assert program_key(program_key(GOOD)[1]) != program_key(GOOD)


def test_with_same_program_one_program_is_verified_once(pool):
    variant = GOOD.replace("        super().__init__()", "        super().__init__()  # base")
    pairs = [(RELU, GOOD), (RELU, variant), (RELU, WRONG)]
    before = dict(pool.stats)
    results = [f.result() for f in pool.submit_many(pairs, None, same_program=True)]
    assert [r.correct for r in results] == [True, True, False]
    assert pool.stats["verified"] - before["verified"] == 2
    assert pool.stats["deduplicated"] - before["deduplicated"] == 1
    before = dict(pool.stats)
    assert [r.correct for r in pool.verify_many(pairs)] == [True, True, False]
    assert pool.stats["verified"] - before["verified"] == 3  # by default, each text


def test_results_stream_as_they_finish(pool):
    slow = at_import("import time\ntime.sleep(6)")
    order = [i for i, _ in pool.imap_unordered([(RELU, slow), (RELU, GOOD), (RELU, WRONG)],
                                               RUNTIME)]  # fmt: skip
    assert sorted(order) == [0, 1, 2] and order[-1] == 0


def test_a_lanes_next_job_is_prepared_while_it_runs_one(lane1, monkeypatch):
    """The trusted side's half of the next job (its inputs and reference outputs) runs
    while the lane's worker runs the current one, not after it."""
    import tritonrl.verify.pool.pool as pool_module

    events: list[tuple[str, str, float]] = []

    def timed(name, fn):
        def call(*args, **kwargs):
            tag = (args[0].code or "" if name == "finish" else args[1]).strip()[-8:]
            events.append((name + "+", tag, time.monotonic()))
            try:
                return fn(*args, **kwargs)
            finally:
                events.append((name + "-", tag, time.monotonic()))

        return call

    monkeypatch.setattr(pool_module, "prepare", timed("prepare", pool_module.prepare))
    monkeypatch.setattr(pool_module, "finish", timed("finish", pool_module.finish))
    slow = at_import("import time\ntime.sleep(3)") + "# slow job"
    second = GOOD + "# next job"
    results = lane1.verify_many([(RELU, slow), (RELU, second)], RUNTIME)
    assert [r.correct for r in results] == [True, True]
    at = {(name, tag): t for name, tag, t in events}
    assert at[("prepare-", "next job")] < at[("finish-", "slow job")] - 2.0, events
    assert at[("finish+", "next job")] > at[("finish-", "slow job")]


def test_close_ends_the_jobs_waiting_prepared_and_every_thread():
    from tritonrl.verify.pool.pool import PoolClosed

    p = VerifierPool(CPU, workers=1)
    slow = at_import("import time\ntime.sleep(60)")
    futures = [p.submit(RELU, slow, RUNTIME)]
    futures += [p.submit(RELU, f"{GOOD}\n# copy {i}\n") for i in range(3)]
    deadline = time.monotonic() + 60
    while not p._ready[0].full() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert p._ready[0].full()  # one job waits prepared, one more is being prepared
    started = time.monotonic()
    p.close()
    assert time.monotonic() - started < 20
    for f in futures:
        assert f.done()
        assert f.cancelled() or isinstance(f.exception(), PoolClosed)
    assert not any(t.is_alive() for t in p._threads + p._preparers)


def test_close_leaves_no_process_cgroup_or_file():
    p = VerifierPool(CPU, workers=2)
    assert p.submit(RELU, GOOD).result().correct
    for _ in range(100):  # the other lane starts in the background
        if all(lane.child for lane in p.lanes):
            break
        time.sleep(0.1)
    pids = [lane.child.proc.pid for lane in p.lanes]
    cgroups = [c for lane in p.lanes if lane.child.cgroup for c in lane.child.cgroup.paths]
    root = p.root
    p.close()
    assert not root.exists()
    assert host_processes_with(str(root)) == []  # every sandbox command line names it
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not any(c.exists() for c in cgroups)
    assert not any(t.is_alive() for t in p._threads + p._preparers)
    with pytest.raises(RuntimeError, match="closed"):
        p.submit(RELU, GOOD)


def test_a_warm_pool_is_faster_per_candidate_than_fresh_workers(pool):
    # Six different sources (a comment makes each one new: no deduplication, no cache).
    cands = [f"{GOOD}\n# variant {i}\n" for i in range(6)]
    pool.verify_many([(RELU, GOOD)])  # warm: both lanes up, reference code warmed
    start = time.perf_counter()
    pooled = pool.verify_many([(RELU, c) for c in cands])
    pool_s = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as ex:  # the same concurrency, a fresh worker each
        fresh = list(ex.map(lambda c: verify(RELU, c, CPU), cands))
    fresh_s = time.perf_counter() - start
    assert all(r.correct for r in pooled + fresh)
    assert pool_s < 0.8 * fresh_s, (pool_s, fresh_s)


class _Spans:
    """A lane's real GPU gate whose exclusive side records when each holder had it."""

    def __init__(self, gate, spans: list) -> None:
        self.gate, self.spans, self.exclusive = gate, spans, self

    def shared(self, *args):
        return self.gate.shared(*args)

    def acquire(self) -> bool:
        drained = self.gate.exclusive.acquire()
        self.start = time.monotonic()
        return drained

    def release(self) -> None:
        self.spans.append((id(self.gate), self.start, time.monotonic()))
        self.gate.exclusive.release()


@pytest.mark.gpu
def test_a_cuda_pool_agrees_with_fresh_workers_and_times_one_candidate_at_a_time():
    # Three lanes (on one GPU here): every lane's worker is forked from a zygote that
    # never touched CUDA, and timing phases on the same GPU must never overlap.
    cuda = VerifyConfig(device="cuda", ref_time_cache="off")
    goods = [GOOD, GOOD.replace("BLOCK = 1024", "BLOCK = 512"),
             GOOD.replace("BLOCK = 1024", "BLOCK = 2048")]  # fmt: skip
    cases = [*goods, WRONG, NO_COMPILE, CHEAT]
    spans: list = []
    with VerifierPool(cuda, workers=3) as p:
        assert all(lane.gpu is not None and lane.gpu_gate for lane in p.lanes)
        for lane in p.lanes:
            lane.gpu_gate = _Spans(lane.gpu_gate, spans)
        pooled = p.verify_many([(RELU, c) for c in cases])
    fresh = [verify(RELU, c, cuda) for c in cases]
    # the reward of a correct kernel follows its measured speedup: compare the rest
    same = [(v[:6], v[7:]) for v in map(verdict, pooled)]
    assert same == [(v[:6], v[7:]) for v in map(verdict, fresh)]
    assert [r.correct for r in pooled] == [True] * 3 + [False] * 3
    for r in pooled[:3]:
        assert r.device == "cuda" and r.speedup and r.timing["trials"] >= 50, r.notes
        assert r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1]
    # a reference slowed beside its candidate is timed again, in a second window
    assert len(spans) == sum(r.timing["tries"] for r in pooled[:3])
    spans.sort()
    for (gpu_a, _, a_end), (gpu_b, b_start, _) in zip(spans, spans[1:], strict=False):
        assert gpu_a != gpu_b or a_end <= b_start, spans


@pytest.mark.gpu
def test_a_cuda_pool_gives_jobs_triton_modules_built_by_trusted_code():
    # The first job builds its launcher itself and asks for it; the trusted builder makes
    # it; a later job with another source of the same signature then builds no C module
    # at all: its own Triton cache holds its kernel and nothing else.
    cuda = VerifyConfig(device="cuda", timing=False)
    other = GOOD.replace("BLOCK = 1024", "BLOCK = 512")
    with VerifierPool(cuda, workers=1) as p:
        store, cache = p.launchers, p.root / "cache"
        assert p.verify_many([(RELU, GOOD)])[0].correct
        store.wait()
        assert store.stats["built"] >= 1 and store.stats["failed"] == 0, store.stats
        assert list(store.root.glob("*/cuda_utils*"))
        before = set(cache.iterdir())
        assert p.verify_many([(RELU, other)])[0].correct
        (job_cache,) = set(cache.iterdir()) - before
        assert list(job_cache.rglob("*.cubin")), "the kernel was compiled in the job's cache"
        assert not list(job_cache.rglob("*.so")), list(job_cache.rglob("*.so"))


@pytest.mark.parametrize(
    ("cores", "gpus", "lanes"),
    [(2, 0, 2), (16, 0, 16), (2, 1, 2), (64, 1, 16), (128, 8, 128), (4, 8, 8), (64, 2, 32)],
)
def test_lanes_default_to_the_cores_at_most_16_per_gpu(monkeypatch, cores, gpus, lanes):
    import tritonrl.verify.pool.pool as pool_module

    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pool_module.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert pool_module.default_workers([str(g) for g in range(gpus)]) == lanes


@pytest.mark.parametrize(("cores", "ranks", "lanes"), [(32, 2, 16), (16, 4, 4), (2, 4, 1)])
def test_a_rank_of_several_on_a_node_takes_its_share_of_the_cores(monkeypatch, cores, ranks,
                                                                 lanes):  # fmt: skip
    import tritonrl.verify.pool.pool as pool_module

    monkeypatch.setattr(pool_module.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
    assert pool_module.default_workers(["1"]) == lanes  # its own GPU alone


@pytest.mark.gpu
def test_a_rank_of_two_verifies_and_times_on_its_own_gpu_alone(monkeypatch):
    import torch

    from tritonrl.verify.pool.gate import visible_gpus

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    monkeypatch.setenv("LOCAL_RANK", "1")  # as `accelerate launch` sets a second rank's
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with VerifierPool(VerifyConfig(device="cuda", ref_time_cache="off"), workers=2) as p:
        assert [lane.gpu for lane in p.lanes] == [visible_gpus()[1]] * 2
        (result,) = p.verify_many([(RELU, GOOD)])
    assert result.correct and result.speedup, result.notes
