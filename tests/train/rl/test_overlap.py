"""The reward verified a step ahead (`rl.overlap_reward`), for real on the CPU: the tiny
model after a short SFT, TRL's GRPO trainer, the verifier as reward. Each batch is
generated and sent to the verifier during the step before the one that trains on it, and
trains with its own rewards, corrected by its generating policy's log-probabilities."""

import json
import threading

import pytest
from relu_answers import CHEAT, HONEST, QUIET, RELU

from tritonrl.config_loader import load_config
from tritonrl.data.prompts import build_messages
from tritonrl.runs import Run
from tritonrl.verify.pool.pool import close_shared_pools

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # trains models

# What the rollout answers, by the order the batches are generated: all right, all
# cheating, half and half. A batch trained with another's rewards shows in the logs.
PLAN = {1: [HONEST] * 4, 2: [CHEAT] * 4, 3: [HONEST, CHEAT] * 2}


@pytest.fixture(scope="module", autouse=True)
def _shared_pools_closed():
    yield
    close_shared_pools()


def test_each_batch_is_verified_during_the_step_before_and_trains_with_its_rewards(
    sft_run, tmp_path, monkeypatch
):
    import datasets
    from transformers import TrainerCallback
    from trl.trainer import grpo_trainer

    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.common import CompletionLog, load_policy
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args
    from tritonrl.verify.pool.gate import GpuGate

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    config = load_config(None, ["--rl.max_steps", "3", "--rl.overlap_reward", "true",
                                "--curriculum.enabled", "false", *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    events, old_logps, gate, tail_held = [], [], GpuGate(), []
    gather = grpo_trainer.gather_object

    def gathered(value):  # TRL's advantages and logs of a batch, after its rewards
        tail_held.append(gate._shared)
        return gather(value)

    monkeypatch.setattr(grpo_trainer, "gather_object", gathered)

    def rollout(prompts, trainer):
        batch = 1 + sum(e[0] == "generate" for e in events)
        events.append(("generate", batch, trainer.state.global_step + 1))
        text = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in prompts]  # fmt: skip
        done = [tokenizer(c)["input_ids"] for c in PLAN[batch]]
        return {"prompt_ids": [tokenizer(t)["input_ids"] for t in text], "completion_ids": done,
                "logprobs": None}  # fmt: skip

    log = CompletionLog(tmp_path / "completions.jsonl", {RELU.id: 1})
    verifier = log.trl_reward(make_trl_reward([RELU], config.verify, asynchronous=True))

    async def reward(prompts, completions, **kwargs):
        events.append(("verify", kwargs["rl_step"][0]))
        rewards = await verifier(prompts, completions, **kwargs)
        events.append(("verified", kwargs["rl_step"][0]))
        return rewards

    class StepEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            events.append(("step_end", state.global_step))

    prompts = datasets.Dataset.from_list(
        [{"prompt": build_messages(RELU.source), "task_id": RELU.id}] * 8
    )
    trainer = _trainer_class(config, None, [RELU.id] * 8, gate)(
        model=model, reward_funcs=[reward], args=trainer_args(config, tmp_path / "o", "cpu"),
        train_dataset=prompts, processing_class=tokenizer, rollout_func=rollout,
        callbacks=[StepEnd()],
    )  # fmt: skip
    loss = trainer.compute_loss

    def compute_loss(model, inputs, *args, **kwargs):
        old_logps.append("old_per_token_logps" in inputs)
        return loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = compute_loss
    trainer.train()
    trainer.finish_overlap()

    # batches 1 and 2 generated in step 1, batch 3 in step 2, none ahead of the last
    assert [e for e in events if e[0] == "generate"] == [
        ("generate", 1, 1), ("generate", 2, 1), ("generate", 3, 2)
    ]  # fmt: skip
    order = [e for e in events if e[0] != "generate"]
    for step in (1, 2):  # the next step's batch went to the verifier before this one ended
        assert order.index(("verify", step + 1)) < order.index(("step_end", step))
    for step in (1, 2, 3):  # each step waited for its own batch's rewards
        assert order.index(("verified", step)) < order.index(("step_end", step))
    # each step trained with the rewards of the completions it trained on
    history = [h for h in trainer.state.log_history if "loss" in h]
    good = [r["reward"] for r in _rows(log) if r["step"] == 1]
    assert len(good) == 4 and good[0] > 0
    assert [h["reward"] for h in history] == pytest.approx([good[0], 0.0, good[0] / 2])
    # each completion recorded under the step that trains on it (batch 2, all cheats,
    # may be verified before batch 1)
    steps = {s: [r["reward"] for r in _rows(log) if r["step"] == s] for s in (1, 2, 3)}
    assert steps == {1: [good[0]] * 4, 2: [0.0] * 4, 3: [good[0], 0.0] * 2}
    for h, step in zip(history, (1, 2, 3), strict=True):  # and so are the reward's logs
        assert h["verify/correct"] == [1.0, 0.0, 0.5][step - 1]
    assert old_logps and all(old_logps)  # the generating policy's, for the ratio
    assert trainer.num_iterations == 1  # as TRL set it, once the scoring thread was done
    # the trainer holds its GPU's gate while TRL finishes a batch (its advantages are GPU
    # work): a timing phase of the batch verified ahead does not run beside it
    assert tail_held and set(tail_held) == {1} and gate._shared == 0
    assert not [t for t in threading.enumerate() if t.name == "tritonrl-scoring"]
    # and each step's log says what the gate cost it (no timing on the CPU: no windows)
    for h in history:
        assert 0 <= h["time/gpu_wait_s"] < h["time/step_s"] and h["gpu/timing_windows"] == 0


def test_with_update_gpu_alone_the_update_holds_the_gpu_alone(sft_run, tmp_path, monkeypatch):
    """rl.update_gpu_alone: batches are generated under the gate's shared side, as
    before (the verifier's correctness runs go on beside them); from TRL's advantages
    through the optimizer step the trainer holds the exclusive side, so those runs wait
    for the update. The gate is free once training ends."""
    import datasets
    from trl.trainer import grpo_trainer

    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.common import load_policy
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args
    from tritonrl.verify.pool.gate import GpuGate

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    config = load_config(None, ["--rl.max_steps", "2", "--rl.overlap_reward", "true",
                                "--rl.update_gpu_alone", "true", "--curriculum.enabled", "false",
                                *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    gate, seen = GpuGate(), {"generate": set(), "tail": set(), "loss": set()}
    gather = grpo_trainer.gather_object

    def gathered(value):
        seen["tail"].add((gate._shared, gate._held))
        return gather(value)

    monkeypatch.setattr(grpo_trainer, "gather_object", gathered)

    def rollout(prompts, trainer):
        seen["generate"].add((gate._shared, gate._held))
        ids = [tokenizer(HONEST)["input_ids"]] * len(prompts)
        return {"prompt_ids": ids, "completion_ids": ids, "logprobs": None}

    prompts = datasets.Dataset.from_list(
        [{"prompt": build_messages(RELU.source), "task_id": RELU.id}] * 8
    )
    trainer = _trainer_class(config, None, [RELU.id] * 8, gate)(
        model=model, args=trainer_args(config, tmp_path / "o", "cpu"),
        reward_funcs=[make_trl_reward([RELU], config.verify, asynchronous=True)],
        train_dataset=prompts, processing_class=tokenizer, rollout_func=rollout,
    )  # fmt: skip
    loss = trainer.compute_loss

    def compute_loss(model, inputs, *args, **kwargs):
        seen["loss"].add((gate._shared, gate._held))
        return loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = compute_loss
    trainer.train()
    trainer.finish_overlap()
    # (shared holders, exclusive held): generation shared; the update alone
    assert seen == {"generate": {(1, False)}, "tail": {(0, True)}, "loss": {(0, True)}}
    assert gate._shared == 0 and not gate._held


def test_a_failure_generating_the_next_batch_stops_training_and_leaves_no_thread(
    sft_run, tmp_path, monkeypatch
):
    """The batch generated ahead fails (here the rollout raises): the step stops with
    that error, and the batch already being verified is waited for, not left behind."""
    import datasets

    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.common import load_policy
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    config = load_config(None, ["--rl.max_steps", "3", "--rl.overlap_reward", "true",
                                "--curriculum.enabled", "false", *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    calls = []

    def rollout(prompts, trainer):
        calls.append(len(prompts))
        if len(calls) == 2:
            raise RuntimeError("the generation server went away")
        ids = [tokenizer(HONEST)["input_ids"]] * len(prompts)
        return {"prompt_ids": ids, "completion_ids": ids, "logprobs": None}

    verified = []
    verifier = make_trl_reward([RELU], config.verify, asynchronous=True)

    async def reward(prompts, completions, **kwargs):
        rewards = await verifier(prompts, completions, **kwargs)
        verified.append(kwargs["rl_step"][0])
        return rewards

    prompts = datasets.Dataset.from_list(
        [{"prompt": build_messages(RELU.source), "task_id": RELU.id}] * 8
    )
    trainer = _trainer_class(config, None, [RELU.id] * 8)(
        model=model, reward_funcs=[reward], args=trainer_args(config, tmp_path / "o", "cpu"),
        train_dataset=prompts, processing_class=tokenizer, rollout_func=rollout,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="the generation server went away"):
        trainer.train()
    assert len(calls) == 2 and verified == [1]  # batch 1 verified to its end
    assert not [t for t in threading.enumerate() if t.name == "tritonrl-scoring"]


def _rows(log) -> list[dict]:
    return [json.loads(line) for line in log.path.read_text().splitlines()]


def test_rloo_through_the_command_verifies_ahead_and_ends_with_no_batch_left(
    sft_run, train_app, monkeypatch
):
    """`tritonrl rl --algo rloo --rl.overlap_reward true --rl.reward_lanes 2`: the tiny
    model's own answers, the next step's generated in each step but the last, each step's
    completions recorded under the step that trains on them, verified by a pool of two
    lanes, no scoring thread left behind."""
    from trl import RLOOTrainer
    from typer.testing import CliRunner

    from tritonrl.verify.pool import pool

    close_shared_pools()  # the other test's pool, of the default size
    generate, generated = RLOOTrainer._generate, []

    def counted(self, prompts):
        generated.append(self.state.global_step + 1)
        return generate(self, prompts)

    monkeypatch.setattr(RLOOTrainer, "_generate", counted)

    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--algo", "rloo",
                                            "--rl.max_steps", "3", "--rl.overlap_reward", "true",
                                            "--rl.reward_lanes", "2", *QUIET])  # fmt: skip
    assert result.exit_code == 0, result.output
    run = Run.open(sft_run)
    assert run.stage("rl")["step"] == 3
    assert generated == [1, 1, 2]  # batches 1 and 2 in step 1, batch 3 in step 2
    log = run.stage_dir("rl") / "completions.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["step"] for r in rows) == [1] * 4 + [2] * 4 + [3] * 4
    history = json.loads(run.artifact("rl", "log_history").read_text())
    assert [h["step"] for h in history if "loss" in h] == [1, 2, 3]
    assert all("time/reward_wait_s" in h for h in history if "loss" in h)
    assert not [t for t in threading.enumerate() if t.name == "tritonrl-scoring"]
    assert [len(p.lanes) for p in pool._SHARED.values()] == [2]  # rl.reward_lanes
