"""Faults inside a training batch: the reward a trainer awaits scores a completion whose
verification hangs, exhausts memory or loses its lane 0 with the reason, the lane that
died is replaced, and the next batch is verified as if nothing happened."""

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward.adapters import make_trl_reward
from tritonrl.tasks import load_builtin
from tritonrl.verify.pool.pool import close_shared_pools

RELU = load_builtin("level1/1_ReLU").tasks[0]
HOSTILE = Path(__file__).parents[1] / "verify" / "hostile"
# Distinct honest programs (a module constant apart), so none is deduplicated into
# another: the reward verifies each program once, and a comment does not make one.
HONEST = [f"```python\n{RELU.solution}\n_VARIANT = {i}\n```" for i in range(6)]
HANG = f"```python\n{(HOSTILE / 'c24_hang_in_forward.py').read_text()}```"
BOMB = f"```python\n{(HOSTILE / 'c24_memory_bomb.py').read_text()}```"
CONFIG = VerifyConfig(device="cpu", timeout_s=8, memory_mb=1024)


@pytest.fixture(autouse=True)
def _pools_closed():
    yield
    close_shared_pools()


def _descendants(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            out += [child, *_descendants(child)]
    return out


def _idle_processes(pool) -> int:
    """How many processes an idle lane has under its sandbox (all lanes started)."""
    for _ in range(600):
        if all(lane.child for lane in pool.lanes):
            break
        time.sleep(0.1)
    counts = {len(_descendants(lane.child.proc.pid)) for lane in pool.lanes}
    assert len(counts) == 1, counts
    return counts.pop()


def _kill_a_lane_mid_job(pool, idle: int, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first lane seen running a job (its sandbox and every process in it)."""
    while not stop.is_set():
        for lane in pool.lanes:
            child = lane.child
            if child is None:
                continue
            below = _descendants(child.proc.pid)
            if len(below) > idle:  # the zygote has forked a worker: a job is running
                for pid in [child.proc.pid, *below]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    except ProcessLookupError:
                        pass
                return
        time.sleep(0.02)


def test_hangs_bombs_and_a_lane_killed_mid_batch_score_0_and_training_goes_on():
    reward = make_trl_reward([RELU], CONFIG, workers=2, asynchronous=True)
    pool = reward.scorer.pool
    extra: dict[str, list] = {}
    batch = [HONEST[0], HANG, HONEST[1], BOMB, HONEST[2], HONEST[3]]

    def score(completions):
        return asyncio.run(
            reward.with_details(prompts=["p"] * len(completions), completions=completions,
                   task_id=[RELU.id] * len(completions),
                   log_extra=lambda k, v: extra.setdefault(k, []).extend(v))
        )  # fmt: skip

    assert score([HONEST[5]])[0] == [pytest.approx(0.7)]  # warm: timing needs CUDA
    idle = _idle_processes(pool)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_a_lane_mid_job, args=(pool, idle, killed, stop))
    killer.start()
    try:
        started = time.monotonic()
        scores, details = score(batch)
    finally:
        stop.set()
        killer.join()
    assert killed, "no lane was seen running a job"
    assert len(scores) == len(batch) and time.monotonic() - started < 120
    ours = [i for i, d in enumerate(details) if "signal 9 (SIGKILL)" in (d["error"] or "")]
    assert len(ours) == 1, details  # the job whose lane was killed, and only it
    assert scores[ours[0]] == 0.0 and "before answering" in details[ours[0]]["error"]
    for i, text in enumerate(batch):
        if i in ours:
            continue
        if text in (HANG, BOMB):
            assert scores[i] == 0.0 and not details[i]["correct"]
            assert ("wall-clock limit" if text == HANG else "memory limit") in details[i]["error"]
        else:
            assert details[i]["correct"] and scores[i] == pytest.approx(0.7), details[i]
    assert extra["verify_error"][-len(batch) :] == [d["error"] or "" for d in details]

    # The pool replaced the lane: the next batch is verified in full.
    assert score(HONEST[:4])[0] == [pytest.approx(0.7)] * 4
    assert len(pool.lanes) == 2
