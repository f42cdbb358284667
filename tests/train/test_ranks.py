"""The ranks of a multi-process training, for real on the CPU (gloo).

`Ranks` read from the launcher's environment; rank 0's value and failure reaching every
rank, and the stop agreed across ranks, in two processes; then `accelerate launch
--num_processes 2 -m tritonrl sft` with the shipped DDP config: a SIGTERM to rank 1 stops
both ranks at the same step with a checkpoint that holds both ranks' parts, rank 0
records and syncs the stop, and the same command resumes on both ranks from it; a
GRPO step in two processes, and three with each batch verified a step ahead. The last
three run again on two GPUs (NCCL) where a machine has them (`gpu`). FSDP and DeepSpeed
are not run here: DeepSpeed needs CUDA, and on the CPU accelerate drops the FSDP plugin
(MULTI_CPU, plain data parallel); their configs are checked by accelerate's loader
(tests/train/test_train_commands.py).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonrl.runs import Run, RunError
from tritonrl.runs.checkpoint import check
from tritonrl.train.commands import ACCELERATE_DIR
from tritonrl.train.ranks import STOPS, LeaderFailed, Ranks

pytest.importorskip("accelerate")
pytest.importorskip("trl")

# The tiny-cpu config cut small (as tests/train/conftest.py's), with a checkpoint per step.
SMALL = ["--data.generated_tasks", "20", "--tiny_model.generated_tasks", "50",
         "--run.report_to", "[none]", "--sft.save_steps", "1"]  # fmt: skip
LAUNCH = shutil.which("accelerate")


# The launches on the CPU (gloo) and, marked `gpu`, on two CUDA devices (NCCL).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _two_gpus_if(device: str) -> None:
    if device == "cuda":
        torch = pytest.importorskip("torch")
        if torch.cuda.device_count() < 2:
            pytest.skip("needs two CUDA devices")


def _clear_env(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def test_one_process_is_rank_0_of_1_and_needs_no_collective(monkeypatch):
    _clear_env(monkeypatch)
    ranks = Ranks.from_env()
    assert (ranks.rank, ranks.local_rank, ranks.world, ranks.main, ranks.many) == (
        0, 0, 1, True, False)  # fmt: skip
    assert ranks.from_leader(lambda: 41 + 1) == 42
    assert ranks.broadcast("x") == "x"
    assert ranks.agree_stop(None, "cpu") is None
    assert ranks.agree_stop("SIGTERM", "cpu") == "SIGTERM"
    import torch.distributed as dist

    assert not dist.is_initialized()


def test_the_launchers_environment_gives_the_rank(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert Ranks.from_env() == Ranks(3, 1, 4)
    assert not Ranks.from_env().main


@pytest.mark.parametrize(
    ("env", "message"),
    [({"WORLD_SIZE": "2", "RANK": "2"}, "do not describe a rank"),
     ({"WORLD_SIZE": "two"}, "must be integers"),
     ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1"}, "do not describe a rank")],
)  # fmt: skip
def test_a_bad_rank_environment_is_a_clear_error(monkeypatch, env, message):
    _clear_env(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message) as e:
        Ranks.from_env()
    assert "unset them" in str(e.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [(["--rl.algo", "best-of-n"], "rl --algo best-of-n runs in one process, not 2"),
     (["--rl.algo", "rwsft"], "only grpo and rloo train on several GPUs")],
)  # fmt: skip
def test_rl_refuses_what_several_processes_cannot_train(overrides, message):
    from tritonrl.config_loader import load_config
    from tritonrl.train.rl import check_ranks

    config = load_config(None, overrides)
    with pytest.raises(ValueError, match=message):
        check_ranks(config, Ranks(0, 0, 2))
    check_ranks(config, Ranks())  # one process trains all of them
    check_ranks(load_config(None, ["--rl.algo", "rloo"]), Ranks(1, 1, 2))
    check_ranks(load_config(None, ["--rl.overlap_reward", "true"]), Ranks(1, 1, 2))


def test_each_rank_holds_no_gate_on_the_cpu():
    from tritonrl.train.rl.grpo import trainer_gate

    assert trainer_gate("cpu", Ranks(1, 1, 2)) is None


@pytest.mark.gpu
def test_each_rank_holds_the_gate_of_its_own_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    from tritonrl.train.rl.grpo import trainer_gate
    from tritonrl.verify.pool.gate import gate_for, visible_gpus

    gpus = visible_gpus()
    gates = [trainer_gate("cuda", Ranks(rank, rank, 2)) for rank in (0, 1)]
    assert gates == [gate_for(gpus[0]), gate_for(gpus[1])] and gates[0] is not gates[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Run in each of two processes: what rank 0's value, rank 0's failure and a stop asked on
# one rank look like on every rank (gloo on the CPU).
TWO_RANKS = """
import json, sys
from tritonrl.train.ranks import LeaderFailed, Ranks
ranks = Ranks.from_env()
seen = {"value": ranks.from_leader(lambda: {"rank": ranks.rank}, device="cpu")}
try:
    ranks.from_leader(lambda: 1 / 0, device="cpu")
except LeaderFailed as e:
    seen["failed"] = f"LeaderFailed: {e}"
except ZeroDivisionError as e:
    seen["failed"] = f"ZeroDivisionError: {e}"
seen["none"] = ranks.agree_stop(None, "cpu")
seen["one"] = ranks.agree_stop("SIGTERM" if ranks.rank == 1 else None, "cpu")
seen["both"] = ranks.agree_stop("spot-notice" if ranks.rank == 0 else "SIGINT", "cpu")
seen["gathered"] = ranks.gather([ranks.rank] * (ranks.rank + 1), "cpu")
print("SEEN" + json.dumps(seen), flush=True)
"""


def test_two_ranks_share_rank_0s_value_its_failure_and_a_stop(tmp_path):
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, "-c", TWO_RANKS], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    seen = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        seen.append(json.loads(out.split("SEEN", 1)[1]))
    for s in seen:
        assert s["value"] == {"rank": 0}
        assert s["none"] is None
        assert s["one"] == "SIGTERM"  # asked on rank 1 only, agreed on both
        assert s["both"] == STOPS[max(STOPS.index("spot-notice"), STOPS.index("SIGINT"))]
        assert s["gathered"] == [[0], [1, 1]]  # every rank's value, by rank
    assert seen[0]["failed"] == "ZeroDivisionError: division by zero"
    assert seen[1]["failed"] == "LeaderFailed: rank 0 failed: ZeroDivisionError: division by zero"
    assert issubclass(LeaderFailed, RuntimeError)


def _workers(marker: str) -> dict[int, int]:
    """{rank: pid} of the training processes of the launch marked `marker` (its
    TRITONRL_TEST_LAUNCH, which the workers inherit; the launcher has no RANK)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        variables = dict(v.split(b"=", 1) for v in environ if b"=" in v)
        if variables.get(b"TRITONRL_TEST_LAUNCH") == marker.encode() and b"RANK" in variables:
            found[int(variables[b"RANK"])] = int(entry.name)
    return found


def _launch(config: str, run_dir: Path, *args: str, stage: str = "sft") -> subprocess.Popen:
    """`accelerate launch` of `tritonrl sft` (or `stage`) in 2 processes with a shipped
    config; its workers are `_workers(launcher.marker)`."""
    assert LAUNCH, "accelerate's launcher is not installed"
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    launcher = subprocess.Popen(
        [LAUNCH, "launch", "--config_file", str(ACCELERATE_DIR / f"{config}.yaml"),
         "--num_processes", "2", "--main_process_port", str(_free_port()),
         "-m", "tritonrl", stage, "--run", str(run_dir),
         *(SMALL if stage == "sft" else []), *args],
        env={**os.environ, "TQDM_DISABLE": "1", "TRITONRL_TEST_LAUNCH": marker},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    launcher.marker = marker
    return launcher


def _output(launcher: subprocess.Popen, timeout: float = 400) -> str:
    out, _ = launcher.communicate(timeout=timeout)
    return out


@pytest.mark.slow  # two launches of two training processes
@pytest.mark.parametrize("device", DEVICES)
def test_ddp_sigterm_to_one_rank_stops_both_at_one_step_and_both_resume(tmp_path, device):
    _two_gpus_if(device)
    run_dir, store = tmp_path / "run", tmp_path / "store"
    args = ["--sft.max_steps", "6", "--run.store", str(store), "--run.sync_interval_s", "0",
            "--sft.device", device]  # fmt: skip
    launcher = _launch("ddp", run_dir, *args)
    try:
        deadline = time.monotonic() + 300
        workers: dict[int, int] = {}
        while time.monotonic() < deadline and launcher.poll() is None:
            workers = workers if len(workers) == 2 else _workers(launcher.marker)
            try:
                if Run.open(run_dir).has_artifact("sft", "checkpoint"):
                    break
            except RunError:
                pass
            time.sleep(0.2)
        if launcher.poll() is not None:
            pytest.fail(f"the launch ended before its first checkpoint:\n{_output(launcher)}")
        assert len(workers) == 2, f"did not find both ranks: {workers}"
        os.kill(workers[1], signal.SIGTERM)  # rank 1 only
        out = _output(launcher)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0, out[-3000:]
    assert "rank 0 stops at step" in out and "with the others (SIGTERM on another rank)" in out
    assert out.count("SFT interrupted by SIGTERM") == 2, out[-3000:]  # each rank says so
    run = Run.open(run_dir)
    sft = run.stage("sft")
    assert sft["status"] == "interrupted" and sft["signal"] == "SIGTERM", sft
    assert sft["owner"]["pid"] == workers[0]  # rank 0 alone wrote the stage's record
    checkpoint = run_dir / sft["artifacts"]["checkpoint"]
    stopped_at = sft["step"]
    assert checkpoint.name == f"checkpoint-{stopped_at}" and stopped_at < 6
    # both ranks saved their part of that one step, and the seal covers both
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {
        "rng_state_0.pth", "rng_state_1.pth"}  # fmt: skip
    assert check(checkpoint) is None
    # the emergency sync: rank 0 put the stopped stage and its checkpoint in the store
    stored = json.loads((store / "run" / "manifest.json").read_text())
    assert stored["stages"]["sft"]["status"] == "interrupted"
    assert (store / "run" / sft["artifacts"]["checkpoint"] / "model.safetensors").is_file()

    out = _output(_launch("ddp", run_dir, *args))
    sft = Run.open(run_dir).stage("sft")
    assert sft["status"] == "done" and sft["step"] == 6, out[-3000:]
    assert sft["info"]["resumed_from_checkpoint"] == f"sft/checkpoints/checkpoint-{stopped_at}"
    assert out.count("SFT done (resumed from") == 1  # rank 0 prints the result
    assert (run_dir / "sft" / "final" / "model.safetensors").is_file()
    assert not list((run_dir / "sft").glob(".final.tmp-*"))


@pytest.mark.slow  # two processes generate, verify and train
@pytest.mark.parametrize("device", DEVICES)
def test_grpo_trains_a_step_in_two_processes_with_every_ranks_completions(sft_run, device):
    _two_gpus_if(device)
    args = ["--algo", "grpo", "--rl.max_steps", "1", "--rl.device", device, "--rl.vllm", "off"]
    out = _output(_launch("ddp", sft_run, *args, stage="rl"))
    rl = Run.open(sft_run).stage("rl")
    assert rl["status"] == "done" and rl["step"] == 1, out[-3000:]
    rows = [json.loads(line) for line in (sft_run / "rl" / "completions.jsonl").open()]
    # each rank verified its own 4 (rl.per_device_batch_size), whole lines in one file
    assert len(rows) == 8 and rl["info"]["completions"] == 8
    groups = {}
    for row in rows:
        groups[row["task"]] = groups.get(row["task"], 0) + 1
    assert sorted(groups.values()) == [2, 2, 2, 2]  # rl.num_generations per prompt
    checkpoint = sft_run / rl["artifacts"]["checkpoint"]
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {
        "rng_state_0.pth", "rng_state_1.pth"}  # fmt: skip
    assert (checkpoint / "curriculum.json").is_file() and check(checkpoint) is None
    assert out.count("RL (grpo) done: 1 step") == 1 and "8 completions verified" in out


@pytest.mark.slow  # two processes generate, verify and train three steps
@pytest.mark.parametrize(
    ("device", "verifier"),
    [("cpu", "trainer"), ("cpu", "child"),
     pytest.param("cuda", "auto", marks=pytest.mark.gpu)],  # auto: a child on CUDA
)  # fmt: skip
def test_grpo_verifies_each_batch_a_step_ahead_in_two_processes(sft_run, device, verifier):
    # Each rank's scoring thread gathers its batch's rewards across the ranks only while
    # the trainer's thread waits for it: a gather crossing the update's all-reduce
    # would hang the step or mix the ranks' tensors.
    _two_gpus_if(device)
    args = ["--algo", "grpo", "--rl.max_steps", "3", "--rl.overlap_reward", "true",
            "--rl.device", device, "--rl.vllm", "off",
            "--rl.reward_process", verifier]  # fmt: skip
    out = _output(_launch("ddp", sft_run, *args, stage="rl"))
    rl = Run.open(sft_run).stage("rl")
    assert rl["status"] == "done" and rl["step"] == 3, out[-3000:]
    rows = [json.loads(line) for line in (sft_run / "rl" / "completions.jsonl").open()]
    steps: dict[int, int] = {}
    for row in rows:
        steps[row["step"]] = steps.get(row["step"], 0) + 1
    # three batches of both ranks' 4 completions, each recorded under the step it trains
    assert steps == {1: 8, 2: 8, 3: 8} and rl["info"]["completions"] == 24, steps
    assert out.count("RL (grpo) done: 3 steps") == 1 and "24 completions verified" in out
    assert "Traceback" not in out, out[-3000:]
    # each rank's reward verified by a child of its own, which logged there
    children = sorted(p.name for p in (sft_run / "rl").glob("verifier*.log"))
    expected = ["verifier.rank0.log", "verifier.rank1.log"] if verifier != "trainer" else []
    assert children == expected and rl["info"]["reward_process"] == (
        "trainer" if verifier == "trainer" else "child")  # fmt: skip
