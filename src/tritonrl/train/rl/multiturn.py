"""Multi-turn GRPO and RLOO (`tritonrl rl --turns T`): conversations with the verifier's
feedback, every answer a training sample with its own discounted return.

    turns = MultiTurn(config, reward.scorer)          # reward: make_trl_reward(...)
    GRPOTrainer(..., reward_funcs=[turns.reward(recorder)], rollout_func=turns)
    # RLOO: the trainer's `_generate` calls turns.rloo_generate(prompts, trainer)

A batch holds each prompt `num_generations x turns` times (the trainer's sampler repeats
it so): one slot per (turn, member), turn by turn (`returns.slot`). Its
`num_generations` conversations answer the prompt (turn 1); each answer is verified once,
through the same scorer, pool or service the single-turn reward uses; a conversation
that goes on (`tritonrl.data.feedback.goes_on`, as `eval --turns` decides: not correct,
or correct and timed) is asked again with the conversation so far and the feedback on its
verdict (`feedback_message`) as the next user turn, up to `turns` answers. A later
answer whose kernel repeats one of its conversation's earlier answers (`kernel_key`)
scores at most `rl.turn_repeat_reward` (`repeat_score`: 0.5 by default, below any new
correct kernel under the tritonrl scheme and above a wrong one; a repeated wrong kernel
keeps its own reward; null: as any answer) and ends its conversation: a model right
once would otherwise earn its full reward again by copying itself when asked for a
faster kernel, and at 0 a copy of a correct kernel scored as a wrong one
(`turns/repeated`: their share of later answers; docs/benchmarks.md). Each answer
fills its slot: its own prompt (the conversation before it), its tokens, its return
G_t = r_t + rl.turn_gamma * G_{t+1} (`returns.slot_returns`). The trainer's reward
function (`reward`) reads the returns and verdicts the rollout kept, verifies nothing
again, and writes each answer to completions.jsonl with its `turn`, `return` and, from
turn 2, the `feedback` it answered (the curriculum, when on, counts every answer). TRL
groups the rewards by `num_generations` consecutive slots, so its own advantages (GRPO's
group normalisation, RLOO's leave-one-out) are taken inside each (prompt, turn) group; a
slot whose conversation had ended scores None (NaN to TRL): out of its group's baseline,
advantage 0 (`returns` documents the figures; the tests hold TRL to them).

Context: an earlier answer is kept as its code only (the extracted ```python block; its
reasoning and prose dropped; an answer with no code keeps the last `NO_CODE_CHARS`
characters of its text), each followed by its feedback. A prompt longer than
`config.rl_prompt_budget` tokens (`rl.turn_max_length`, null: sft.max_length, less
sampling.max_new_tokens) drops the oldest (answer, feedback) pairs first, keeping the task
prompt and the latest pair; a conversation whose task prompt and latest pair alone do not
fit ends there, said in a warning with the count, and `turns/context_ended` logs their
share of the conversations that would have gone on (near 1: the budget, not the verdicts,
ends them, and the run is single-turn in all but name).

The hooks: GRPO takes TRL's `rollout_func` (GRPOTrainer(rollout_func=...)): it is handed
the batch's prompts and returns, per slot, the prompt and completion token ids, the
sampling log-probabilities (vLLM's; TRL's importance-sampling correction goes on
working), an `env_mask` (a slot with no answer holds one end-of-sequence token masked out
of the loss) and extra fields TRL passes to the reward function (the returns and
verdicts). Generation inside it is TRL's own `_generate_single_turn`, one completion per
conversation, on vLLM (colocated or a server) or transformers, as TRL's tool loop calls
it. TRL's `environment_factory` does not fit: its environment's methods are tools the
model calls inside one completion, and its reward is one per rollout, so a conversation
would be one sample with one reward, not a sample per turn with its own return. TRL 1.16's
RLOOTrainer has neither hook: tritonrl's RLOO trainer overrides `_generate` with the same
rollout (`rloo_generate`), on transformers' generate only (RLOO's vLLM call asks
`num_generations` answers of each distinct prompt, which turn-2 prompts are not: rl.vllm
auto falls back to transformers, on is refused: `grpo.turns_generator`), and its empty
slots, with no mask in RLOO, add one token of zero advantage to the loss's token count.

What it does NOT do: no partial credit across turns beyond the discount (a conversation's
best answer is not singled out), no feedback in turn 1, and nothing of this runs with
`rl.turns` 1 (the trainers are TRL's single-turn ones, as before).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tritonrl.config import Config
from tritonrl.data.feedback import feedback_message, goes_on
from tritonrl.extract import kernel_key, try_extract
from tritonrl.extract.turns import answer_turn, split_reasoning
from tritonrl.train.rl.returns import slot, slot_returns

log = logging.getLogger(__name__)

NO_CODE_CHARS = 800  # the most of an answer without code kept in later turns' context


def repeat_score(reward: float, cap: float) -> float:
    """The reward of a later answer that repeats an earlier kernel of its conversation:
    its own reward, at most `cap` (rl.turn_repeat_reward). A copy of a correct kernel
    scores `cap`, a copy of a wrong one its own reward."""
    return min(reward, cap)


def kept_answer(text: str) -> str:
    """An earlier answer as later turns see it: its code in one ```python block, or, with
    no code, the end of its text (reasoning dropped either way)."""
    code, _ = try_extract(text)
    if code is not None:
        return f"```python\n{code.rstrip()}\n```"
    answer = split_reasoning(answer_turn(text)).answer.strip()
    return answer[-NO_CODE_CHARS:] if answer else "(an empty answer)"


def fit_context(
    prompt: list[dict],
    earlier: list[tuple[str, dict]],
    budget: int,
    count: Callable[[list[dict]], int],
) -> tuple[list[dict], int] | None:
    """The next turn's messages: `prompt` then each earlier (kept answer, feedback
    message) pair, the oldest pairs dropped until `count(messages)` is within `budget`;
    with the number dropped. None when even the prompt and the latest pair exceed it."""
    for dropped in range(len(earlier)):
        messages = list(prompt)
        for answer, feedback in earlier[dropped:]:
            messages += [{"role": "assistant", "content": answer}, feedback]
        if count(messages) <= budget:
            return messages, dropped
    return None


@dataclass
class Conversation:
    task_id: str
    prompt: list[dict]
    answers: list[str] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)  # VerifyResult.to_dict() each
    rewards: list[float] = field(default_factory=list)
    feedback: str | None = None  # the user turn the next answer replies to
    kernels: set[str] = field(default_factory=set)  # its answers' kernel_keys


@dataclass
class Answer:
    """One filled slot: the tokens the trainer learns from and what the reward reads."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None
    details: dict[str, Any]


class MultiTurn:
    """The multi-turn rollout of a GRPO or RLOO trainer and its reward function."""

    def __init__(self, config: Config, scorer):
        self.turns, self.gamma = config.rl.turns, config.rl.turn_gamma
        self.repeat_reward = config.rl.turn_repeat_reward  # None: a repeat scores as any
        self.group = config.rl.num_generations
        self.algo = config.rl.algo
        self.budget = config.rl_prompt_budget  # a bad length fails here, before training
        self.scorer = scorer  # make_trl_reward's: the single-turn reward's pool or service
        self.dropped = 0  # earlier turns dropped to fit, since the last log
        self.verdicts: list[tuple[bool, bool]] = []  # (compiled, cheated), since the last log
        self.repeats = [0, 0]  # (repeats, later-turn answers) since the last log
        self.cut = [0, 0]  # (conversations ended for their context, going on) since the log

    # ------------------------------------------------------------------ the rollout

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        """TRL's `rollout_func` (GRPO): every slot's prompt and completion ids,
        log-probabilities, env_mask, and the reward's extra fields."""
        answers = self.rollout(prompts, _task_ids(trainer, prompts), trainer)
        logprobs = [a.logprobs for a in answers]
        out: dict[str, list] = {
            "prompt_ids": [a.prompt_ids for a in answers],
            "completion_ids": [a.completion_ids for a in answers],
            "logprobs": None if any(x is None for x in logprobs) else logprobs,
            "env_mask": [[1 if a.details else 0] * len(a.completion_ids) for a in answers],
        }
        return out | self._fields(answers)

    def rloo_generate(self, prompts: list, trainer):
        """RLOO's `_generate(prompts)`: (prompt ids, completion ids, completions) of every
        slot, the reward's fields written into the batch's rows."""
        rows = trainer._turn_inputs
        answers = self.rollout(prompts, _task_ids(trainer, prompts), trainer)
        for i, row in enumerate(rows):
            row.update({k: v[i] for k, v in self._fields(answers).items()})
        texts = [a.details.get("completion", "") if a.details else "" for a in answers]
        completions = [[{"role": "assistant", "content": t}] for t in texts]
        return [a.prompt_ids for a in answers], [a.completion_ids for a in answers], completions

    def _fields(self, answers: list[Answer]) -> dict[str, list]:
        return {
            "turn": [a.details.get("turn") if a.details else None for a in answers],
            "turn_return": [a.details.get("return") if a.details else None for a in answers],
            "turn_details": [a.details or None for a in answers],
        }

    def rollout(self, prompts: list, task_ids: list[str], trainer) -> list[Answer]:
        """Every slot of the batch (`returns.slot`'s order), the conversations played out."""
        n, span = len(prompts), self.group * self.turns
        if n == 0 or n % span:
            raise ValueError(
                f"multi-turn RL: a batch of {n} rows is not whole blocks of rl.num_generations "
                f"x rl.turns ({span}) copies of a prompt; the trainer's sampler repeats each "
                "prompt that many times"
            )
        conversations = []
        for start in range(0, n, span):
            if len(set(task_ids[start : start + span])) != 1:
                raise ValueError(
                    f"multi-turn RL: rows {start}-{start + span - 1} hold more than one task; "
                    "each prompt's block must be one task's"
                )
            conversations += [
                Conversation(task_ids[start], prompts[start]) for _ in range(self.group)
            ]
        tokenizer = trainer.processing_class
        slots: list[Answer | None] = [None] * n
        active = list(range(len(conversations)))
        for turn in range(1, self.turns + 1):
            asked = self._contexts(conversations, active, turn, tokenizer)
            if not asked:
                break
            prompt_ids, completion_ids, logprobs = _generate(
                trainer, self.algo, [m for _, m in asked]
            )
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            jobs = [(self.scorer._task(conversations[i].task_id), t)
                    for (i, _), t in zip(asked, texts, strict=True)]  # fmt: skip
            with _verifying(trainer):
                results = self.scorer.verify(jobs)
            rewards, details = self.scorer.report(results, 0, {})
            self.verdicts += [(r.compiled, r.cheated) for r in results]
            ended = set()  # conversations that repeated an answer (with repeat_reward)
            for k, (i, _) in enumerate(asked):
                c = conversations[i]
                d = {**details[k], "turn": turn, "completion": texts[k]}
                key = kernel_key(texts[k])
                if turn > 1:
                    d["feedback"] = c.feedback
                    self.repeats[1] += 1
                    if key is not None and key in c.kernels:
                        self.repeats[0] += 1
                        d["repeat"] = True
                        if self.repeat_reward is not None:
                            rewards[k] = d["reward"] = repeat_score(rewards[k], self.repeat_reward)
                            ended.add(i)
                if key is not None:
                    c.kernels.add(key)
                c.answers.append(texts[k])
                c.verdicts.append(results[k].to_dict())
                c.rewards.append(rewards[k])
                prompt, member = divmod(i, self.group)
                slots[slot(prompt, turn, member, self.turns, self.group)] = Answer(
                    list(prompt_ids[k]), list(completion_ids[k]),
                    None if logprobs is None else list(logprobs[k]), d,
                )  # fmt: skip
            active = [i for i, _ in asked
                      if i not in ended and goes_on(conversations[i].verdicts[-1])]  # fmt: skip
        returns = slot_returns([c.rewards for c in conversations], self.turns, self.group,
                               self.gamma)  # fmt: skip
        first = {}
        for index, a in enumerate(slots):
            if a is not None:
                a.details["return"] = returns[index]
                first.setdefault(index // span, a)
        eos = (
            tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
        )
        return [a if a is not None else Answer(first[i // span].prompt_ids, [eos], [0.0], {})
                for i, a in enumerate(slots)]  # fmt: skip

    def _contexts(self, conversations: list[Conversation], active: list[int], turn: int,
                  tokenizer) -> list[tuple[int, list[dict]]]:  # fmt: skip
        """(conversation, messages) for each active conversation that fits its turn."""
        if turn == 1:
            return [(i, conversations[i].prompt) for i in active]

        def count(messages: list[dict]) -> int:
            text = tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True)  # fmt: skip
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        asked, cut = [], 0
        for i in active:
            c = conversations[i]
            earlier = [(kept_answer(a), feedback_message(v))
                       for a, v in zip(c.answers, c.verdicts, strict=True)]  # fmt: skip
            fitted = fit_context(c.prompt, earlier, self.budget, count)
            if fitted is None:
                cut += 1
                continue
            messages, dropped = fitted
            self.dropped += dropped
            c.feedback = earlier[-1][1]["content"]
            asked.append((i, messages))
        self.cut[0] += cut
        self.cut[1] += len(active)
        if cut:
            log.warning(
                "multi-turn RL: %d of %d conversations that go on end at turn %d instead: "
                "the task prompt and the last answer with its feedback exceed the %d tokens "
                "a later turn's prompt may take (rl.turn_max_length, null: sft.max_length, "
                "less sampling.max_new_tokens); a larger --rl.turn_max_length keeps them",
                cut, len(active), turn - 1, self.budget,
            )  # fmt: skip
        return asked

    # ------------------------------------------------------------------ the reward

    def reward(self, recorder):
        """TRL's reward function over the rollout's slots: each answer's return (None for
        a slot with no answer), its verdict written to `recorder`; nothing verified."""

        async def tritonrl_verifier(prompts, completions, **kwargs) -> list[float | None]:
            details = kwargs.get("turn_details")
            if details is None:
                raise KeyError(
                    "multi-turn reward: the batch has no turn_details: it scores the "
                    "multi-turn rollout's slots only (rl.turns > 1)"
                )
            state = kwargs.get("trainer_state")
            step = state.global_step + 1 if state is not None else None
            present = [d for d in details if d]
            rows = [{k: v for k, v in d.items() if k != "completion"} for d in present]
            recorder.record(step, rows, [d["completion"] for d in present])
            log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
            if log_metric and present:
                log_metric(
                    "verify/correct", sum(bool(d["correct"]) for d in present) / len(present)
                )
                log_metric("turns/answers", len(present) / (len(details) / self.turns))
                if self.verdicts:
                    n = len(self.verdicts)
                    log_metric("verify/compiled", sum(c for c, _ in self.verdicts) / n)
                    log_metric("verify/cheated", sum(x for _, x in self.verdicts) / n)
                log_metric("turns/context_dropped", float(self.dropped))
                if self.repeats[1]:
                    log_metric("turns/repeated", self.repeats[0] / self.repeats[1])
                if self.cut[1]:
                    log_metric("turns/context_ended", self.cut[0] / self.cut[1])
                self.dropped, self.verdicts, self.repeats, self.cut = 0, [], [0, 0], [0, 0]
                for t in range(1, self.turns + 1):
                    at = [d for d in present if d["turn"] == t]
                    if at:
                        log_metric(f"turns/reward_t{t}", sum(d["reward"] for d in at) / len(at))
            if log_extra:
                log_extra("turn", [d["turn"] if d else 0 for d in details])
                log_extra("verify_stage", [d["stage"] if d else "" for d in details])
            return [d["return"] if d else None for d in details]

        return tritonrl_verifier


def _task_ids(trainer, prompts: list) -> list[str]:
    rows = getattr(trainer, "_turn_inputs", None)
    if rows is None or len(rows) != len(prompts):
        raise RuntimeError(
            "multi-turn RL needs the batch's rows (the trainer's _turn_inputs): use "
            "tritonrl.train.rl.grpo's trainer, which keeps them"
        )
    key = "task_id"
    if any(key not in r for r in rows):
        raise KeyError(f"multi-turn RL: the dataset has no {key!r} column naming each row's task")
    return [r[key] for r in rows]


def _generate(trainer, algo: str, messages: list[list[dict]]):
    """(prompt ids, completion ids, log-probabilities or None) of one answer to each of
    `messages`, by the trainer's own generation (vLLM or transformers)."""
    prompt_ids, _, _ = trainer._tokenize_prompts(messages)
    if algo == "rloo":
        return prompt_ids, trainer._generate_single_turn(prompt_ids, None, {}), None
    completion_ids, logprobs = trainer._generate_single_turn(prompt_ids, None, {}, 1)
    return prompt_ids, completion_ids, logprobs


def _verifying(trainer):
    """The trainer's hold let go while the verifier works (grpo.py's `verifying`)."""
    hook = getattr(trainer, "verifying", None)
    return hook() if hook is not None else contextlib.nullcontext()
