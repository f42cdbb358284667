"""The verifier on Ray for real: a local Ray instance on the CPU, actors each owning a
sandboxed pool, the Triton interpreter.

The Ray verifier's verdicts must be the local pool's for the same cases (right, wrong,
not compiling, cheating), through its own calls, the RL reward and eval; an actor killed
mid-batch loses no case and repeats none; a new actor takes the lost one's place; what
the cluster cannot hold is refused with the reason; `verify --batch --backend ray` (and
one kernel) reaches a running cluster by its address. Ray is the `ray` extra (in `all`,
so CI has it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import pytest
import torch

from cli_process import tritonrl
from tritonrl.config import VerifyConfig
from tritonrl.config_loader import load_config
from tritonrl.evaluate.backends import Answer
from tritonrl.evaluate.runner import evaluate
from tritonrl.reward import compute_reward, make_trl_reward
from tritonrl.tasks import load_builtin
from tritonrl.verify.backend import shared_verifier
from tritonrl.verify.pool.pool import VerifierPool, default_workers
from tritonrl.verify.ray_backend import RayVerifier, RayVerifierError, shared_ray_verifier

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
ray = pytest.importorskip("ray", reason="the Ray backend needs the `ray` extra")

RELU = load_builtin("level1/1_ReLU").tasks[0]
SIGMOID = load_builtin("level1/2_Sigmoid").tasks[0]
GOOD = RELU.solution
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
CHEAT = GOOD.replace("        return y\n", "        return torch.relu(x)\n")
NO_COMPILE = GOOD.replace("\n\n@triton.jit", "\n\nBLOCK_DEFAULT = undefined_constant\n\n\n"
                          "@triton.jit", 1)  # fmt: skip
SIGMOID_WRONG = SIGMOID.solution.replace("1.0 / (1.0 + tl.exp(-x))", "1.0 / (1.0 + tl.exp(x))")
CASES = [(RELU, GOOD), (RELU, WRONG), (RELU, CHEAT), (RELU, NO_COMPILE),
         (SIGMOID, SIGMOID.solution), (SIGMOID, SIGMOID_WRONG)]  # fmt: skip
CPU = VerifyConfig(device="cpu")
RAY = VerifyConfig(device="cpu", backend="ray", ray_actors=2)


def verdict(r) -> tuple:
    """What must agree between two verifications (numbers in messages vary per seed)."""
    import re

    error = re.sub(r"\d+(\.\d+)?", "#", r.error) if r.error else None
    sets = [(o.name, o.ok) for o in r.input_sets]
    return (r.task, r.stage, r.compiled, r.tiny_correct, r.correct, r.flags, r.timed_out,
            compute_reward(r), sets, error)  # fmt: skip


class Answering:
    """A model that gives `text` as every answer (what eval asks of a model)."""

    name = "answering"
    identity = {"name": "answering", "backend": "test"}

    def __init__(self, text: str):
        self.text = text

    def generate(self, prompts, n, config, greedy=None):
        return [[Answer(self.text, False) for _ in range(n)] for _ in prompts]


def verdict_of_row(row: dict) -> tuple:
    """What must agree between two verdicts printed as JSON."""
    return row["stage"], row["correct"], row["flags"], row["reward"]


def numbered(cases, copies: int):
    """`copies` of every case, each candidate made distinct by a comment (so none is
    deduplicated), and the case each came from."""
    out = []
    for n in range(copies):
        out += [((task, f"{code}\n# copy {n}\n"), i) for i, (task, code) in enumerate(cases)]
    return [pair for pair, _ in out], [i for _, i in out]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance of two CPUs for the module (its own processes, no dashboard),
    and one GPU that Ray counts but the machine need not have (the GPU actors' plan)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, object_store_memory=80 << 20,
             log_to_driver=False)  # fmt: skip
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def local_verdicts():
    """The local pool's verdicts of CASES: what the Ray verifier must give."""
    with VerifierPool(CPU, workers=2) as pool:
        return [verdict(r) for r in pool.verify_many(CASES)]


def test_verdicts_are_the_local_pools_in_input_order(cluster, local_verdicts, tmp_path):
    assert [v[1] for v in local_verdicts] == ["done", "correctness", "static", "compile",
                                              "done", "correctness"]  # fmt: skip
    verifier = shared_ray_verifier(RAY)  # what the reward and eval use
    with verifier:
        assert shared_verifier(RAY) is verifier
        assert len(verifier.actors) == 2 and verifier.lanes == 2 * default_workers([])
        results = verifier.verify_many(CASES)
        assert [verdict(r) for r in results] == local_verdicts
        # The same through the other calls, a job's own config included.
        runtime = VerifyConfig(device="cpu", backend="ray", ray_actors=2, static_checks=False)
        cheat = verifier.submit(RELU, CHEAT, runtime).result(timeout=300)
        assert cheat.cheated and cheat.stage != "static"
        got = dict(verifier.imap_unordered(CASES + CASES[:2]))
        assert sorted(got) == list(range(len(CASES) + 2))
        assert [verdict(got[i]) for i in range(len(CASES))] == local_verdicts
        assert verdict(got[len(CASES)]) == local_verdicts[0]
        assert verifier.stats["deduplicated"] == 2 and verifier.stats["lost_actors"] == 0
        # The RL reward with verify.backend ray verifies through this same verifier.
        reward = make_trl_reward([RELU, SIGMOID], RAY)
        assert reward.scorer.pool is verifier
        rewards = reward([""] * len(CASES), [code for _, code in CASES],
                         task_id=[task.id for task, _ in CASES])  # fmt: skip
        assert rewards == [v[7] for v in local_verdicts]
        # And eval: a model answering ReLU's solution to ReLU (right) and Sigmoid (wrong).
        config = dataclasses.replace(load_config(None, ["--verify.device", "cpu"]), verify=RAY)
        before = verifier.stats["submitted"]
        summary = evaluate(Answering(GOOD), [RELU, SIGMOID], 2, tmp_path / "ev", config)
        assert summary["metrics"]["overall"]["correct"] == 0.5
        rows = [json.loads(x) for x in (tmp_path / "ev/samples.jsonl").read_text().splitlines()]
        verdicts = {(r["task"], r["verdict"]["correct"]) for r in rows}
        assert verdicts == {(RELU.id, True), (SIGMOID.id, False)}
        assert verifier.stats["submitted"] == before + 2  # two distinct answers, twice each
        with pytest.raises(ValueError, match="must match its Ray verifier's in"):
            verifier.submit(RELU, GOOD, VerifyConfig(device="cpu", memory_mb=1024))
    with pytest.raises(RayVerifierError, match="closed"):
        verifier.submit(RELU, GOOD)


def test_an_actor_lost_mid_batch_loses_no_case_and_repeats_none(cluster, local_verdicts):
    pairs, origin = numbered(CASES[:4], 2)
    with RayVerifier(RAY, workers=1) as verifier:
        answers = verifier.imap_unordered(pairs)
        seen = [next(answers)]
        # The actor with the most cases in hand dies (as its node would).
        victim = max(verifier.load(), key=lambda handle_jobs: handle_jobs[1])
        assert victim[1] >= 1
        ray.kill(victim[0], no_restart=True)
        seen += list(answers)
        indices = [i for i, _ in seen]
        assert sorted(indices) == list(range(len(pairs)))  # each case exactly once
        for i, result in seen:
            assert verdict(result) == local_verdicts[origin[i]], i
        stats = verifier.stats
        assert stats["lost_actors"] == 1 and stats["resubmitted"] >= 1
        assert stats["verified"] - stats["duplicates"] == len(pairs)
        # A new actor takes the lost one's place once the cluster has room for it.
        deadline = time.monotonic() + 120
        while len(verifier.actors) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(verifier.actors) == 2 and stats["started_actors"] == 3
        assert verdict(verifier.verify_many(CASES[:1])[0]) == local_verdicts[0]


def test_every_actor_lost_fails_the_waiting_cases_with_the_reason(cluster):
    with RayVerifier(VerifyConfig(device="cpu", backend="ray", ray_actors=1), workers=1) as v:
        # No actor may be missing for longer than this: the new one cannot start so soon.
        v.start_timeout_s = 0.2
        future = v.submit(RELU, GOOD)
        ray.kill(v.actors[0], no_restart=True)
        with pytest.raises(RayVerifierError, match="no Ray verifier actor alive for 0.2 s"):
            future.result(timeout=120)
        assert v.stats["lost_actors"] == 1 and v.stats["resubmitted"] == 1


def test_what_the_cluster_cannot_hold_is_refused_at_once(cluster):
    # verify.device auto on a cluster with a GPU: GPU actors, at most one per GPU.
    with pytest.raises(RayVerifierError, match=r"more GPU actors than the Ray cluster has GPUs"):
        RayVerifier(VerifyConfig(backend="ray", ray_actors=2))
    with pytest.raises(RayVerifierError, match=r"more actors than the Ray cluster has CPUs \(2;"):
        RayVerifier(VerifyConfig(device="cpu", backend="ray", ray_actors=3))


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the GPU actor starts")
def test_an_actor_that_cannot_start_says_why(cluster):
    # The cluster's GPU is one Ray counts; this machine has none for the actor's pool.
    with pytest.raises(RayVerifierError, match="failed to start.*torch sees no CUDA device"):
        RayVerifier(VerifyConfig(backend="ray"), workers=1)
    deadline = time.monotonic() + 30  # the failed actor's GPU goes back to the cluster
    while ray.available_resources().get("GPU") != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("GPU") == 1


def test_verify_batch_backend_ray_joins_the_cluster_at_its_address(cluster, tmp_path,
                                                                   local_verdicts):  # fmt: skip
    lines = [json.dumps({"task": task.id, "kernel": code}) for task, code in CASES]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.jsonl"
    r = tritonrl("verify", "--batch", str(cases), "--out", str(out), "--backend", "ray",
                 "--verify.ray_address", cluster, "--device", "cpu",
                 "--workers", "1")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "on the Ray cluster: 1 actors (cpu), 1 lanes" in r.stderr  # one per node
    rows = sorted(map(json.loads, out.read_text().splitlines()), key=lambda row: row["index"])
    assert [row["index"] for row in rows] == list(range(len(CASES)))
    assert [row["correct"] for row in rows] == [v[4] for v in local_verdicts]
    assert [row["stage"] for row in rows] == [v[1] for v in local_verdicts]
    assert [row["task_id"] for row in rows] == [task.id for task, _ in CASES]
    assert "6 cases: 2 correct, 4 not correct" in r.stderr
    (tmp_path / "wrong.py").write_text(WRONG)  # and one kernel, on the cluster too
    one = tritonrl("verify", RELU.id, str(tmp_path / "wrong.py"), "--json", "--backend", "ray",
                   "--device", "cpu", "--verify.ray_address", cluster)  # fmt: skip
    assert one.returncode == 0, one.stderr
    assert verdict_of_row(json.loads(one.stdout)) == verdict_of_row(rows[1])
