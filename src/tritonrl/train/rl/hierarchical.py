"""Hierarchical reward decomposition (TritonRL's HRD) for TRL's `GRPOTrainer`.

    tritonrl rl --run runs/demo --algo grpo --rl.hierarchical true
    cls = hierarchical_trainer(TrainerClass, config.rl)   # what grpo.py does with it

TritonRL's reward is `correct + w * clip(speedup, c)`. With `rl.hierarchical` the two
terms are not summed into one advantage per completion: the plan (the reasoning before
the code) is credited with how fast the kernel is, the code with whether it is correct.

How the per-token advantages are formed, for a batch of B completions in groups of G
(TRL's layout: the G completions of one prompt are consecutive):

1. Terms (`term_rewards`), from the verifier's details of completion i:
   `correct_i` is 1.0 when the verifier found it correct AND the reward scheme credits
   it (its `reward` > 0: every scheme scores a cheating flag or a sandbox limit 0, and
   any other correct kernel above 0), else 0.0; `speedup_i` is
   `rl.hierarchical_speedup_weight * min(max(s, 0), rl.hierarchical_speedup_clip)` for a
   credited correct kernel and 0.0 otherwise, `s` being the details' noise-ruled
   `reward_speedup` when they carry one, else their measured `speedup` (what
   `make_trl_reward`'s details hold today); an untimed kernel (`None`: timing needs
   CUDA) has 0. The two are TRL reward functions (`tritonrl_correct`,
   `tritonrl_speedup`, one verification per batch for both), so TRL's `rewards_per_func`
   carries both, its metrics log each (`rewards/tritonrl_correct/mean`, ...), and its
   scalar `reward` (their sum, weights 1) is exactly TritonRL's reward.
2. Normalization (`group_advantages`), each term on its own, by TRL 1.16's rule for the
   scalar reward (`_generate_and_score_completions`, `multi_objective_aggregation=
   "sum_then_normalize"`): `A_i = x_i - mean(x over i's group)`, then, unless
   `scale_rewards` is "none", `A_i /= std + 1e-4` where std is the sample standard
   deviation (Bessel's correction, NaNs ignored) of i's group for "group" (TRL's default)
   and of the whole batch (all processes) for "batch"; NaN becomes 0. A group whose term
   is the same everywhere (all wrong, or all untimed) gets 0 for that term.
3. The split (`fence_token`): the plan of a completion is its tokens before the token
   that holds the first backtick of its first "```" (wherever it stands, in `<think>`
   text too); that token and all after it are code. A completion without "```" is all
   code: the extractor also reads unfenced code, the verifier judged it as code, and no
   boundary between prose and code would be better than a guess. `~~~` fences do not
   split. Positions are found by decoding token prefixes with the trainer's tokenizer
   (special tokens skipped, as TRL decodes completions).
4. `advantages[i, t]` (`per_token_advantages`, shape [B, L], L the padded completion
   width) is `A_speedup_i` for `t < plan_i`, `A_correct_i` for `plan_i <= t < len_i`,
   and 0 for padding (`t >= len_i`). TRL's `_compute_loss` takes [B, L] advantages as
   they are (it unsqueezes only [B]), so the loss is TRL's own (`rl.loss_type`, `dapo`
   by default) with a per-token advantage in place of the per-completion one.

Where this departs from the TritonRL paper: the paper states the decomposition at the
level of plan and code; the boundary rule at token granularity, the no-fence case, the
normalization's details (TRL's `scale_rewards`, its 1e-4 and Bessel's correction) and the
loss (TRL's `rl.loss_type`, not the paper's GRPO objective) are this module's, taken from
TRL 1.16 where TRL has a rule. Correctness is our verifier's, and a correct kernel the
scheme refuses (a cheating flag, a sandbox limit) counts as wrong. On a machine without
CUDA no kernel is timed, so the plan tokens' advantage is 0 there.

Logging: `rl/completions.jsonl` (`CompletionLog`) is written as without the
decomposition (the verifier reward under `rl.reward_scheme`); TRL's completions table
keeps its per-completion scalar advantage. Added metrics: `hierarchical/plan_tokens`
(the share of completion tokens that are plan) and `hierarchical/fenced` (the share of
completions with a fence).

What it does NOT do: no RLOO (its own baseline; `rl.hierarchical` needs `rl.algo grpo`),
no reward functions besides the verifier's, no `multi_objective_aggregation` other than
TRL's default, no tool-calling completions (tool output tokens would count as code).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence

import torch

log = logging.getLogger(__name__)

FENCE = "```"
SCALE_REWARDS = ("group", "batch", "none")
CORRECT, SPEEDUP = "tritonrl_correct", "tritonrl_speedup"  # TRL's names of the two terms
_TERM = "hierarchical_term"  # the attribute that marks the two reward functions


def credited(detail: dict) -> bool:
    """Correct, and credited by the reward scheme (no cheating flag, no sandbox limit)."""
    return bool(detail["correct"]) and detail["reward"] > 0


def term_rewards(
    correct: Sequence[bool], speedups: Sequence[float | None], weight: float, clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(correctness [B], speedup term [B]): 1/0, and `weight * min(max(s, 0), clip)` for
    correct kernels with a speedup, 0 otherwise."""
    code = torch.tensor([1.0 if c else 0.0 for c in correct])  # [B]
    plan = torch.tensor(
        [weight * min(max(s, 0.0), clip) if c and s is not None else 0.0
         for c, s in zip(correct, speedups, strict=True)]
    )  # [B]  # fmt: skip
    return code, plan


def group_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    """[B] -> [B]: TRL 1.16's advantage of a scalar reward (sum_then_normalize), groups of
    `num_generations` consecutive completions; see the module docstring, step 2."""
    from trl.trainer.utils import nanstd

    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, not {scale_rewards!r}")
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {num_generations}")
    grouped = rewards.view(-1, num_generations)  # [B/G, G]
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)  # [B]
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else rewards * 0
    elif num_generations > 1:
        std = nanstd(grouped, dim=1).repeat_interleave(num_generations)  # [B]
    else:
        std = torch.zeros_like(rewards)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def fence_token(ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> int | None:
    """The index of the token holding the first backtick of the first "```" of a
    completion's token ids (`decode`: ids -> text), or None without a fence."""
    ids = list(ids)
    if FENCE not in decode(ids):
        return None
    lo, hi = 1, len(ids)  # the shortest prefix that holds a whole fence
    while lo < hi:
        mid = (lo + hi) // 2
        if FENCE in decode(ids[:mid]):
            hi = mid
        else:
            lo = mid + 1
    start = decode(ids[:lo]).find(FENCE)  # the fence's first character
    plan = lo - 1
    while plan > 0 and len(decode(ids[:plan])) > start:  # back to where the fence begins
        plan -= 1
    return plan


def per_token_advantages(
    plan_adv: torch.Tensor,
    code_adv: torch.Tensor,
    plan_lengths: Sequence[int],
    lengths: Sequence[int],
    width: int,
) -> torch.Tensor:
    """[B, width]: `plan_adv` [B] on each completion's first `plan_lengths` tokens,
    `code_adv` [B] on the rest of its `lengths` tokens, 0 on the padding after them."""
    plan_len = torch.as_tensor(list(plan_lengths)).unsqueeze(1)  # [B, 1]
    length = torch.as_tensor(list(lengths)).unsqueeze(1)  # [B, 1]
    if (plan_len > length).any() or (length > width).any():
        raise ValueError(f"plan lengths {plan_lengths} / lengths {lengths} exceed width {width}")
    positions = torch.arange(width).unsqueeze(0)  # [1, L]
    advantages = torch.where(
        positions < plan_len, plan_adv.unsqueeze(1), code_adv.unsqueeze(1)
    )  # [B, L]
    return advantages.masked_fill(positions >= length, 0.0)  # [B, L]


def split_advantages(
    plan_lengths: Sequence[int],
    lengths: Sequence[int],
    correct: Sequence[bool],
    speedups: Sequence[float | None],
    num_generations: int,
    weight: float = 0.1,
    clip: float = 2.0,
    scale_rewards: str = "group",
    width: int | None = None,
) -> torch.Tensor:
    """The per-token advantages [B, width] (width: the longest completion) of B completions
    in groups of `num_generations`: steps 1, 2 and 4 of the module docstring, given each
    completion's plan length (`fence_token`, 0 without a fence) and length in tokens."""
    code, plan = term_rewards(correct, speedups, weight, clip)  # [B], [B]
    code_adv = group_advantages(code, num_generations, scale_rewards)  # [B]
    plan_adv = group_advantages(plan, num_generations, scale_rewards)  # [B]
    width = max(lengths, default=0) if width is None else width
    return per_token_advantages(plan_adv, code_adv, plan_lengths, lengths, width)


class _OneVerification:
    """Both terms of a batch from one call of the verifier reward: the first term function
    of a batch starts it, the other awaits the same task (TRL gathers async rewards in one
    event loop and hands each the same `completions` list)."""

    def __init__(self, reward):
        self.reward = reward
        self._completions = None
        self._task: asyncio.Future | None = None

    async def details(self, prompts, completions, kwargs) -> list[dict]:
        if self._completions is not completions:
            self._completions = completions  # held: a new batch is a new list
            self._task = asyncio.ensure_future(self._verify(prompts, completions, kwargs))
        return await self._task

    async def _verify(self, prompts, completions, kwargs) -> list[dict]:
        out = self.reward.with_details(prompts, completions, **kwargs)
        if inspect.isawaitable(out):
            out = await out
        return list(out[1])


def hierarchical_reward_funcs(reward, weight: float = 0.1, clip: float = 2.0) -> list:
    """The verifier's TRL reward (`make_trl_reward`, or `CompletionLog.trl_reward` of one:
    anything with `.with_details`) as the two TRL reward functions of the
    decomposition: `tritonrl_correct` and `tritonrl_speedup` (step 1)."""
    if not callable(getattr(reward, "with_details", None)):
        raise TypeError(
            f"hierarchical rewards need the verifier reward of make_trl_reward (a function "
            f"with .with_details), not {reward!r}"
        )
    shared = _OneVerification(reward)

    async def _terms(prompts, completions, kwargs):
        details = await shared.details(prompts, completions, kwargs)
        correct = [credited(d) for d in details]
        speedups = [d.get("reward_speedup", d.get("speedup")) for d in details]
        return term_rewards(correct, speedups, weight, clip)

    async def tritonrl_correct(prompts, completions, **kwargs) -> list[float]:
        return (await _terms(prompts, completions, kwargs))[0].tolist()

    async def tritonrl_speedup(prompts, completions, **kwargs) -> list[float]:
        return (await _terms(prompts, completions, kwargs))[1].tolist()

    setattr(tritonrl_correct, _TERM, CORRECT)
    setattr(tritonrl_speedup, _TERM, SPEEDUP)
    tritonrl_correct.scorer = tritonrl_speedup.scorer = reward.scorer
    return [tritonrl_correct, tritonrl_speedup]


def _as_terms(reward_funcs, weight: float, clip: float) -> list:
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    if sorted(getattr(f, _TERM, "") for f in funcs) == [CORRECT, SPEEDUP]:
        return funcs  # already split
    if len(funcs) != 1:
        raise ValueError(
            f"rl.hierarchical splits the verifier's reward alone; got {len(funcs)} reward "
            "functions: pass reward_funcs=[make_trl_reward(...)]"
        )
    return hierarchical_reward_funcs(funcs[0], weight, clip)


def _term_columns(trainer) -> tuple[int, int]:
    names = [getattr(f, _TERM, None) for f in trainer.reward_funcs]
    return names.index(CORRECT), names.index(SPEEDUP)


def hierarchical_trainer(base: type, rl_config) -> type:
    """A subclass of `base` (a `GRPOTrainer` subclass) whose advantages are per token
    ([B, L]) as the module docstring says; the verifier reward it is given (the
    `reward_funcs` keyword) becomes the two term functions."""
    weight = rl_config.hierarchical_speedup_weight
    clip = rl_config.hierarchical_speedup_clip

    class HierarchicalTrainer(base):
        def __init__(self, *args, **kwargs):
            if "reward_funcs" not in kwargs:
                raise TypeError("hierarchical_trainer: pass reward_funcs= by keyword")
            kwargs["reward_funcs"] = _as_terms(kwargs["reward_funcs"], weight, clip)
            super().__init__(*args, **kwargs)
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ValueError(
                    "rl.hierarchical normalizes each term itself: multi_objective_aggregation "
                    f"must be 'sum_then_normalize', not {self.multi_objective_aggregation!r}"
                )
            self._hrd_columns = _term_columns(self)
            self._hrd_batch = None

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._hrd_batch = (rewards, completion_ids_list)  # [B_all, F], B local id lists
            return rewards

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            output["advantages"] = self._token_advantages(output["completion_ids"])  # [B, L]
            return output

        def _token_advantages(self, completion_ids: torch.Tensor) -> torch.Tensor:
            rewards, ids = self._hrd_batch
            self._hrd_batch = None
            mode = "train" if self.model.training else "eval"
            group = self.num_generations if mode == "train" else self.num_generations_eval
            code_col, plan_col = self._hrd_columns
            code = group_advantages(rewards[:, code_col].cpu(), group, self.scale_rewards)
            plan = group_advantages(rewards[:, plan_col].cpu(), group, self.scale_rewards)
            start = self.accelerator.process_index * len(ids)  # this process's rows
            local = slice(start, start + len(ids))

            def decode(x):
                return self._tokenizer.decode(list(x), skip_special_tokens=True)

            fences = [fence_token(x, decode) for x in ids]
            plan_lengths = [f or 0 for f in fences]
            lengths = [len(x) for x in ids]
            self._metrics[mode]["hierarchical/plan_tokens"].append(
                sum(plan_lengths) / max(sum(lengths), 1)
            )
            self._metrics[mode]["hierarchical/fenced"].append(
                sum(f is not None for f in fences) / max(len(fences), 1)
            )
            advantages = per_token_advantages(
                plan[local], code[local], plan_lengths, lengths, completion_ids.size(1)
            )  # [B, L]
            return advantages.to(completion_ids.device)

    HierarchicalTrainer.__name__ = HierarchicalTrainer.__qualname__ = f"Hierarchical{base.__name__}"
    return HierarchicalTrainer
