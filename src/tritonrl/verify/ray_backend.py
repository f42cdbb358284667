"""The verifier across the nodes of a Ray cluster (`verify.backend: ray`).

    with RayVerifier(VerifyConfig(backend="ray", ray_address="auto")) as verifier:
        results = verifier.verify_many([(task, completion), ...])   # input order
        for index, result in verifier.imap_unordered(pairs): ...    # as they finish
        future = verifier.submit(task, completion)                  # one at a time

The calls are the local `VerifierPool`'s. Each Ray actor (`VerifierActor`) owns a
`VerifierPool` on its node and answers one candidate per call; its verdicts are that
pool's, so the same as the local pool's for the same case and settings. By default the
cluster gets one actor per GPU (`num_gpus=1`, its pool on that GPU, with its node's CPU
cores shared among its GPUs' actors for lanes, at most 16), or, on a cluster without
GPUs (or with `verify.device: cpu`), one actor per node on the CPU; `verify.ray_actors`
sets the count, `workers` each actor's lanes. The device is the cluster's, not this
process's: a trainer on a node without a GPU verifies on the GPU nodes.

A thread here hands the cases out, each actor at most twice its lanes at a time (its
pool prepares the next while the lanes run), and collects the verdicts. An actor that
dies (its node lost, killed, out of memory) loses no case: the cases it had not answered
go back to the front of the queue for the live actors, and a new actor is asked for in
its stead (it takes cases once it has started, when the cluster has room for it). Each
case gets exactly one verdict: the first that arrives; any later one for the same case
is dropped (counted in `stats["duplicates"]`). A case whose actor died under it
`MAX_TRIES` times fails with `RayVerifierError` rather than kill more actors, and so do
the waiting cases when no actor has been alive for `start_timeout_s`.
`shared_ray_verifier(config, workers)` is the process-wide one the reward and eval use.

What it does NOT do: install tritonrl on the cluster's nodes (each node needs the same
version in the Python that Ray runs), mix CPU and GPU actors in one verifier (a verdict's
speedup would depend on which node took it), start or stop the Ray cluster (`ray.init`
joins the one at `verify.ray_address`, or starts a local one), or move the reference
timing cache between nodes (each node keeps its own).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import dataclasses
import logging
import os
import re
import threading
import time
from concurrent.futures import Future
from typing import Any

from tritonrl.config import VerifyConfig
from tritonrl.tasks.task import Task
from tritonrl.verify.pool.pool import LANE_FIELDS, LANES_PER_GPU, Batches, VerifierPool
from tritonrl.verify.result import VerifyResult

log = logging.getLogger(__name__)

RAY_PIP = 'pip install "tritonrl[ray]"'
MAX_TRIES = 3  # actors a case may lose before it fails
START_TIMEOUT_S = 600.0  # how long the cases wait for an actor when none is alive
POLL_S = 0.1


class RayVerifierError(RuntimeError):
    """The Ray backend cannot verify: Ray is missing, the cluster has no room for the
    asked actors, or the actors were lost; the message says which and what to do."""


def require_ray():
    """The `ray` module, or RayVerifierError naming the pip line that installs it."""
    try:
        import ray  # optional: only the Ray backend needs it
    except ImportError as e:
        raise RayVerifierError(
            f"verify.backend 'ray' needs Ray, which is not installed ({e}); install it with "
            f"`{RAY_PIP}` (or `pip install ray`), or set verify.backend to 'local'"
        ) from None
    return ray


class VerifierActor:
    """A Ray actor's state: one `VerifierPool` on its node (see the module docstring)."""

    def __init__(self, config: VerifyConfig, workers: int | None, device: str):
        if workers is None and device == "cuda":
            workers = _lanes_per_gpu()
        self.pool = VerifierPool(config, workers, device)

    def info(self) -> dict[str, Any]:
        import ray  # optional: installed where this actor runs

        return {"lanes": len(self.pool.lanes), "device": self.pool.device, "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id()}  # fmt: skip

    async def verify(self, task: Task, candidate: str | bytes, config: VerifyConfig):
        return await asyncio.wrap_future(self.pool.submit(task, candidate, config))

    def close(self) -> None:
        self.pool.close()


def _lanes_per_gpu() -> int:
    """A GPU actor's lanes: its node's CPU cores shared among the node's GPUs, at most
    LANES_PER_GPU and at least one."""
    import ray  # optional: installed where this actor runs

    node = ray.get_runtime_context().get_node_id()
    gpus = next((n["Resources"].get("GPU", 1) for n in ray.nodes() if n["NodeID"] == node), 1)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(LANES_PER_GPU, cores // max(1, int(gpus))))


def _last_line(error: Exception) -> str:
    """The line of a Ray error that says what went wrong (its traceback's last)."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    return re.sub(r"\x1b\[[0-9;]*m", "", lines[-1]) if lines else type(error).__name__


@dataclasses.dataclass
class _Job:
    future: Future
    task: Task
    candidate: str | bytes
    config: VerifyConfig
    lost: int = 0  # actors that died with this job in hand


@dataclasses.dataclass
class _Actor:
    handle: Any
    ready: Any  # the ObjectRef of its `info()` while it starts; None once it answered
    slots: int = 0
    info: dict = dataclasses.field(default_factory=dict)
    jobs: dict = dataclasses.field(default_factory=dict)  # ObjectRef -> _Job


class RayVerifier(Batches):
    """Verify candidates on the actors of a Ray cluster (see the module docstring)."""

    def __init__(
        self,
        config: VerifyConfig | None = None,
        workers: int | None = None,
        actors: int | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.ray = ray = require_ray()
        self.config = config or VerifyConfig(backend="ray")
        if not ray.is_initialized():  # else the cluster this process already runs in
            address = self.config.ray_address
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise RayVerifierError(
                    f"cannot join the Ray cluster at verify.ray_address {address!r}: {e}; start "
                    "it (`ray start --head` on the head node) or fix verify.ray_address"
                ) from None
        self._remote = ray.remote(VerifierActor)
        errors = ray.exceptions
        self._lost_errors = (errors.RayActorError, errors.NodeDiedError, errors.OutOfMemoryError)
        self.workers = workers
        self.start_timeout_s = start_timeout_s
        self.device, self._placements = self._plan(actors or self.config.ray_actors)
        self.stats = {"submitted": 0, "verified": 0, "deduplicated": 0, "resubmitted": 0,
                      "duplicates": 0, "lost_actors": 0, "started_actors": 0}  # fmt: skip
        self._lock = threading.Condition()
        self._pending: collections.deque[_Job] = collections.deque()
        self._actors: list[_Actor] = []
        self._closed = False
        self._alive_at = time.monotonic()
        for options in self._placements:
            self._start_actor(options)
        self._await_start()
        self._thread = threading.Thread(target=self._dispatch, daemon=True,
                                        name="tritonrl-ray-dispatch")  # fmt: skip
        self._thread.start()

    # -- the actors ---------------------------------------------------------------------
    def _plan(self, count: int) -> tuple[str, list[dict]]:
        """The actors' device and each one's Ray options."""
        ray = self.ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        device = self.config.device
        if device == "auto":
            device = "cuda" if gpus else "cpu"
        if device == "cuda":
            if not gpus:
                raise RayVerifierError(
                    "verify.device is 'cuda' but the Ray cluster has no GPU; start its GPU "
                    "nodes (`ray start --address HEAD:6379` there) or set verify.device to "
                    "'auto' or 'cpu'"
                )
            if count > gpus:
                raise RayVerifierError(
                    f"verify.ray_actors {count} asks for more GPU actors than the Ray cluster "
                    f"has GPUs ({gpus}); give at most {gpus}, or 0 for one per GPU"
                )
            return device, [{"num_gpus": 1, "num_cpus": 1}] * (count or gpus)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if count > cpus:
            raise RayVerifierError(
                f"verify.ray_actors {count} asks for more actors than the Ray cluster has CPUs "
                f"({cpus}; each actor takes one); give at most {cpus}, or 0 for one per node"
            )
        if count:
            return device, [{"num_cpus": 1, "scheduling_strategy": "SPREAD"}] * count
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        return device, [{"num_cpus": 1, "scheduling_strategy": NodeAffinitySchedulingStrategy(
            node, soft=True)} for node in nodes]  # fmt: skip

    def _start_actor(self, options: dict) -> None:
        handle = self._remote.options(**options).remote(self.config, self.workers, self.device)
        self._actors.append(_Actor(handle, handle.info.remote()))
        self.stats["started_actors"] += 1

    def _await_start(self) -> None:
        """Wait for the first actors: each answers, fails (raised) or is late (dropped)."""
        waiting = {a.ready: a for a in self._actors}
        deadline = time.monotonic() + self.start_timeout_s
        while waiting and time.monotonic() < deadline:
            done, _ = self.ray.wait(list(waiting), num_returns=1, timeout=POLL_S)
            for ref in done:
                actor = waiting.pop(ref)
                try:
                    self._started(actor, self.ray.get(ref))
                except Exception as e:
                    self.close()
                    raise RayVerifierError(
                        f"a verifier actor failed to start on the Ray cluster: {_last_line(e)}"
                    ) from None
        for actor in waiting.values():
            log.warning("ray: a verifier actor did not start in %.0f s; going on without it",
                        self.start_timeout_s)  # fmt: skip
            self._drop(actor)
        if not any(a.ready is None for a in self._actors):
            self.close()
            raise RayVerifierError(
                f"no verifier actor started on the Ray cluster in {self.start_timeout_s:g} s "
                f"(asked for {len(self._placements)} with {self._placements[0]}); check "
                "`ray status` for free CPUs and GPUs, or lower verify.ray_actors"
            )

    def _started(self, actor: _Actor, info: dict) -> None:
        actor.ready, actor.info = None, info
        actor.slots = 2 * info["lanes"]  # its lanes busy and as many prepared behind them

    def _drop(self, actor: _Actor) -> None:
        if actor in self._actors:
            self._actors.remove(actor)
        with contextlib.suppress(Exception):  # already gone
            self.ray.kill(actor.handle, no_restart=True)

    @property
    def lanes(self) -> int:
        """Lanes of the live actors, together."""
        with self._lock:
            return sum(a.info.get("lanes", 0) for a in self._actors)

    @property
    def actors(self) -> list[Any]:
        """The handles of the actors that answer cases (for tests and `ray.kill`)."""
        with self._lock:
            return [a.handle for a in self._actors if a.ready is None]

    def load(self) -> list[tuple[Any, int]]:
        """(handle, cases in hand) of every actor that answers cases."""
        with self._lock:
            return [(a.handle, len(a.jobs)) for a in self._actors if a.ready is None]

    # -- submitting -------------------------------------------------------------------
    def submit(
        self, task: Task, candidate: str | bytes, config: VerifyConfig | None = None
    ) -> Future:
        """Queue one candidate; the future's result is its `VerifyResult`. `config` (the
        verifier's by default) may change anything but the lane fields (`LANE_FIELDS`)."""
        if self._closed:
            raise RayVerifierError("the Ray verifier is closed")
        config = self._job_config(config)
        future: Future = Future()
        with self._lock:
            self.stats["submitted"] += 1
            self._pending.append(_Job(future, task, candidate, config))
            self._lock.notify_all()
        return future

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.stats[name] += n

    def _job_config(self, config: VerifyConfig | None) -> VerifyConfig:
        if config is None:
            return self.config
        clash = [f for f in LANE_FIELDS if getattr(config, f) != getattr(self.config, f)]
        if clash:
            raise ValueError(f"a job's config must match its Ray verifier's in {clash}")
        return config

    # -- the dispatching thread ------------------------------------------------------------
    def _dispatch(self) -> None:
        """Hand out queued cases, collect verdicts, re-queue the cases of lost actors."""
        while True:
            with self._lock:
                if self._closed:
                    return
                self._hand_out()
                refs = [r for a in self._actors for r in (a.jobs if a.ready is None else [a.ready])]
                if not refs:
                    self._give_up_if_no_actor()
                    self._lock.wait(POLL_S)
                    continue
            done, _ = self.ray.wait(refs, num_returns=1, timeout=POLL_S)
            if done:  # everything else already done too, without waiting
                done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            with self._lock:
                for ref in done:
                    self._collect(ref)
                self._give_up_if_no_actor()

    def _hand_out(self) -> None:
        live = [a for a in self._actors if a.ready is None]
        while self._pending and live:
            actor = min(live, key=lambda a: len(a.jobs) / a.slots)
            if len(actor.jobs) >= actor.slots:
                return
            job = self._pending.popleft()
            if job.lost == 0 and not job.future.set_running_or_notify_cancel():
                continue  # cancelled before it was handed out
            ref = actor.handle.verify.remote(job.task, job.candidate, job.config)
            actor.jobs[ref] = job

    def _collect(self, ref) -> None:
        """One finished call: a started actor, a verdict, or a lost actor."""
        actor = next((a for a in self._actors if ref == a.ready or ref in a.jobs), None)
        if actor is None:
            return  # its actor was dropped already: its cases are queued again
        if ref == actor.ready:
            try:
                self._started(actor, self.ray.get(ref))
            except Exception as e:  # noqa: BLE001 - a replacement that cannot start
                log.warning("ray: a new verifier actor failed to start: %s", _last_line(e))
                self._drop(actor)
            return
        job = actor.jobs.pop(ref)
        try:
            result = self.ray.get(ref)
        except self._lost_errors as e:  # the actor (its process, its node) is gone
            actor.jobs[ref] = job
            self._lost(actor, e)
            return
        except Exception as e:  # noqa: BLE001 - the actor's pool raised (closed, a bug)
            self._resolve(job, error=e)
            return
        self.stats["verified"] += 1
        self._resolve(job, result=result)

    def _resolve(self, job: _Job, result: VerifyResult | None = None, error=None) -> None:
        """A case's first answer is its verdict; a later one is dropped."""
        if job.future.done():
            self.stats["duplicates"] += 1
            return
        if error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)

    def _lost(self, actor: _Actor, error: Exception) -> None:
        """A dead actor: what it finished counts, the rest goes to the front of the queue,
        and a new actor is asked for in its stead."""
        self.stats["lost_actors"] += 1
        log.warning("ray: a verifier actor on node %s was lost (%s); its %d cases go to "
                    "the others", actor.info.get("node"), type(error).__name__,
                    len(actor.jobs))  # fmt: skip
        refs = list(actor.jobs)
        finished, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        again = []
        for ref in refs:
            job = actor.jobs.pop(ref)
            try:
                result = self.ray.get(ref) if ref in finished else None
            except Exception:  # noqa: BLE001 - lost with the actor
                result = None
            if result is not None:
                self.stats["verified"] += 1
                self._resolve(job, result=result)
                continue
            job.lost += 1
            if job.lost >= MAX_TRIES:
                self._resolve(job, error=RayVerifierError(
                    f"verifying a candidate of {job.task.id} lost {job.lost} Ray actors "
                    f"(the last: {error}); it is not tried again"))  # fmt: skip
            else:
                again.append(job)
        self.stats["resubmitted"] += len(again)
        self._pending.extendleft(reversed(again))
        self._drop(actor)
        if not self._closed:
            options = self._placements[0]
            if "num_gpus" not in options:  # its node may be gone: any node will do
                options = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
            self._start_actor(options)

    def _give_up_if_no_actor(self) -> None:
        """Fail the waiting cases when no actor has been alive for start_timeout_s."""
        if any(a.ready is None for a in self._actors):
            self._alive_at = time.monotonic()
            return
        if not self._pending or time.monotonic() - self._alive_at < self.start_timeout_s:
            return
        while self._pending:
            job = self._pending.popleft()
            if job.lost or job.future.set_running_or_notify_cancel():
                self._resolve(job, error=RayVerifierError(
                    f"no Ray verifier actor alive for {self.start_timeout_s:g} s (every one "
                    "was lost and none could start again); check `ray status`"))  # fmt: skip

    # -- closing --------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel what no actor answered, close every actor's pool; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
            jobs = list(self._pending) + [j for a in self._actors for j in a.jobs.values()]
            self._pending.clear()
            actors = list(self._actors)
        if getattr(self, "_thread", None) is not None:
            self._thread.join()
        for job in jobs:
            if not job.future.cancel() and not job.future.done():
                job.future.set_exception(RayVerifierError("the Ray verifier was closed"))
        if not self.ray.is_initialized():  # Ray shut down first: its actors went with it
            return
        with contextlib.suppress(Exception):  # an actor lost meanwhile
            closing = [a.handle.close.remote() for a in actors if a.ready is None]
            if closing:
                self.ray.wait(closing, num_returns=len(closing), timeout=60)
        for actor in actors:
            self._drop(actor)

    def __enter__(self) -> RayVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SHARED: dict[tuple, RayVerifier] = {}
_SHARED_LOCK = threading.Lock()
_AT_EXIT: list[bool] = []


def shared_ray_verifier(
    config: VerifyConfig | None = None, workers: int | None = None
) -> RayVerifier:
    """A process-wide Ray verifier for these settings, created on first use and closed at
    exit (the reward adapters and eval use it)."""
    config = config or VerifyConfig(backend="ray")
    key = (config.ray_address, config.ray_actors, *(getattr(config, f) for f in LANE_FIELDS),
           config.pool_recycle_jobs, workers)  # fmt: skip
    with _SHARED_LOCK:
        verifier = _SHARED.get(key)
        if verifier is None or verifier._closed:
            verifier = _SHARED[key] = RayVerifier(config, workers)
            if not _AT_EXIT:  # after ray.init's own: closed before Ray shuts down
                _AT_EXIT.append(atexit.register(close_shared_ray_verifiers) is not None)
        return verifier


def close_shared_ray_verifiers() -> None:
    with _SHARED_LOCK:
        verifiers = list(_SHARED.values())
        _SHARED.clear()
    for verifier in verifiers:
        verifier.close()
