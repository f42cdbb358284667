"""GRPO and RLOO for real on the CPU: the tiny model after a short SFT, trained by TRL's
trainers with the verifier as reward, in a run directory.

Two GRPO steps through `tritonrl rl` (manifest, completions file, curriculum in the logs
and checkpoints, final model), an RLOO step, a cheating completion that reaches a real
GRPO step scoring 0 beside an honest one that scores, SIGTERM then resume with the
curriculum's state, and the errors a user meets (no SFT, a changed model).
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from relu_answers import CHEAT, HONEST, QUIET, RELU
from typer.testing import CliRunner

from tritonrl.config_loader import load_config
from tritonrl.data.prompts import build_messages
from tritonrl.runs import Run, RunError
from tritonrl.runs.checkpoint import seal
from tritonrl.verify.pool.pool import close_shared_pools

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # trains models


@pytest.fixture(scope="module", autouse=True)
def _shared_pools_closed():
    yield
    close_shared_pools()


def _rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "rl/completions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_two_grpo_steps_on_the_cpu(sft_run, train_app, caplog):
    run_dir = sft_run
    started = time.monotonic()
    result = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--algo", "grpo",
                                         "--rl.max_steps", "2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 150
    assert "RL (grpo) done: 2 steps" in result.output and "8 completions verified" in result.output

    run = Run.open(run_dir)
    rl = run.stage("rl")
    assert rl["status"] == "done" and rl["step"] == 2 and rl["error"] is None
    info = rl["info"]
    assert info["algo"] == "grpo" and info["completions"] == 8 and info["reward_scheme"] == "staged"
    assert info["curriculum"] == {"share": 0.1, "transitions": []}
    why = "rl.vllm is auto and RL runs on cpu (vLLM needs CUDA)"  # the fallback, said once
    assert caplog.text.count(f"GRPO: generating with transformers' generate: {why}") == 1
    assert info["generation"] == {"backend": "transformers", "mode": None, "reason": why}
    rows = _rows(run_dir)
    assert len(rows) == 8 and [r["step"] for r in rows] == [1] * 4 + [2] * 4
    for r in rows:  # what the model wrote and why it scored what it did
        assert set(r) >= {"step", "task", "level", "reward", "stage", "correct", "flags", "error",
                          "speedup", "completion"}  # fmt: skip
        assert r["task"] in Run.open(run_dir).stage("rl")["info"]["data_source"] or r["level"]
        assert r["reward"] == 0.0 and r["stage"] == "extract" and r["error"]  # random weights
    # each group of 2 completions is one prompt's
    assert [r["task"] for r in rows][0::2] == [r["task"] for r in rows][1::2]

    history = json.loads(run.artifact("rl", "log_history").read_text())
    steps = [h for h in history if "loss" in h]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        assert h["curriculum/level2_share"] == 0.1 and "verify/correct" in h
        assert "rewards/tritonrl_verifier/mean" in h
        parts = [h[f"time/{k}_s"] for k in ("generate", "reward_wait", "update")]
        assert all(p > 0 for p in parts)  # each step's seconds, split
        assert sum(parts) == pytest.approx(h["time/step_s"], abs=0.01)
    checkpoint = run.artifact("rl", "checkpoint")
    assert checkpoint.name == "checkpoint-2"
    assert json.loads((checkpoint / "curriculum.json").read_text())["share"] == 0.1
    assert list(run.artifact("rl", "tensorboard").glob("events.out.tfevents.*"))
    final = run.artifact("rl", "model")
    card = (final / "README.md").read_text()
    assert "GRPO by tritonrl" in card and "- steps: 2" in card
    assert "- group size 2, temperature 0.8, loss dapo" in card  # the sampling section's
    import transformers

    transformers.AutoModelForCausalLM.from_pretrained(final)

    again = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--rl.max_steps", "2"])
    assert again.exit_code == 2 and "is done (2 steps, --algo grpo)" in again.output
    assert "raise --rl.max_steps above 2" in again.output

    # Another algorithm cannot go on from GRPO's checkpoints: refused before anything is
    # written (it used to mark the stage failed, claim a resume and raise the budget),
    # and the advice names what would work, not a budget to raise.
    manifest = (run_dir / "manifest.json").read_bytes()
    other = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--algo", "best-of-n",
                                           "--best_of_n.rounds", "3"])  # fmt: skip
    assert other.exit_code == 2, other.output
    assert "trained with --algo grpo" in other.output and "--algo grpo" in other.output
    assert "new run directory" in other.output and "raise" not in other.output
    assert (run_dir / "manifest.json").read_bytes() == manifest

    # A raised budget goes on from the last checkpoint, as sft's does.
    more = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--rl.max_steps", "3",
                                          "--rl.learning_rate", "2e-4"])  # fmt: skip
    assert more.exit_code == 0, more.output
    # ... and says which of its settings changed (the budget aside), not in silence
    assert (
        "goes on from step 2 with other settings than it trained with: "
        "rl.learning_rate: 0.0001 -> 0.0002" in caplog.text
    )
    rl = Run.open(run_dir).stage("rl")
    assert rl["status"] == "done" and rl["step"] == 3
    assert rl["info"]["resumed_from_checkpoint"] == "rl/checkpoints/checkpoint-2"
    assert [r["step"] for r in _rows(run_dir)] == [1] * 4 + [2] * 4 + [3] * 4
    history = json.loads(Run.open(run_dir).artifact("rl", "log_history").read_text())
    assert [h["step"] for h in history if "loss" in h] == [1, 2, 3]


def test_one_rloo_step(sft_run, train_app):
    run_dir = sft_run
    result = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--algo", "rloo",
                                         "--rl.max_steps", "1", *QUIET])  # fmt: skip
    assert result.exit_code == 0, result.output
    rl = Run.open(run_dir).stage("rl")
    assert rl["status"] == "done" and rl["step"] == 1 and rl["info"]["algo"] == "rloo"
    assert len(_rows(run_dir)) == 4
    assert (
        "RLOO by tritonrl" in (Run.open(run_dir).artifact("rl", "model") / "README.md").read_text()
    )


def test_the_reward_verified_in_a_child_process_trains_as_in_the_trainers(sft_run, train_app):
    """`tritonrl rl --rl.overlap_reward true --rl.reward_process child`: the verifier is a
    child service of the stage (its log in the stage's folder), the trainer's process
    builds no pool of its own, every completion gets a real verdict and the reward's
    work is logged as the in-process pool's is; the child is gone after."""
    from tritonrl.verify.pool import pool

    close_shared_pools()
    args = ["rl", "--run", str(sft_run), "--rl.max_steps", "2", "--rl.overlap_reward", "true",
            "--rl.reward_lanes", "1", "--rl.reward_process", "child", *QUIET]  # fmt: skip
    result = CliRunner().invoke(train_app, args)
    assert result.exit_code == 0, result.output
    run = Run.open(sft_run)
    rl = run.stage("rl")
    assert rl["step"] == 2 and rl["info"]["reward_process"] == "child"
    said = (run.stage_dir("rl") / "verifier.log").read_text()
    assert f"(1 lane) for pid {os.getpid()}" in said, said
    assert not pool._SHARED  # no pool in the trainer's process
    rows = _rows(sft_run)
    assert len(rows) == 8
    assert not [r for r in rows if (r["error"] or "").startswith("verifier error")]
    history = [h for h in json.loads(run.artifact("rl", "log_history").read_text()) if "loss" in h]
    assert all(h["verify/programs"] >= 1 and "verify/stage_s/extract" in h for h in history)
    gone = subprocess.run(["pgrep", "-f", "tritonrl.verify.child"], capture_output=True)
    assert gone.returncode == 1, gone.stdout  # no child left


def test_the_child_scores_as_the_trainers_process_and_each_program_once(tmp_path):
    """The same completions scored through `reward_verifier`'s child and in this process:
    the same rewards (an honest kernel scores, a torch cheat 0), and a program sent twice
    in a batch (the same code, other prose) verified once by the child."""
    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.grpo import reward_verifier

    config = load_config(None, ["--rl.reward_process", "child", "--rl.reward_lanes", "1",
                                *QUIET])  # fmt: skip
    texts = [HONEST, CHEAT, "Here it is again:\n" + HONEST]
    ids = {"task_id": [RELU.id] * len(texts)}
    with reward_verifier(config, "cpu", tmp_path) as served:
        assert served.endpoint.startswith("http://127.0.0.1:")
        child = make_trl_reward([RELU], served)
        rewards, details = child.with_details(None, texts, **ids)
        child.scorer.served([(RELU, t) for t in texts])
        assert child.scorer.work[0] == 2  # programs the child verified
    here = make_trl_reward([RELU], config.rl_verify)(None, texts, **ids)
    assert rewards == here and rewards[0] > 0.5 and rewards[1] == 0.0 and rewards[2] == rewards[0]
    assert "torch_compute" in details[1]["flags"]
    assert "(1 lane)" in (tmp_path / "verifier.log").read_text()


def test_on_the_cpu_auto_verifies_the_reward_in_the_trainers_process(sft_run, train_app):
    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--rl.max_steps", "1",
                                            "--rl.overlap_reward", "true", *QUIET])  # fmt: skip
    assert result.exit_code == 0, result.output
    run = Run.open(sft_run)
    assert run.stage("rl")["info"]["reward_process"] == "trainer"
    assert not (run.stage_dir("rl") / "verifier.log").exists()


def test_a_cheating_completion_that_reaches_the_trainer_scores_0(sft_run, tmp_path, monkeypatch):
    """A real GRPO step whose rollouts are an honest kernel and a torch cheat for the same
    prompt (TRL's rollout_func hook stands in for the sampler): the cheat scores 0 in the
    trainer's own reward, the honest one scores, and the step learns from the gap."""
    import datasets

    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.common import CompletionLog, load_policy
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
    run_dir = sft_run
    run = Run.open(run_dir)
    config = load_config(None, ["--rl.max_steps", "1", "--curriculum.enabled", "false", *QUIET])
    model, tokenizer = load_policy(run, config, "cpu")
    texts = [HONEST, CHEAT]
    assert [tokenizer.decode(tokenizer(t)["input_ids"]) for t in texts] == texts

    def rollout(prompts, trainer):  # the prompts arrive once per completion, grouped
        text = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in prompts]  # fmt: skip
        ids = [tokenizer(t)["input_ids"] for t in text]
        done = [tokenizer(texts[i % 2])["input_ids"] + [tokenizer.eos_token_id]
                for i in range(len(prompts))]  # fmt: skip
        return {"prompt_ids": ids, "completion_ids": done, "logprobs": None}

    log_path = tmp_path / "completions.jsonl"
    recorder = CompletionLog(log_path, {RELU.id: 1})
    reward = recorder.trl_reward(make_trl_reward([RELU], config.verify, asynchronous=True))
    prompts = datasets.Dataset.from_list(
        [{"prompt": build_messages(RELU.source), "task_id": RELU.id}] * 4
    )
    trainer = _trainer_class(config, None, [RELU.id] * 4)(
        model=model,
        reward_funcs=[reward],
        args=trainer_args(config, tmp_path / "out", "cpu"),
        train_dataset=prompts,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert len(rows) == 4
    honest, cheat = rows[0::2], rows[1::2]
    assert all(r["correct"] and r["reward"] >= 0.7 for r in honest), honest
    assert all(r["reward"] == 0.0 and not r["correct"] for r in cheat)
    assert all("torch_compute" in r["flags"] for r in cheat), cheat
    step = next(h for h in trainer.state.log_history if "loss" in h)
    assert step["reward"] == pytest.approx(sum(r["reward"] for r in rows) / 4)
    assert step["reward_std"] > 0.3 and step["frac_reward_zero_std"] == 0.0  # a signal


KILLED = """
import sys
from tritonrl.config_loader import override_config
from tritonrl.runs import Run
from tritonrl.train.rl import run_rl
run_rl(override_config(Run.open(sys.argv[1]).config, sys.argv[2:]), sys.argv[1])
"""


def _past_a_checkpoint(run_dir: Path, overrides: list[str], **popen) -> subprocess.Popen:
    """`run_rl` on `run_dir` in a process of its own, once it has saved a checkpoint."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(run_dir), *overrides],
                            env={**os.environ, "TQDM_DISABLE": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, **popen)  # fmt: skip
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if Run.open(run_dir).has_artifact("rl", "checkpoint"):
                break
        except RunError:
            pass
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
    return proc


@pytest.mark.parametrize("mode", ["in-step", "overlap", "child"])
def test_sigterm_stops_at_a_checkpoint_and_resume_keeps_the_curriculum(sft_run, tmp_path, mode):
    """With rl.overlap_reward too: the batch verified ahead of the stop is waited for
    (its thread ends), never trained, and generated afresh by the resumed run. With the
    reward's verifier a child process (`child`), the signal goes to the whole process
    group, as a pre-emption's or a Ctrl-C does: the child verifies the last batch all
    the same, and leaves with the stage."""
    run_dir = sft_run
    overrides = ["--rl.max_steps", "6", "--rl.save_steps", "1",
                 "--rl.overlap_reward", str(mode != "in-step").lower(), *QUIET]  # fmt: skip
    if mode == "child":
        overrides += ["--rl.reward_process", "child", "--rl.reward_lanes", "1"]
    # a group of its own, which the signal may reach whole
    proc = _past_a_checkpoint(run_dir, overrides, start_new_session=True)
    if mode == "child":
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0, stderr.decode()  # Interrupted, uncaught in `python -c`
    rl = Run.open(run_dir).stage("rl")
    assert rl["status"] == "interrupted" and "SIGTERM" in rl["error"]
    if mode == "child":
        rows = _rows(run_dir)
        assert not [r for r in rows if (r["error"] or "").startswith("verifier error")]
        gone = subprocess.run(["pgrep", "-f", "tritonrl.verify.child"], capture_output=True)
        assert gone.returncode == 1, gone.stdout  # the child left with the stage
    stopped = rl["step"]
    assert 1 <= stopped < 6
    checkpoint = Run.open(run_dir).artifact("rl", "checkpoint")
    assert checkpoint.name == f"checkpoint-{stopped}"  # saved at the step it stopped at

    # The curriculum's state travels with the checkpoint: make it visible, then resume.
    state_file = checkpoint / "curriculum.json"
    state = json.loads(state_file.read_text())
    state["share"] = 0.3
    state_file.write_text(json.dumps(state))
    seal(checkpoint)  # an edited file breaks the seal, and resume would take an older one
    from tritonrl.config_loader import override_config
    from tritonrl.train.rl import run_rl

    result = run_rl(override_config(Run.open(run_dir).config, overrides), run_dir)
    assert result.steps == 6 and result.resumed_from == f"rl/checkpoints/{checkpoint.name}"
    rl = Run.open(run_dir).stage("rl")
    assert rl["status"] == "done" and rl["info"]["curriculum"]["share"] == 0.3
    history = json.loads(Run.open(run_dir).artifact("rl", "log_history").read_text())
    after = [h for h in history if "loss" in h and h["step"] > stopped]
    assert after and all(h["curriculum/level2_share"] == 0.3 for h in after)
    assert {r["step"] for r in _rows(run_dir)} == set(range(1, 7))
    counts = {step: [r["step"] for r in _rows(run_dir)].count(step) for step in range(1, 7)}
    # the step after the stop: verified ahead (overlap), then again by the resumed run
    ahead = mode != "in-step"
    assert counts == {step: 8 if ahead and step == stopped + 1 else 4 for step in range(1, 7)}


def test_a_reward_child_that_dies_fails_the_stage_naming_it_and_the_rerun_resumes(sft_run):
    """The reward's child verifier killed mid-run (SIGKILL: no goodbye): the stage fails
    naming the child, its exit and its log, the last checkpoint kept; the same command
    again starts a new child and trains on from that checkpoint."""
    run_dir = sft_run
    overrides = ["--rl.max_steps", "4", "--rl.save_steps", "1", "--rl.overlap_reward", "true",
                 "--rl.reward_process", "child", "--rl.reward_lanes", "1", *QUIET]  # fmt: skip
    proc = _past_a_checkpoint(run_dir, overrides)
    found = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "tritonrl.verify.child"],
                           capture_output=True, text=True)  # fmt: skip
    (child,) = [int(p) for p in found.stdout.split()]
    os.kill(child, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode != 0, stderr.decode()[-2000:]
    rl = Run.open(run_dir).stage("rl")
    assert rl["status"] == "failed", rl
    assert "verifier service (a child process) exited -9 while in use" in rl["error"]
    assert str(run_dir / "rl" / "verifier.log") in rl["error"]
    kept = Run.open(run_dir).artifact("rl", "checkpoint").name

    from tritonrl.config_loader import override_config
    from tritonrl.train.rl import run_rl

    result = run_rl(override_config(Run.open(run_dir).config, overrides), run_dir)
    assert result.steps == 4 and result.resumed_from == f"rl/checkpoints/{kept}"
    assert Run.open(run_dir).stage("rl")["status"] == "done"


def test_rl_without_a_finished_sft_stage_names_it(tmp_path, train_app):
    run_dir = tmp_path / "run"
    Run.create(run_dir, config={})
    result = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--rl.max_steps", "1"])
    assert result.exit_code == 2
    assert "stage sft is pending, not done" in result.output
    assert "tritonrl sft --run" in result.output


def test_rl_vllm_on_where_it_cannot_run_stops_before_any_work(sft_run, train_app):
    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--rl.max_steps", "1",
                                         "--rl.vllm", "on", *QUIET])  # fmt: skip
    assert result.exit_code == 2
    assert "rl.vllm is 'on' but rl.device is 'cpu': vLLM needs CUDA" in result.output
    assert Run.open(sft_run).status("rl") == "pending"


def test_rl_stops_before_loading_when_its_verifier_service_fails(sft_run, train_app, tmp_path):
    """`verify.endpoint` at a closed port, then at a real `tritonrl serve` given the wrong
    token: RL stops at once naming the endpoint and what failed, the stage untouched (it
    had been loading the model, generating and failing at the first reward)."""
    import socket

    from tritonrl.config import VerifyConfig
    from tritonrl.verify.pool.pool import VerifierPool
    from tritonrl.verify.service import VerifyService

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    args = ["rl", "--run", str(sft_run), "--rl.max_steps", "1", *QUIET]
    result = CliRunner().invoke(train_app, [*args, "--verify.endpoint", dead])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"{dead}/health: connection refused" in result.output
    assert "start `tritonrl serve" in result.output
    assert Run.open(sft_run).status("rl") == "pending"

    (tmp_path / "token").write_text("not the server's")
    token = ["--verify.endpoint_token_file", str(tmp_path / "token")]
    with VerifyService(VerifierPool(VerifyConfig(device="cpu"), 1), token="the server's") as sv:
        result = CliRunner().invoke(train_app, [*args, "--verify.endpoint", sv.address, *token])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and f"{sv.address}/health: 401 bad token" in said, said
    assert f"verify.endpoint_token_file {tmp_path / 'token'}" in said
    assert Run.open(sft_run).status("rl") == "pending"


def test_rl_refuses_a_config_that_changes_what_sft_trained(sft_run, train_app):
    run_dir = sft_run
    result = CliRunner().invoke(train_app, ["rl", "--run", str(run_dir), "--rl.max_steps", "1",
                                         "--lora.enabled", "true"])  # fmt: skip
    assert result.exit_code == 2
    assert "lora.enabled: False -> True" in result.output
    sections = "sampling, rl, best_of_n, curriculum, pipeline, verify"
    assert f"may change only the {sections} sections" in result.output
    assert Run.open(run_dir).status("rl") == "pending"


def test_a_lora_run_trains_its_sft_adapter_on(tmp_path):
    import peft
    import transformers

    from tritonrl.config_loader import override_config
    from tritonrl.train.rl import run_rl
    from tritonrl.train.sft import run_sft

    run_dir = tmp_path / "run"
    sft = ["--lora.enabled", "true", "--sft.max_steps", "2", *QUIET,
           "--data.generated_tasks", "20", "--tiny_model.generated_tasks", "50"]  # fmt: skip
    run_sft(load_config(None, sft), run_dir)
    result = run_rl(override_config(Run.open(run_dir).config, ["--rl.max_steps", "1"]), run_dir)
    assert result.lora and result.steps == 1
    run = Run.open(run_dir)
    adapter = run.artifact("rl", "adapter")
    assert not run.has_artifact("rl", "model") and (adapter / "adapter_config.json").is_file()
    sft_config = json.loads((run.artifact("sft", "adapter") / "adapter_config.json").read_text())
    rl_config = json.loads((adapter / "adapter_config.json").read_text())
    assert rl_config["r"] == sft_config["r"]  # the SFT adapter, trained on
    # (PEFT keeps target_modules as a set: its JSON list's order varies with the hash seed)
    assert sorted(rl_config["target_modules"]) == sorted(sft_config["target_modules"])
    base = transformers.AutoModelForCausalLM.from_pretrained(run.artifact("tiny_model", "model"))
    model = peft.PeftModel.from_pretrained(base, adapter)
    assert any("lora_B" in n for n, _ in model.named_parameters())
    assert run.stage("rl")["info"]["lora"] is True


def test_the_trainer_holds_its_gpu_gate_except_while_the_rewards_are_verified(
    sft_run, tmp_path, monkeypatch
):
    """A real GRPO step with a verifier gate (on CUDA the pool's, here one of its own):
    the trainer holds the shared side while it is built, while it generates and from the
    loss through the optimizer step, so a timing phase (the exclusive side) would wait;
    it lets go while it waits for the rewards, when the verifier times."""
    import datasets

    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.common import load_policy
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args
    from tritonrl.verify.pool.gate import GpuGate

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    config = load_config(None, ["--rl.max_steps", "1", "--curriculum.enabled", "false", *QUIET])
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    gate, seen = GpuGate(), {"generate": [], "reward": []}

    def rollout(prompts, trainer):
        seen["generate"].append(gate._shared)
        text = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in prompts]  # fmt: skip
        done = [tokenizer(HONEST if i % 2 == 0 else CHEAT)["input_ids"] for i in range(len(text))]
        return {"prompt_ids": [tokenizer(t)["input_ids"] for t in text], "completion_ids": done,
                "logprobs": None}  # fmt: skip

    verifier = make_trl_reward([RELU], config.verify, asynchronous=True)

    async def reward(prompts, completions, **kwargs):
        seen["reward"].append(gate._shared)
        return await verifier(prompts, completions, **kwargs)

    prompts = datasets.Dataset.from_list(
        [{"prompt": build_messages(RELU.source), "task_id": RELU.id}] * 4
    )
    trainer = _trainer_class(config, None, [RELU.id] * 4, gate)(
        model=model, reward_funcs=[reward], args=trainer_args(config, tmp_path / "o", "cpu"),
        train_dataset=prompts, processing_class=tokenizer, rollout_func=rollout,
    )  # fmt: skip
    trainer.train()
    assert seen == {"generate": [1], "reward": [0]}  # held, then released for the verifier
    holds = gate.stats()["shared"]["trainer"]["holds"]
    assert holds == 3 and gate._shared == 0  # built; generation; loss to optimizer; let go


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [False, True], ids=["in-step", "overlap"])
def test_grpo_generates_with_colocated_vllm_inside_the_trainers_gpu_hold(
    sft_run, monkeypatch, caplog, overlap
):
    """Two GRPO steps of the tiny model on CUDA, its completions from vLLM in the
    trainer's process (TRL's use_vllm, colocate): vLLM's generate runs while the trainer
    holds its GPU's gate (so no kernel is timed beside it), the steps' times are logged
    and the stage records how it generated. With rl.overlap_reward both batches are
    generated in the first step, from the scoring thread. Runs where vLLM is installed
    (its extra)."""
    vllm = pytest.importorskip("vllm")
    import importlib.util

    import torch

    from tritonrl.config_loader import override_config
    from tritonrl.train.rl import run_rl
    from tritonrl.verify.pool.gate import current_gate

    if importlib.util.find_spec("flashinfer") is None:
        monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")  # vLLM samples in PyTorch
    gate, seen = current_gate(), []
    generate = vllm.LLM.generate

    def watched(self, *args, **kwargs):
        seen.append((gate._shared, threading.current_thread().name))
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(vllm.LLM, "generate", watched)
    overrides = ["--rl.device", "cuda", "--verify.device", "cuda", "--rl.vllm", "on",
                 "--rl.vllm_gpu_memory_utilization", "0.2", "--rl.max_steps", "2",
                 "--rl.overlap_reward", str(overlap).lower(), *QUIET]  # fmt: skip
    environ = dict(os.environ)  # TRL sets RANK, WORLD_SIZE, MASTER_ADDR... for vLLM
    try:
        with caplog.at_level(logging.INFO, logger="tritonrl.train.rl.grpo"):
            result = run_rl(override_config(Run.open(sft_run).config, overrides), sft_run)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert result.steps == 2 and result.completions == 8
    assert "GRPO: generating with vLLM (colocate): rl.vllm is on" in caplog.text
    # vLLM's start in this process set float32 products to IEEE: rl.tf32 (on) is back
    if torch.cuda.get_device_capability()[0] >= 8:
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    # one generation a step (both in the first with overlap), inside the trainer's hold
    thread = "tritonrl-scoring" if overlap else threading.main_thread().name
    assert seen == [(1, thread), (1, thread)]
    rl = Run.open(sft_run).stage("rl")
    assert rl["info"]["generation"]["backend"] == "vllm"
    history = json.loads(Run.open(sft_run).artifact("rl", "log_history").read_text())
    steps = [h for h in history if "loss" in h]
    assert len(steps) == 2 and all(h["time/generate_s"] > 0 for h in steps)
    assert all(r["completion"] is not None for r in _rows(sft_run))


def test_rl_warms_its_learning_rate_up_over_warmup_steps(tmp_path):
    """AdamW's first update moves every weight by about the learning rate whatever its
    gradient; `rl.warmup_steps` makes the first updates a fraction of it."""
    import torch
    from transformers import get_scheduler

    from tritonrl.train.rl.grpo import trainer_args

    config = load_config(None, ["--rl.warmup_steps", "4", "--rl.learning_rate", "1e-6",
                                "--rl.max_steps", "10"])  # fmt: skip
    args = trainer_args(config, tmp_path / "out", "cpu")
    assert args.warmup_steps == 4 and args.learning_rate == 1e-6
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    schedule = get_scheduler(args.lr_scheduler_type, optimizer, args.warmup_steps,
                             args.max_steps)  # fmt: skip
    rates = []
    for _ in range(5):
        rates.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    assert rates[0] == 0.0 and rates[1] == pytest.approx(0.25e-6) and rates[4] == 1e-6
    with pytest.raises(ValueError, match="rl.warmup_steps"):
        load_config(None, ["--rl.warmup_steps", "-1"])
