"""The verifier as a reward for trainers: TRL reward functions and verl's `compute_score`.

TRL (`GRPOTrainer(reward_funcs=[...])`):

    reward = make_trl_reward(tasks)                  # sync
    reward = make_trl_reward(tasks, asynchronous=True)  # async: TRL awaits it beside others

Each dataset row carries a `task_id` column (the name is configurable) naming the task
its prompt was built from. The function returns one float per completion and, when the
trainer passes them (TRL >= 1.x does), logs per-completion details through `log_extra`
(stage, flags, error, speedup: -1 when not timed) and batch rates through
`log_metric`, with where the verifier's time went: `verify/programs` (the programs it
verified for the call, each once) and `verify/stage_s/<stage>` (their seconds per stage
summed over lanes: compile, correctness runs, `gpu_wait` for the GPU alone, `performance`
for timing...). `reward.with_details(prompts, completions, **kwargs)` (awaited when
asynchronous) returns `(rewards, details)`: the same verification, with each completion's
details dict (stage, correct, flags, error, speedup, reward, task) for the caller to keep.

verl (`custom_reward_function.path` pointing at this file, tritonrl/reward/adapters.py,
`name: compute_score`):
`compute_score(data_source, solution_str, ground_truth, extra_info)` where
`ground_truth` is a task id (`builtin:level1/1_ReLU`, a file path) or a reference
source in the KernelBench format; it returns a dict with `score` and the details. With
verl's batch reward manager (`reward_model.reward_manager=batch`), `name:
compute_score_batch` takes the whole batch's lists and verifies the rows side by side.

With `verify.endpoint` set (or $TRITONRL_VERIFY_ENDPOINT, for verl, whose rows carry no
config), candidates go to a `tritonrl serve` there instead (`tritonrl.verify.client`),
for rollout processes that see no GPU; the verdicts are the server's, under its verify
settings, and the rewards are scored here under this side's `reward_scheme`. A service
that does not answer after the client's tries raises `ServiceError`, naming it.

Otherwise candidates are verified through a process-wide `VerifierPool` (`pool.shared_pool`:
warm sandboxed lanes, one per CPU core, on CUDA at most 16 per GPU, each worker then
holding a CUDA context of its own: pass `workers` for fewer; created on first use and
closed at exit); the completions of one batch that are one program (the same code but
for comments and blank lines: `pool.program_key`) are verified once, since a reward
reads only the verdict (multi-turn RL, which reads the errors, keeps the text). A
completion whose verification crashes, hangs or meets a sandbox limit scores 0 with the
reason in its details (the verifier's verdict); a verification that raises instead of
answering (the pool closed under it) does too, with `verifier error: ...` as its error,
and the batch goes on. With `memo` N > 0 (GRPO and RLOO: `rl.reward_memo`) the reward
also keeps the verdicts of the last N programs it verified, each under its task: a
program a later step samples again takes its verdict (a copy) instead of a second
verification, as the same program within a batch does (a policy whose entropy has fallen
samples its answers again and again). Verifier errors are not kept.

With `verify.backend: ray` the process-wide verifier is a Ray cluster's instead
(`tritonrl.verify.ray_backend`: an actor per GPU, each with its own pool; `workers` is then
each actor's lanes), with the same verdicts and the same calls.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from tritonrl.config import VerifyConfig
from tritonrl.reward.schemes import reward_for
from tritonrl.tasks import Task, load_source
from tritonrl.tasks.difficulty import label_level
from tritonrl.verify.backend import Verifier, shared_verifier
from tritonrl.verify.client import ENDPOINT_ENV, TOKEN_ENV, VerifyClient, client_for
from tritonrl.verify.inputs import TRUSTED_LOCK
from tritonrl.verify.pool.pool import program_key, unshared
from tritonrl.verify.result import VerifyResult

log = logging.getLogger(__name__)


def completion_text(completion: Any) -> str:
    """TRL passes plain strings or, for conversational data, a list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def _details(r: VerifyResult, reward: float) -> dict[str, Any]:
    return {"task": r.task, "reward": reward, "stage": r.stage, "correct": r.correct,
            "flags": list(r.flags), "error": r.error, "speedup": r.speedup,
            "reward_speedup": r.reward_speedup}  # fmt: skip


class _Memo:
    """The verdicts of the last `size` (task, program) pairs verified, least recently used
    out; a hit is a copy. 0: keeps nothing."""

    def __init__(self, size: int):
        self.size = size
        self.kept: OrderedDict[tuple, VerifyResult] = OrderedDict()

    def split(self, jobs: list[tuple[Task, str]]) -> tuple[list, dict[int, VerifyResult]]:
        """Each job's key, and the verdicts known already by job index."""
        keys = [(t.id, program_key(c)) for t, c in jobs] if self.size else [None] * len(jobs)
        known = {}
        for i, key in enumerate(keys):
            if key in self.kept:
                self.kept.move_to_end(key)
                known[i] = copy.deepcopy(self.kept[key])
        return keys, known

    def merge(self, keys, known: dict[int, VerifyResult], fresh: list[VerifyResult]):
        """Every job's verdict, the known ones and the `fresh` ones (the other jobs', in
        order), the fresh ones kept (not a verifier error: the pool's failure, not the
        candidate's)."""
        fresh_iter = iter(fresh)
        out = [known[i] if i in known else next(fresh_iter) for i in range(len(keys))]
        for i, (key, r) in enumerate(zip(keys, out, strict=True)):
            if i in known or not self.size or (r.error or "").startswith("verifier error"):
                continue
            self.kept[key] = copy.deepcopy(r)
            self.kept.move_to_end(key)
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)
        return out


def _work(results: list[VerifyResult], futures: list[Future]) -> tuple[int, dict[str, float]]:
    """How many programs the pool verified for `futures` (a shared future once) and their
    seconds per stage, summed."""
    seen: set[int] = set()
    seconds: dict[str, float] = {}
    for r, f in zip(results, futures, strict=True):
        if id(f) not in seen:
            seen.add(id(f))
            for name, t in r.stage_times.items():
                seconds[name] = seconds.get(name, 0.0) + t
    return len(seen), seconds


class _Scorer:
    def __init__(
        self, tasks: Iterable[Task] | dict[str, Task], config, task_key, workers, memo: int = 0
    ):
        self.tasks = dict(tasks) if isinstance(tasks, dict) else {t.id: t for t in tasks}
        self.config = config or VerifyConfig()
        self.task_key = task_key
        self.workers = workers  # the shared verifier's lanes (None: its default)
        self.client = client_for(self.config)  # None: verify in this process
        self.memo = _Memo(memo)
        self.work: tuple[int, dict[str, float]] | None = None  # the last call's (_work)

    @property
    def pool(self) -> Verifier:
        """The process-wide verifier of `verify.backend` (a pool, or a Ray cluster's)."""
        return shared_verifier(self.config, self.workers)

    def _task(self, task_id: str) -> Task:
        if task_id not in self.tasks:
            raise KeyError(
                f"reward: unknown task id {task_id!r}; the dataset's {self.task_key!r} column "
                f"must name one of the {len(self.tasks)} tasks given to make_trl_reward"
            )
        return self.tasks[task_id]

    def jobs(self, completions, kwargs) -> list[tuple[Task, str]]:
        if self.task_key not in kwargs:
            raise KeyError(
                f"reward: the dataset has no {self.task_key!r} column; add one naming each "
                f"row's task, or pass task_key= to make_trl_reward"
            )
        ids = kwargs[self.task_key]
        return [(self._task(i), completion_text(c)) for i, c in zip(ids, completions, strict=True)]

    def verify(
        self, jobs: list[tuple[Task, str]], same_program: bool = False
    ) -> list[VerifyResult]:
        """The verdicts of `jobs` ((task, completion) each), waited for: through the
        service when there is one, else the shared pool (identical jobs once; with
        `same_program`, each program once, and the memo's programs not again: the
        reward reads no error text)."""
        return self.verify_counted(jobs, same_program)[0]

    def verify_counted(
        self, jobs: list[tuple[Task, str]], same_program: bool = False
    ) -> tuple[list[VerifyResult], int]:
        """`verify`'s verdicts and how many of them came from the memo."""
        keys, known = self.memo.split(jobs) if same_program else ([None] * len(jobs), {})
        todo = [job for i, job in enumerate(jobs) if i not in known]
        if self.client is not None:
            fresh = self.served(todo, same_program)
        else:
            futures = self.pool.submit_many(todo, self.config, same_program)
            results = [_as_result(_outcome(f), job) for f, job in zip(futures, todo, strict=True)]
            self.work = _work(results, futures)
            fresh = unshared(results, futures)
        return (self.memo.merge(keys, known, fresh) if same_program else fresh), len(known)

    def served(self, jobs: list[tuple[Task, str]], same_program: bool = True) -> list[VerifyResult]:
        """The service's verdicts of `jobs`, each job (with `same_program`: each program)
        of a task sent once, a copy for the others, as the pool does; the work it did is
        kept for `report`, as the pool's is."""
        first: dict[tuple, int] = {}
        key = program_key if same_program else str
        which, unique = [], []
        for job in jobs:
            k = first.setdefault((job[0].id, key(job[1])), len(first))
            if k == len(unique):
                unique.append(job)
            which.append(k)
        answers = self.client.verify_many(unique) if unique else []
        seconds: dict[str, float] = {}
        for r in answers:
            for name, t in r.stage_times.items():
                seconds[name] = seconds.get(name, 0.0) + t
        self.work = (len(answers), seconds)
        seen: set[int] = set()
        out = []
        for k in which:
            out.append(answers[k] if k not in seen else copy.deepcopy(answers[k]))
            seen.add(k)
        return out

    def report(
        self, results: list[VerifyResult], hits: int, kwargs
    ) -> tuple[list[float], list[dict]]:
        """Rewards and details of `results`, logged through TRL's hooks when given;
        `hits`: how many came from the memo."""
        rewards = [reward_for(r, self.config) for r in results]
        details = [_details(r, x) for r, x in zip(results, rewards, strict=True)]
        log_extra, log_metric = kwargs.get("log_extra"), kwargs.get("log_metric")
        if log_extra:
            log_extra("verify_stage", [d["stage"] for d in details])
            log_extra("verify_flags", [",".join(d["flags"]) for d in details])
            log_extra("verify_error", [d["error"] or "" for d in details])
            log_extra("verify_speedup", [-1.0 if d["speedup"] is None else d["speedup"]
                                         for d in details])  # fmt: skip
        if log_metric and results:
            n = len(results)
            log_metric("verify/correct", sum(r.correct for r in results) / n)
            log_metric("verify/compiled", sum(r.compiled for r in results) / n)
            log_metric("verify/cheated", sum(r.cheated for r in results) / n)
            if self.memo.size:
                log_metric("verify/memo_hits", hits / n)
            if self.work is not None:
                programs, seconds = self.work
                log_metric("verify/programs", programs)
                for name, t in sorted(seconds.items()):
                    log_metric(f"verify/stage_s/{name}", round(t, 3))
        self.work = None
        return rewards, details


def make_trl_reward(
    tasks: Iterable[Task] | dict[str, Task],
    config: VerifyConfig | None = None,
    task_key: str = "task_id",
    workers: int | None = None,
    asynchronous: bool = False,
    memo: int = 0,
):
    """A TRL reward function `(prompts, completions, **kwargs) -> list[float]`; its
    `with_details` attribute returns `(rewards, details)` for the same call. `memo`: the
    programs whose verdicts are kept for later batches (0: none)."""
    scorer = _Scorer(tasks, config, task_key, workers, memo)

    if asynchronous:

        async def with_details(prompts, completions, **kwargs):
            jobs = scorer.jobs(completions, kwargs)
            keys, known = scorer.memo.split(jobs)
            todo = [job for i, job in enumerate(jobs) if i not in known]
            if scorer.client is not None:
                fresh = await asyncio.to_thread(scorer.served, todo)
            else:
                futures = scorer.pool.submit_many(todo, scorer.config, same_program=True)
                results = await asyncio.gather(
                    *map(asyncio.wrap_future, futures), return_exceptions=True
                )
                results = [_as_result(r, job) for r, job in zip(results, todo, strict=True)]
                scorer.work = _work(results, futures)
                fresh = unshared(results, futures)
            merged = scorer.memo.merge(keys, known, fresh)
            return scorer.report(merged, len(known), kwargs)

        async def tritonrl_verifier(prompts, completions, **kwargs) -> list[float]:
            return (await with_details(prompts, completions, **kwargs))[0]

        reward = tritonrl_verifier
    else:

        def with_details(prompts, completions, **kwargs):
            jobs = scorer.jobs(completions, kwargs)
            return scorer.report(*scorer.verify_counted(jobs, same_program=True), kwargs)

        def tritonrl_verifier(prompts, completions, **kwargs) -> list[float]:
            return with_details(prompts, completions, **kwargs)[0]

        reward = tritonrl_verifier
    reward.scorer = scorer
    reward.with_details = with_details
    return reward


def _outcome(future):
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - turned into a failed result by _as_result
        return e


def _as_result(outcome, job: tuple[Task, str]) -> VerifyResult:
    """A verification that raised instead of answering (the pool closed under it, a bug)
    scores 0 like any failure, with the reason, and training goes on."""
    if isinstance(outcome, VerifyResult):
        return outcome
    log.warning("reward: verifying a completion of %s raised %r; it scores 0", job[0].id, outcome)
    # No stage was reached that the verifier vouches for: the first, with the reason.
    return VerifyResult(job[0].id, "unknown").fail("extract", f"verifier error: {outcome!r}")


@functools.lru_cache(maxsize=1024)
def _task_from_ground_truth(ground_truth: str) -> Task:
    # Loading parses under tritonrl.astlock.AST_LOCK (gh-106905); building under the lock
    # the trusted side's reference preparation holds.
    with TRUSTED_LOCK:
        return _load_ground_truth(ground_truth)


def _load_ground_truth(ground_truth: str) -> Task:
    if "class Model" in ground_truth and "get_inputs" in ground_truth:
        digest = hashlib.sha256(ground_truth.encode()).hexdigest()[:12]
        level = label_level(ground_truth)
        return Task(f"inline:{digest}", level, digest, ground_truth, "verl:ground_truth")
    report = load_source(ground_truth)
    if len(report.tasks) != 1:
        raise ValueError(f"ground_truth {ground_truth!r} names {len(report.tasks)} tasks, not one")
    return report.tasks[0]


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None
) -> dict[str, Any]:
    """verl's custom reward entry point: a dict with `score` plus details for logging."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0]


def compute_score_batch(
    data_sources, solution_strs, ground_truths, extra_infos=None, **_: Any
) -> list[dict[str, Any]]:
    """verl's batch entry point (`reward_model.reward_manager=batch`, `name:
    compute_score_batch`): every row of a batch is queued on the pool at once, so its
    lanes verify them side by side (identical rows once); one dict per row, in order.
    A row whose ground truth or `verify_config` is bad scores 0 with the reason."""
    # verl passes numpy object arrays: no truth value, elements of numpy's str type
    extras = [None] * len(solution_strs) if extra_infos is None else list(extra_infos)
    rows = list(zip(solution_strs, ground_truths, extras, strict=True))
    del data_sources  # one kind of task: the ground truth names it
    pending: list[Any] = []
    seen: dict[tuple, Any] = {}
    for solution, ground_truth, extra in rows:
        what = "verify_config"
        try:  # a bad row must not crash a multi-node run
            config = VerifyConfig(**(extra or {}).get("verify_config", {}))
            what = "ground_truth"
            task = _task_from_ground_truth(ground_truth)
        except Exception as e:  # noqa: BLE001
            pending.append(f"bad {what}: {e}")
            continue
        key = (task.id, task.source, solution, repr(config))
        if key not in seen:
            client = _client(config)
            seen[key] = (
                _Remote(client, task, solution)
                if client is not None
                else shared_verifier(config).submit(task, solution, config)
            )
        pending.append((seen[key], config))
    _send_remote(seen.values())
    return [_failed(p) if isinstance(p, str) else _score(p[0].result(), p[1]) for p in pending]


@functools.lru_cache(maxsize=16)
def _cached_client(endpoint: str, token_file: str, token_env: str | None) -> VerifyClient | None:
    del token_env  # part of the key only: a changed token makes a new client
    return client_for(VerifyConfig(endpoint=endpoint, endpoint_token_file=token_file))


def _client(config: VerifyConfig) -> VerifyClient | None:
    """The service client for a row (its config's endpoint, else $TRITONRL_VERIFY_ENDPOINT)."""
    endpoint = config.endpoint or os.environ.get(ENDPOINT_ENV, "")
    if not endpoint:
        return None
    return _cached_client(endpoint, config.endpoint_token_file, os.environ.get(TOKEN_ENV))


class _Remote(Future):
    """A row bound for the service; `_send_remote` sends each client's rows at once."""

    def __init__(self, client: VerifyClient, task: Task, solution: str):
        super().__init__()
        self.client, self.job = client, (task, solution)


def _send_remote(futures: Iterable[Any]) -> None:
    """One request (or the client's pieces of it) per service; a service that does not
    answer raises its `ServiceError` (training cannot go on without rewards)."""
    by_client: dict[int, list[_Remote]] = {}
    for f in futures:
        if isinstance(f, _Remote):
            by_client.setdefault(id(f.client), []).append(f)
    for rows in by_client.values():
        results = rows[0].client.verify_many([f.job for f in rows])
        for f, r in zip(rows, results, strict=True):
            f.set_result(r)


def _score(r: VerifyResult, config: VerifyConfig) -> dict[str, Any]:
    return {"score": reward_for(r, config), "stage": r.stage, "correct": r.correct,
            "flags": ",".join(r.flags), "error": r.error or "",
            "speedup": r.speedup if r.speedup is not None else -1.0}  # fmt: skip


def _failed(why: str) -> dict[str, Any]:
    return {"score": 0.0, "stage": "task", "error": why, "correct": False, "flags": "",
            "speedup": -1.0}  # fmt: skip
