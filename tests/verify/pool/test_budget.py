"""The pool's GPU-memory budget (`tritonrl.verify.pool.budget`): reservations never pass the
capacity, are served in order (a large job is not starved), a job larger than the budget
runs alone, a waiter can be given up, nothing deadlocks; and a pool's lanes reserve their
jobs' estimates from it. No CUDA needed: the budget is given in bytes (or MB to a pool).
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.verify.pool.budget import BudgetCancelled, GpuBudget, budget_for, capacity_for

MB = 1 << 20


def _until(condition, what: str, timeout_s: float = 60.0) -> None:
    """Wait (polling) until `condition()` holds; a generous deadline for a loaded host."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {timeout_s:g} s"
        time.sleep(0.001)


def _run_all(budget: GpuBudget, sizes: list[int], hold_s: float = 0.01) -> dict:
    """Each size reserved from its own thread, asked in this order (each thread asks
    before the next starts), and held until every one has asked, then `hold_s` more;
    what was held at once, and the order they got in."""
    held, most, order = [0], [0], []
    lock, all_asked = threading.Lock(), threading.Event()

    def job(i: int, n: int) -> None:
        with budget.reserve(n) as got:
            with lock:
                held[0] += got
                most[0] = max(most[0], held[0])
                order.append(i)
            all_asked.wait()
            time.sleep(hold_s)
            with lock:
                held[0] -= got

    threads = [threading.Thread(target=job, args=(i, n)) for i, n in enumerate(sizes)]
    asked = budget.stats()["asked"]
    for i, t in enumerate(threads):
        t.start()
        _until(lambda i=i: budget.stats()["asked"] == asked + i + 1, f"request {i}")
    all_asked.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a reservation never came (deadlock)"
    return {"most": most[0], "order": order}


def test_reservations_never_pass_the_capacity_and_all_are_served():
    rng = random.Random(7)
    budget = GpuBudget(100 * MB)
    sizes = [rng.randint(1, 100) * MB for _ in range(60)]
    seen = _run_all(budget, sizes, hold_s=0.005)
    assert seen["most"] <= budget.capacity
    assert sorted(seen["order"]) == list(range(60)) and budget.used() == 0
    stats = budget.stats()
    assert stats["reserved"] == stats["asked"] == 60 and stats["peak"] <= budget.capacity
    assert stats["waited"] > 0


def test_requests_are_served_in_order_so_a_large_one_is_not_starved():
    # 70 MB asked for while small jobs keep coming: the small ones asked after it wait.
    budget = GpuBudget(100 * MB)
    seen = _run_all(budget, [40 * MB, 70 * MB] + [10 * MB] * 8, hold_s=0.05)
    assert seen["order"][:2] == [0, 1], seen["order"]


def test_a_job_larger_than_the_budget_runs_alone():
    budget = GpuBudget(100 * MB)
    inside, leaving = threading.Event(), threading.Event()
    others: list[int] = []

    def big() -> None:
        with budget.reserve(500 * MB) as got:
            assert got == budget.capacity
            inside.set()
            time.sleep(0.1)
            others.append(budget.used())
            leaving.set()  # the last thing it does holding the budget

    t = threading.Thread(target=big)
    t.start()
    assert inside.wait(60)
    with budget.reserve(10 * MB):  # waits for the big one to end
        assert leaving.is_set()
    t.join()
    assert others == [budget.capacity] and budget.stats()["alone"] == 1
    assert budget.stats()["waited"] == 1


def test_a_waiter_given_up_raises_and_does_not_block_the_next():
    budget = GpuBudget(100 * MB)
    stop = threading.Event()
    errors: list[BaseException] = []
    with budget.reserve(80 * MB):

        def waiter() -> None:
            try:
                with budget.reserve(50 * MB, cancelled=stop.is_set):
                    pass
            except BudgetCancelled as e:
                errors.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        _until(lambda: budget.stats()["asked"] == 2, "request of the waiter")  # it waits
        stop.set()
        t.join(60)
        assert errors and not t.is_alive()
        assert budget.stats()["reserved"] == 1  # the 80 only
        with budget.reserve(20 * MB):  # fits beside the 80: the cancelled one is gone
            pass


def test_nothing_needs_nothing():
    budget = GpuBudget(1 * MB)
    with budget.reserve(1 * MB), budget.reserve(0) as got:  # would wait if it counted
        assert got == 0


def test_capacity_comes_from_the_config():
    assert capacity_for(VerifyConfig(gpu_memory_budget_mb=1500), None) == 1500 * MB
    assert capacity_for(VerifyConfig(), None) is None  # a CPU pool: nothing to budget
    assert budget_for("gpuX", 10 * MB) is budget_for("gpuX", 10 * MB)
    with pytest.raises(ValueError, match="gpu_memory_fraction"):
        VerifyConfig(gpu_memory_fraction=0)
    with pytest.raises(ValueError, match="gpu_memory_factor"):
        VerifyConfig(gpu_memory_factor=0)


def test_a_pools_lanes_reserve_their_jobs_and_wait_for_room():
    # Each job's estimate is the worker's base (1 GB) plus a few KB: a budget of 1.5 GB
    # holds one at a time, so two lanes take turns; one of 0.5 GB is smaller than every
    # job, which then runs alone. Every verdict comes, and equals a lone verify's.
    from tritonrl.tasks import load_builtin
    from tritonrl.verify import verify
    from tritonrl.verify.pool.pool import VerifierPool

    task = load_builtin("level1/1_ReLU").tasks[0]
    wrong = task.solution.replace("tl.maximum(x, 0.0)", "x")
    alone = verify(task, wrong, VerifyConfig(device="cpu"))
    for budget_mb, alone_jobs in ((1536, 0), (512, 3)):
        config = VerifyConfig(device="cpu", gpu_memory_budget_mb=budget_mb)
        with VerifierPool(config, workers=2) as pool:
            # Both zygotes up first: on a loaded host one may take seconds longer to import
            # torch than the other, which meanwhile serves every job, and none waits.
            for lane in pool.lanes:
                assert lane.ready.wait(300), "a lane's zygote did not start in 300 s"
            results = pool.verify_many([(task, task.solution), (task, wrong), (task, wrong + " ")])
            stats = pool.budgets[0].stats()
        assert [r.correct for r in results] == [True, False, False]
        assert results[1].error.split(":")[0] == alone.error.split(":")[0] == "input set tiny"
        assert stats["reserved"] == 3 and stats["peak"] <= budget_mb * MB, stats
        assert stats["alone"] == alone_jobs and stats["waited"] >= 1, stats
