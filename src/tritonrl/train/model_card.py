"""The model card (README.md) of a run's checkpoints and final SFT model or adapter.

    card = sft_card(run, config, data_source="prepare", train=70, validation=8)
    (checkpoint / "README.md").write_text(card(steps=20))

It says what a reader needs to use or reproduce the weights: the base model, LoRA or
full, the data and its size, the steps, the tritonrl version and the run. It replaces
TRL's and PEFT's templates (TRL's says "fine-tuned version of [None]" for a local base).

What it does NOT do: no evaluation results (the eval stage reports those), no license
(the base model's and the data's apply; the card names both), nothing for the hub.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from tritonrl import __version__
from tritonrl.config import TINY, Config
from tritonrl.runs import Run


def _version() -> str:
    return __version__


def _is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith((".", "~")) and not Path(name).exists()


def _base(config: Config) -> str:
    name = config.model.name_or_path
    if name == TINY:
        return "the tiny from-scratch model built in the run (`tiny_model/model`)"
    return f"`{name}`" + (f" (revision {config.model.revision})" if config.model.revision else "")


def sft_card(
    run: Run, config: Config, data_source: str, train: int, validation: int
) -> Callable[[int], str]:
    """A function of the step count that returns the card's Markdown."""
    lora = config.lora
    method = (
        f"LoRA (r={lora.r}, alpha={lora.alpha}, dropout={lora.dropout}, "
        f"on {', '.join(lora.target_modules)})"
        if lora.enabled
        else "full-parameter"
    )
    front = ["---", f"library_name: {'peft' if lora.enabled else 'transformers'}"]
    if _is_hub_id(config.model.name_or_path):  # a local path would not travel with the card
        front.append(f"base_model: {config.model.name_or_path}")
    front += ["tags: [tritonrl, sft, triton]", "---", ""]
    sft = config.sft
    budget = f"{sft.max_steps} steps" if sft.max_steps > 0 else f"{sft.epochs} epoch(s)"

    def card(steps: int) -> str:
        return "\n".join(
            front
            + [
                f"# {run.path.name}: SFT for Triton kernels",
                "",
                f"Supervised fine-tuning by tritonrl {_version()} (stage `sft` of run "
                f"`{run.path.name}`).",
                "",
                f"- base model: {_base(config)}",
                f"- method: {method}",
                f"- data: {data_source} ({train} train, {validation} validation examples)",
                f"- steps: {steps} (budget: {budget}), learning rate {sft.learning_rate}",
                f"- written: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
                "",
                "Load it with tritonrl, which finds the base model through the run's manifest:",
                "",
                "```python",
                "from tritonrl.train.sft import load_sft_model",
                f'model, tokenizer = load_sft_model("path/to/{run.path.name}")  # the run',
                "```",
                "",
            ]
        )

    return card


def rl_card(run: Run, config: Config, data_source: str, prompts: int) -> Callable[[int], str]:
    """The RL stage's card, a function of the step count: the SFT start, the algorithm,
    its group size, loss and reward."""
    rl, lora = config.rl, config.lora
    scheme = config.rl_reward_scheme
    front = ["---", f"library_name: {'peft' if lora.enabled else 'transformers'}"]
    if _is_hub_id(config.model.name_or_path):
        front.append(f"base_model: {config.model.name_or_path}")
    front += [f"tags: [tritonrl, rl, {rl.algo}, triton]", "---", ""]

    def card(steps: int) -> str:
        return "\n".join(
            front
            + [
                f"# {run.path.name}: RL for Triton kernels",
                "",
                f"{rl.algo.upper()} by tritonrl {_version()} (stage `rl` of run "
                f"`{run.path.name}`), from the run's SFT {'adapter' if lora.enabled else 'model'}.",
                "",
                f"- base model: {_base(config)}",
                f"- reward: the tritonrl verifier, scheme `{scheme}` (policy "
                f"{config.verify.policy})",
                f"- prompts: {data_source} ({prompts} training prompts)",
                *(
                    [
                        f"- group size {rl.num_generations}, {config.sampling.describe()}, "
                        f"loss {rl.loss_type}, beta {rl.beta}, learning rate {rl.learning_rate}",
                        f"- steps: {steps} (budget: {rl.max_steps})",
                        *(
                            [
                                f"- turns: up to {rl.turns} answers a conversation, the "
                                f"verifier's feedback between them; returns discounted by "
                                f"{rl.turn_gamma}"
                            ]
                            if rl.turns > 1
                            else []
                        ),
                    ]
                    if rl.algo in ("grpo", "rloo")
                    else [
                        f"- {config.best_of_n.samples} samples per task, "
                        f"{config.sampling.describe()}, learning rate "
                        f"{config.best_of_n.learning_rate}",
                        f"- rounds: {steps} (budget: {config.best_of_n.rounds})",
                    ]
                ),
                f"- written: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
                "",
                "Every step's completions and their verdicts: `rl/completions.jsonl` in the run.",
                "",
            ]
        )

    return card
