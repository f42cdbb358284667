"""One lane of the pool for real: a sandboxed zygote serving jobs one at a time, through
`VerifierPool(workers=1)` (the lane's own interface is the funnel's session factory).

A job that hangs or crashes gets a fresh worker's verdict and the lane starts a fresh
zygote for the next; one that leaves a process behind, patches torch or writes outside
its own dirs does not reach the next job of the same zygote (the sweep, the fork, the
nested Landlock domain); a lane starts a fresh zygote after `recycle_jobs` clean jobs;
hostile kernels get a fresh worker's verdict from a lane; jobs run at their pool's CPU
priority (`verify.nice`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward import compute_reward
from tritonrl.tasks import load_builtin
from tritonrl.verify import verify
from tritonrl.verify.pool.pool import VerifierPool, close_shared_pools, shared_pool

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = RELU.solution
RUNTIME = VerifyConfig(static_checks=False)  # the run-time layer alone
CPU = VerifyConfig(device="cpu")
HOSTILE = Path(__file__).parents[1] / "hostile"


def at_import(code: str) -> str:
    """The correct ReLU with `code` run when the module is imported."""
    return GOOD.replace("\n\n@triton.jit", "\n\n" + code.strip() + "\n\n\n@triton.jit", 1)


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
def lane1():
    """One lane: consecutive jobs share the zygote (unless it is recycled)."""
    with VerifierPool(CPU, workers=1) as p:
        yield p


def fresh_hang(hang: str) -> tuple[VerifyConfig, object]:
    """(the config, a fresh worker's verdict) for `hang` timed out in its hanging call.

    A fresh worker's wall clock starts before it imports torch and triton, which takes a
    loaded host longer than the 6 s that suffice on an idle one; timed out there it has
    not reached the candidate's call (stage compile, no input set), unlike a lane's warm
    zygote. The limit doubles until the fresh worker times out inside the call."""
    for timeout_s in (6, 12, 24, 48, 96):
        config = VerifyConfig(device="cpu", timeout_s=timeout_s, static_checks=False)
        fresh = verify(RELU, hang, config)
        if fresh.compiled:
            return config, fresh
    pytest.fail(f"a fresh worker did not reach the candidate's call in 96 s: {fresh.error}")


def test_a_hanging_candidate_times_out_and_the_lane_recovers(lane1):
    hang = GOOD.replace("        x = x.contiguous()\n", "        while True:\n            pass\n")
    short, fresh = fresh_hang(hang)
    assert fresh.stage == "correctness" and [(s.name, s.ok) for s in fresh.input_sets] == [
        ("tiny", False)]  # fmt: skip
    starts = lane1.lanes[0].starts
    r = lane1.submit(RELU, hang, short).result()
    assert r.timed_out and r.limit == "timeout" and verdict(r) == verdict(fresh)
    limit = f"{short.timeout_s:g} s"
    assert (
        r.error
        == fresh.error
        == lane1.lanes[0].recycles[-1]
        == (
            f"timed out after {limit}: killed by the wall-clock limit (verify.timeout_s = "
            f"{limit}; raise it with --verify.timeout_s or in the config's verify section)"
        )
    )
    after = lane1.submit(RELU, GOOD).result()
    assert after.correct and lane1.lanes[0].starts == starts + 1


@pytest.mark.parametrize(
    "code",
    ["import os\nos._exit(7)", "import ctypes\nctypes.string_at(0)"],
    ids=["os-exit", "segfault"],
)
def test_a_crashing_candidate_fails_like_a_fresh_worker_and_the_lane_recovers(lane1, code):
    crash = at_import(code)
    fresh = verify(RELU, crash, RUNTIME)
    r = lane1.submit(RELU, crash, RUNTIME).result()
    assert r.error == fresh.error and verdict(r) == verdict(fresh)
    assert r.error.startswith(("the worker exited with status 7", "the worker killed (signal 11"))
    assert lane1.submit(RELU, GOOD).result().correct


def test_a_daemonised_grandchild_does_not_survive_into_the_next_job(lane1):
    token = f"tritonrl_pool_survivor_{uuid.uuid4().hex}"
    spawn = at_import(
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', "
        f"'{token}'])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "import time\n"
        "time.sleep(0.5)\n"
    )
    starts = lane1.lanes[0].starts
    lane1.submit(RELU, spawn, RUNTIME).result()
    assert host_processes_with(token) == []
    # The next job of the same zygote sees its namespace's init, the zygote and itself.
    census = at_import(
        "import os\n"
        "_pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "assert _pids == [1, 2, os.getpid()], _pids"
    )
    r = lane1.submit(RELU, census, RUNTIME).result()
    assert r.compiled, r.error
    assert lane1.lanes[0].starts == starts  # swept by the zygote, not by a recycle


def test_a_candidate_that_patches_torch_does_not_reach_the_next_job(lane1):
    patch = at_import("torch.empty_like = lambda *a, **k: None\ntriton.cdiv = lambda a, b: 0")
    starts = lane1.lanes[0].starts
    r = lane1.submit(RELU, patch, RUNTIME).result()
    assert not r.correct
    assert lane1.submit(RELU, GOOD).result().correct  # uses both torch.empty_like, cdiv
    assert lane1.lanes[0].starts == starts  # the same zygote: isolation by the fork


def test_a_job_writes_only_its_own_dir_and_its_own_cache(lane1):
    lane = lane1.lanes[0]
    (lane.root / "job-sibling").mkdir()
    (lane.cache_root / ("0" * 64)).mkdir()
    probe = at_import(
        "import errno, json, os\n"
        "def _try(path):\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('x')\n"
        "        return 'ok'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e.errno))\n"
        "_cache = os.path.realpath('.triton/cache')\n"
        "_lane = os.path.dirname(os.getcwd())\n"
        "_r = {'job': _try('mine.txt'), 'cache': _try(os.path.join(_cache, 'k.bin')),\n"
        "      'lane': _try(os.path.join(_lane, 'planted.py')),\n"
        "      'sibling': _try(os.path.join(_lane, 'job-sibling', 'planted.py')),\n"
        "      'other_cache': _try(os.path.join(os.path.dirname(_cache), '0' * 64, 'k.bin')),\n"
        "      'tmp': _try('/tmp/planted')}\n"
        "raise RuntimeError('WRITES ' + json.dumps(_r, sort_keys=True))"
    )
    r = lane1.submit(RELU, probe, RUNTIME).result()
    found = json.loads(r.error.split("WRITES ", 1)[1].rsplit(" (candidate.py", 1)[0])
    assert found == {"job": "ok", "cache": "ok", "lane": "EACCES", "sibling": "EACCES",
                     "other_cache": "EACCES", "tmp": "EACCES"}  # fmt: skip
    # The lane's sandbox (the zygote's Landlock domain) may write the lane root: what
    # stopped the job is its own nested domain.
    assert not list(lane.root.glob("planted*"))


def test_a_job_runs_with_one_passive_openmp_thread(lane1):
    # The lanes share the machine's cores: a job's torch must not start a thread per core
    # that spins while idle (on the H100 that took 4x the CPU time per candidate).
    probe = GOOD.replace(
        "class ModelNew(nn.Module):\n",
        "class ModelNew(nn.Module):\n    def __new__(cls, *a, **k):\n        import os\n"
        "        raise RuntimeError(f'threads={torch.get_num_threads()} '\n"
        "                           f'wait={os.environ.get(\"OMP_WAIT_POLICY\")}')\n\n",
        1,
    )  # fmt: skip
    r = lane1.verify_many([(RELU, probe)], VerifyConfig(device="cpu", static_checks=False))[0]
    assert "threads=1 wait=PASSIVE" in (r.error or ""), r.error


def nice_probe() -> str:
    """The ReLU whose model, when made, fails with the job's CPU priority in its error."""
    return GOOD.replace(
        "class ModelNew(nn.Module):\n",
        "class ModelNew(nn.Module):\n    def __new__(cls, *a, **k):\n        import os\n"
        "        raise RuntimeError(f'nice={os.nice(0)}')\n\n",
        1,
    )  # fmt: skip


def test_a_job_runs_at_the_pools_cpu_priority(lane1):
    # verify.nice (the reward's rl.reward_nice): the lanes yield the cores to the trainer
    # beside them. The jobs a zygote forks inherit its priority.
    here = os.nice(0)
    config = VerifyConfig(device="cpu", static_checks=False)
    r = lane1.verify_many([(RELU, nice_probe())], config)[0]
    assert f"nice={here}" in (r.error or ""), r.error  # verify.nice 0: as the caller
    lowered = dataclasses.replace(config, nice=7)
    with VerifierPool(lowered, workers=1) as pool:
        lower = pool.verify_many([(RELU, nice_probe()), (RELU, GOOD)], lowered)
        with pytest.raises(ValueError, match=r"match its pool's in \['nice'\]"):
            pool.submit(RELU, GOOD, config)  # a lane's priority is its pool's
    assert f"nice={min(here + 7, 19)}" in (lower[0].error or ""), lower[0].error
    assert lower[1].correct, lower[1].error  # the lowered lane verifies as before
    # the trainer's reward pool (rl.reward_nice) is never an eval's in the same process
    try:
        assert shared_pool(lowered, 1) is not shared_pool(config, 1)
        assert shared_pool(lowered, 1) is shared_pool(lowered, 1)
    finally:
        close_shared_pools()


def test_a_lane_starts_a_fresh_zygote_after_recycle_jobs_clean_jobs():
    with VerifierPool(CPU, workers=1, recycle_jobs=2) as p:
        lane = p.lanes[0]
        results = [p.submit(RELU, f"{GOOD}\n# job {i}\n").result() for i in range(5)]
        assert all(r.correct for r in results)
        assert lane.reusable, (lane.enforced, lane.missing)  # else every job is alone
        # jobs 1-2, 3-4 and 5 each had a zygote; none was thrown away for a fault
        assert lane.starts == 3 and lane.recycled == 0, (lane.starts, list(lane.recycles))


MARKERS = {"c24_fork_bomb": "tritonrl_escape_forkbomb_marker",
           "c23_spawn_process": "tritonrl_escape_process_marker"}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "c14_reply_fd",
        "c14_print_fake_json",
        "c13_patch_worker_reply",
        "c14_exit_in_forward",
        "c24_giant_stdout",
        "c24_fork_bomb",
        "c23_spawn_process",
    ],  # fmt: skip
)
def test_hostile_kernels_get_a_fresh_workers_verdict_from_a_lane(lane1, name):
    """Forged replies, a forged reply channel, exits, floods and escapes, run-time layer
    alone (several return uninitialised memory: the mismatch text varies, not the verdict)."""
    code = (HOSTILE / f"{name}.py").read_text()
    fresh = verify(RELU, code, RUNTIME)
    r = lane1.submit(RELU, code, RUNTIME).result()
    assert not r.correct and not fresh.correct
    if name == "c14_reply_fd":
        # Its forged reply puts every later reply one command late, and the findings log
        # is read after each reply while the worker still writes it: the stage at which
        # the flag lands is a race in both kinds of worker. What must agree: refused.
        assert r.cheated and fresh.cheated and compute_reward(r) == compute_reward(fresh) == 0.0
        assert "torch_fallback" in r.flags and "torch_fallback" in fresh.flags
    else:
        assert verdict(r)[:-1] == verdict(fresh)[:-1]
    if name in MARKERS:
        assert host_processes_with(MARKERS[name]) == []


def test_a_job_queued_behind_a_timing_window_is_not_timed_out_by_the_wait():
    """A lane's job whose runs wait at the GPU gate longer than verify.timeout_s (other
    candidates' timing windows, back to back) gets the verdict it gets unqueued: the
    wait is the verifier's, not the candidate's."""
    import threading

    from tritonrl.verify.pool.gate import GpuGate

    config = VerifyConfig(device="cpu", timeout_s=8)
    with VerifierPool(config, workers=1) as p:
        gate = GpuGate()
        p.lanes[0].gpu_gate = gate
        assert p.submit(RELU, GOOD).result().correct  # the lane warm
        gate.exclusive.acquire()
        threading.Timer(10, gate.exclusive.release).start()
        r = p.submit(RELU, GOOD).result()
    assert r.correct and not r.timed_out, r.error
    assert r.stage_times.get("gpu_wait", 0.0) == 0.0  # the wait was for correctness runs
