"""Multi-turn RL: what later turns see of earlier answers, how their context is kept
within its budget, the settings' checks, and (slow) real GRPO and RLOO runs on the tiny
model: turn-2 prompts carry the verifier's feedback, and TRL's advantages are the
documented ones (`tritonrl.train.rl.returns`) inside each (prompt, turn) group."""

import importlib.util
import json
import math
import os
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonrl.config_loader import load_config, override_config
from tritonrl.data.feedback import feedback_message
from tritonrl.data.prompts import build_messages
from tritonrl.runs import Run
from tritonrl.tasks import load_builtin
from tritonrl.train.rl import run_rl
from tritonrl.train.rl.grpo import ROLLOUT_FUNC_WARNING
from tritonrl.train.rl.multiturn import NO_CODE_CHARS, fit_context, kept_answer, repeat_score
from tritonrl.train.rl.returns import group_advantages
from tritonrl.verify.pool.pool import close_shared_pools

RELU = load_builtin("level1/1_ReLU").tasks[0]
HONEST = f"```python\n{RELU.solution}```"
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip
QUIET = ["--run.report_to", "[none]"]
NO_CODE = {"stage": "extract", "correct": False, "error": "no ```python block"}


@pytest.fixture(scope="module", autouse=True)
def _shared_pools_closed():
    yield
    close_shared_pools()


def test_an_earlier_answer_is_kept_as_its_code_without_the_reasoning():
    answer = (
        "<think>I could cheat with torch.relu.</think>\nPlan: one pass over memory.\n"
        f"{HONEST}\nThis should be fast."
    )
    kept = kept_answer(answer)
    assert kept.startswith("```python\n") and kept.endswith("\n```")
    assert "class ModelNew" in kept and "@triton.jit" in kept
    assert "cheat" not in kept and "Plan:" not in kept and "should be fast" not in kept


def test_an_answer_without_code_keeps_the_end_of_its_text():
    text = "<think>hmm</think>" + "word " * 400 + "the end"
    kept = kept_answer(text)
    assert len(kept) == NO_CODE_CHARS and kept.endswith("the end") and "hmm" not in kept
    assert kept_answer("<think>only thoughts</think>") == "(an empty answer)"


def test_the_qwen_config_leaves_a_later_turn_room_for_the_task_an_answer_and_its_feedback():
    """At sft.max_length the Qwen config left a later turn's prompt 1024 tokens, and most
    conversations of a 3-turn GRPO run ended after turn 1 (docs/benchmarks.md). Counted
    at 3 characters a token (Qwen's tokenizer gives 3.3-3.5 on these prompts), the
    longest training task of each family and of the generator, with its own kernel as
    the earlier answer and a failure's feedback, must fit."""
    from tritonrl.tasks import load_tasks
    from tritonrl.tasks.families import draw

    config = load_config("qwen-coder-1.5b-1gpu", [], cuda_available=True)
    loaded = load_tasks(["gen:50:0"])
    tasks = [*draw(200, seed=0, split="train"), *getattr(loaded, "tasks", loaded)]
    feedback = feedback_message({"stage": "compile", "correct": False, "error": "x" * 400})
    longest = max(
        sum(len(m["content"]) for m in build_messages(t.source))
        + len(kept_answer(f"```python\n{t.solution}```"))
        + len(feedback["content"])
        for t in tasks
    )
    assert longest > 3 * 1024  # what the budget was
    assert config.rl_prompt_budget * 3 >= longest


def _words(messages: list[dict]) -> int:
    return sum(len(m["content"].split()) for m in messages)


def test_the_context_drops_the_oldest_turns_first_and_keeps_the_prompt():
    prompt = [{"role": "user", "content": "write a kernel"}]  # 3 words
    feedback = feedback_message(NO_CODE)
    f = _words([feedback])
    earlier = [("one", feedback), ("two", feedback), ("three", feedback)]
    whole = 3 + 3 * (1 + f)
    messages, dropped = fit_context(prompt, earlier, whole, _words)
    assert dropped == 0 and [m["role"] for m in messages] == ["user"] + ["assistant", "user"] * 3
    assert [m["content"] for m in messages[1::2]] == ["one", "two", "three"]
    messages, dropped = fit_context(prompt, earlier, whole - 1, _words)  # one word over
    assert dropped == 1 and messages[0] == prompt[0]
    assert [m["content"] for m in messages[1::2]] == ["two", "three"]
    assert messages[-1]["content"].startswith("Your answer was verified. Result: no code")
    messages, dropped = fit_context(prompt, earlier, 3 + 1 + f, _words)
    assert dropped == 2 and [m["content"] for m in messages[1::2]] == ["three"]
    assert fit_context(prompt, earlier, 3 + f, _words) is None  # the last pair cannot fit


def test_a_repeat_scores_its_own_reward_at_most_the_cap():
    # a copy of a correct kernel (tritonrl scheme: 1 + 0.1 x speedup) scores the cap, below
    # any new correct kernel; a copy of a wrong one keeps its 0, a cap never raises it
    assert repeat_score(1.12, 0.5) == 0.5
    assert repeat_score(0.0, 0.5) == 0.0
    assert repeat_score(0.3, -0.5) == -0.5


def test_turn_settings_are_checked_with_what_to_do():
    config = load_config(None, ["--rl.turns", "2"])
    assert config.rl.turns == 2 and config.rl.turn_gamma == 0.4
    assert config.rl.turn_repeat_reward == 0.5
    assert load_config(None, ["--rl.turn_repeat_reward", "null"]).rl.turn_repeat_reward is None
    assert config.rl_prompt_budget == config.sft.max_length - config.sampling.max_new_tokens
    assert load_config(None, []).rl.turns == 1
    cases = [
        (["--rl.turns", "0"], "rl.turns must be 1 or more"),
        (["--rl.turn_gamma", "1.5"], r"rl.turn_gamma must be in \[0, 1\]"),
        (["--rl.turn_gamma", "-0.1"], r"rl.turn_gamma must be in \[0, 1\]"),
        (["--rl.turns", "2", "--rl.algo", "best-of-n"], "needs rl.algo grpo or rloo"),
        (["--rl.turns", "2", "--rl.hierarchical", "true"], "rl.hierarchical"),
        (["--rl.turns", "3"], r"multiple of rl.num_generations x rl.turns \(6\)"),
        (["--rl.turn_max_length", "10"], "rl.turn_max_length must be >= 64"),
        (["--rl.turn_repeat_reward", "nan"], "rl.turn_repeat_reward must be a finite number"),
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message):
            load_config(None, overrides)
    short = load_config(None, ["--rl.turns", "2", "--rl.turn_max_length", "64"])
    with pytest.raises(ValueError, match="rl.turn_max_length \\(64\\) leaves no room"):
        _ = short.rl_prompt_budget


def _rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "rl/completions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_rl_turns_2_on_the_tiny_model_asks_again_with_the_feedback(sft_run, train_app):
    """A real `tritonrl rl --turns 2` step: the tiny model's answers hold no code, so every
    conversation goes on, and its second answer replies to the feedback. TRL's warning
    that `rollout_func` is experimental is not shown (we pass it on purpose), and only
    while our trainer is built: the same warning anywhere else still shows."""
    run_dir = sft_run
    args = ["rl", "--run", str(run_dir), "--algo", "grpo", "--turns", "2", "--rl.max_steps", "1"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = CliRunner().invoke(train_app, [*args, *QUIET])
        assert result.exit_code == 0, result.output
        assert not [w for w in seen if "rollout_func" in str(w.message)], seen
        warnings.warn(f"{ROLLOUT_FUNC_WARNING}. elsewhere", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen if "rollout_func" in str(w.message)] == [
        f"{ROLLOUT_FUNC_WARNING}. elsewhere"
    ]
    rows = _rows(run_dir)
    assert [r["turn"] for r in rows] == [1, 1, 2, 2]  # one prompt: 2 members x 2 turns
    assert len({r["task"] for r in rows}) == 1
    for r in rows:
        assert r["stage"] == "extract" and r["reward"] == 0.0 and r["return"] == 0.0
    assert all("feedback" not in r for r in rows[:2])
    for r in rows[2:]:
        assert r["feedback"].startswith("Your answer was verified. Result: no code could be read")
    info = Run.open(run_dir).stage("rl")["info"]
    assert info["config"]["rl"]["turns"] == 2 and info["completions"] == 4
    card = (Run.open(run_dir).artifact("rl", "model") / "README.md").read_text()
    assert "- turns: up to 2 answers a conversation" in card and "discounted by 0.4" in card
    history = json.loads(Run.open(run_dir).artifact("rl", "log_history").read_text())
    step = next(h for h in history if "loss" in h)
    assert step["turns/answers"] == 2.0 and step["turns/reward_t2"] == 0.0
    assert step["verify/correct"] == step["verify/compiled"] == step["verify/cheated"] == 0.0
    assert step["turns/context_dropped"] == 0.0


@pytest.mark.gpu
def test_rl_turns_2_generates_every_turn_with_colocated_vllm(sft_run, monkeypatch):
    """`rl --turns 2` on CUDA with vLLM in the trainer's process: both turns' answers
    come from vLLM (TRL's `_generate_single_turn` inside our `rollout_func`), the second
    replies to the feedback, and the step trains. Runs where vLLM is installed."""
    vllm = pytest.importorskip("vllm")
    if importlib.util.find_spec("flashinfer") is None:
        monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")  # vLLM samples in PyTorch
    calls = []
    generate = vllm.LLM.generate

    def counted(self, *args, **kwargs):
        calls.append(1)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(vllm.LLM, "generate", counted)
    overrides = ["--rl.device", "cuda", "--verify.device", "cuda", "--rl.vllm", "on",
                 "--rl.vllm_gpu_memory_utilization", "0.2", "--rl.max_steps", "1",
                 "--rl.turns", "2", *QUIET]  # fmt: skip
    environ = dict(os.environ)  # TRL sets RANK, WORLD_SIZE, MASTER_ADDR... for vLLM
    try:
        result = run_rl(override_config(Run.open(sft_run).config, overrides), sft_run)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert result.steps == 1
    rows = _rows(sft_run)
    assert sorted({r["turn"] for r in rows}) == [1, 2]
    assert all(r["feedback"].startswith("Your answer was verified.") for r in rows
               if r["turn"] == 2)  # fmt: skip
    assert len(calls) == 2  # one vLLM call a turn
    assert Run.open(sft_run).stage("rl")["info"]["generation"]["backend"] == "vllm"


@pytest.mark.slow
def test_one_turn_is_single_turn_rl_as_before(sft_run, train_app):
    result = CliRunner().invoke(train_app, ["rl", "--run", str(sft_run), "--algo", "grpo",
                                            "--rl.max_steps", "1", *QUIET])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = _rows(sft_run)
    assert len(rows) == 4 and all("turn" not in r and "return" not in r for r in rows)
    # two prompts' groups of 2, as single-turn RL has always drawn them
    assert [r["task"] for r in rows][0::2] == [r["task"] for r in rows][1::2]


def _first_cheat_then_honest(turn: int, member: int) -> str:
    return CHEAT if turn == 1 and member == 0 else HONEST


def _scripted_trainer(algo: str, config, model, tokenizer, tmp_path,
                      script=_first_cheat_then_honest):  # fmt: skip
    """tritonrl's multi-turn trainer on one ReLU prompt whose answers are scripted:
    `script(turn, member)`, by default turn 1 a torch cheat (member 0) and an honest
    kernel (member 1), turn 2 honest (member `member` of those asked at that turn). The
    sampling is all that is scripted: the rollout, verifier, returns and TRL's
    advantages are the real ones."""
    import datasets

    from tritonrl.reward.adapters import make_trl_reward
    from tritonrl.train.rl.common import CompletionLog
    from tritonrl.train.rl.grpo import _trainer_class, trainer_args
    from tritonrl.train.rl.multiturn import MultiTurn

    verifier = make_trl_reward([RELU], config.rl_verify, asynchronous=True)
    turns = MultiTurn(config, verifier.scorer)
    recorder = CompletionLog(tmp_path / "completions.jsonl", {RELU.id: 1})
    rows = config.rl.per_device_batch_size
    base = _trainer_class(config, None, [RELU.id] * rows, None, turns)
    asked: list[str] = []

    class Scripted(base):
        def _generate_single_turn(self, prompt_ids, *args):
            texts = [tokenizer.decode(ids) for ids in prompt_ids]
            asked.extend(texts)
            answers = [script(1 + t.count("Your answer was verified"), i)
                       for i, t in enumerate(texts)]  # fmt: skip
            ids = [tokenizer(a)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
            return ids if algo == "rloo" else (ids, None)

    prompts = datasets.Dataset.from_list(
        [{"prompt": build_messages(RELU.source), "task_id": RELU.id}] * rows
    )
    hooks = {"rollout_func": turns} if algo == "grpo" else {}
    trainer = Scripted(
        model=model,
        reward_funcs=[turns.reward(recorder)],
        args=trainer_args(config, tmp_path / "out", "cpu"),
        train_dataset=prompts,
        processing_class=tokenizer,
        **hooks,
    )
    return trainer, asked


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_trl_takes_the_documented_advantages_inside_each_prompt_turn_group(
    algo, sft_run, tmp_path, monkeypatch
):
    from tritonrl.train.rl.common import load_policy

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
    config = load_config(None, ["--rl.algo", algo, "--rl.turns", "2", "--rl.max_steps", "1",
                                "--curriculum.enabled", "false", *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    trainer, asked = _scripted_trainer(algo, config, model, tokenizer, tmp_path)
    trainer.train()

    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    # turn 1: cheat 0, honest 0.7 (correct, untimed on the CPU: its conversation ends);
    # turn 2: the cheat's conversation, honest 0.7
    assert [(r["turn"], r["reward"]) for r in rows] == [(1, 0.0), (1, 0.7), (2, 0.7)]
    assert [r["return"] for r in rows] == pytest.approx([0.4 * 0.7, 0.7, 0.7])
    assert "torch_compute" in rows[0]["flags"] and rows[1]["correct"] and rows[2]["correct"]
    assert "rejected: it breaks the rules" in rows[2]["feedback"]
    step = next(h for h in trainer.state.log_history if "loss" in h)
    assert step["verify/correct"] == pytest.approx(2 / 3)  # of the three answers
    assert step["verify/cheated"] == pytest.approx(1 / 3) and step["turns/answers"] == 1.5
    assert step["turns/reward_t1"] == pytest.approx(0.35, abs=1e-6)  # logged as float32
    assert step["turns/reward_t2"] == pytest.approx(0.7, abs=1e-6)
    # the turn-2 prompt: the cheat's code kept, its feedback after it
    second = [t for t in asked if "Your answer was verified" in t]
    assert len(second) == 1 and "return torch.relu(x)" in second[0]
    assert second[0].index("return torch.relu(x)") < second[0].index("breaks the rules")

    # slots: (turn 1: member 0, member 1), (turn 2: member 0, member 1 ended)
    returns = [0.28, 0.7, 0.7, None]
    logged = list(trainer._logs["rewards"]["tritonrl_verifier"])
    assert logged[:3] == pytest.approx(returns[:3]) and math.isnan(logged[3])
    expected = group_advantages(returns, group=2, algo=algo)
    assert list(trainer._logs["advantages"]) == pytest.approx(expected, abs=1e-5)
    by_hand = {"grpo": [-0.70687, 0.70687, 0.0, 0.0], "rloo": [-0.42, 0.42, 0.0, 0.0]}
    assert expected == pytest.approx(by_hand[algo], abs=1e-5)


CLAMP = CHEAT.replace("torch.relu(x)", "torch.clamp(x, min=0)")  # another cheat
# the first cheat again under a new docstring (how 3-turn GRPO dodged a key that kept
# docstrings), a comment and a blank line added: the same kernel
CHEAT_AGAIN = CHEAT.replace("```python\n", '```python\n"""Faster: one pass."""\n', 1).replace(
    "class ModelNew", "# as before\n\nclass ModelNew"
)


@pytest.mark.slow
def test_an_answer_repeating_its_conversation_scores_at_most_the_repeat_reward_and_ends_it(
    sft_run, tmp_path, monkeypatch
):
    """Three turns. Member 0: the cheat, then the same cheat again: a repeat, scored its
    own 0 (not rl.turn_repeat_reward, 0.5 here: a repeat is paid at most that), and its
    conversation ends. Member 1: the cheat, another cheat, then the honest kernel."""
    from tritonrl.train.rl.common import load_policy

    def script(turn: int, member: int) -> str:
        if turn == 1:
            return CHEAT
        if turn == 2:
            return CHEAT_AGAIN if member == 0 else CLAMP
        return HONEST  # only member 1 is asked a third time

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
    config = load_config(None, ["--rl.turns", "3", "--rl.per_device_batch_size", "6",
                                "--rl.turn_repeat_reward", "0.5", "--rl.max_steps", "1",
                                "--curriculum.enabled", "false", *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    trainer, asked = _scripted_trainer("grpo", config, model, tokenizer, tmp_path, script)
    trainer.train()

    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert [(r["turn"], r["reward"]) for r in rows] == [
        (1, 0.0), (1, 0.0), (2, 0.0), (2, 0.0), (3, 0.7)]  # fmt: skip
    assert [bool(r.get("repeat")) for r in rows] == [False, False, True, False, False]
    # member 0: 0 at turn 2, nothing after; member 1: 0, 0, 0.7 (gamma 0.4)
    assert [r["return"] for r in rows] == pytest.approx([0.0, 0.112, 0.0, 0.28, 0.7])
    assert sum(t.count("Your answer was verified") == 2 for t in asked) == 1  # turn 3: one
    step = next(h for h in trainer.state.log_history if "loss" in h)
    assert step["turns/repeated"] == pytest.approx(1 / 3)  # of the three later answers


@pytest.mark.slow
def test_conversations_the_prompt_budget_ends_are_said_and_counted(
    sft_run, tmp_path, monkeypatch, caplog
):
    """A later turn's budget too small for any task prompt: the cheat's conversation,
    which would go on, ends after turn 1, and the run says so once, with the fix, and
    logs turns/context_ended 1 (every conversation going on was cut)."""
    from tritonrl.train.rl.common import load_policy

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
    config = load_config(None, ["--rl.turns", "2", "--rl.turn_max_length", "64",
                                "--sampling.max_new_tokens", "32", "--rl.max_steps", "1",
                                "--curriculum.enabled", "false", *QUIET])  # fmt: skip
    model, tokenizer = load_policy(Run.open(sft_run), config, "cpu")
    trainer, asked = _scripted_trainer("grpo", config, model, tokenizer, tmp_path)
    with caplog.at_level("WARNING", logger="tritonrl.train.rl.multiturn"):
        trainer.train()

    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert [r["turn"] for r in rows] == [1, 1]
    assert not any("Your answer was verified" in t for t in asked)
    said = [r.getMessage() for r in caplog.records if "end at turn 1 instead" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("multi-turn RL: 1 of 1 conversations")
    assert "--rl.turn_max_length" in said[0]
    step = next(h for h in trainer.state.log_history if "loss" in h)
    assert step["turns/context_ended"] == 1.0


def test_rloo_turns_generate_with_transformers_and_grpo_turns_with_vllm():
    from tritonrl.train.generation import Generator
    from tritonrl.train.rl.grpo import turns_generator

    vllm = Generator(vllm=True, mode="colocate", reason="test")
    rloo = load_config(None, ["--rl.algo", "rloo", "--rl.turns", "2"])
    fallback = turns_generator(rloo, vllm)
    assert not fallback.vllm and "RLOO's multi-turn rollout generates with" in fallback.reason
    on = load_config(None, ["--rl.algo", "rloo", "--rl.turns", "2", "--rl.vllm", "on"])
    with pytest.raises(ValueError, match="--algo rloo generates with transformers only"):
        turns_generator(on, vllm)
    assert turns_generator(load_config(None, ["--rl.turns", "2"]), vllm) is vllm  # grpo
    assert turns_generator(load_config(None, ["--rl.algo", "rloo"]), vllm) is vllm  # 1 turn
