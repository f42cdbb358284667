"""The private TRL and transformers methods that tritonrl's trainers override or call on
`super()`, checked against the installed versions.

tritonrl subclasses TRL's GRPOTrainer, RLOOTrainer and SFTTrainer and hooks their private
methods: the step clock and the GPU hold wrap `_generate` and `_calculate_rewards`, the
hierarchical reward replaces the advantages `_generate_and_score_completions` returns,
the curriculum supplies `_get_train_sampler` and saves its state in `_save_checkpoint`,
multi-turn RL is GRPO's `rollout_func` (RLOO's `_generate`) calling
`_tokenize_prompts` and `_generate_single_turn`, the weighted SFT adds a column in
`_set_signature_columns_if_needed` and reads TRL's fused LM head, and a mixin filters
`_issue_warnings_after_load`. TRL makes no promise about private methods, so a release
that renames a parameter, drops a method, stops calling it or stops setting an attribute
the code reads fails here, naming the method and the difference, before a training run
meets it. pyproject.toml pins TRL to the
versions run; raising that pin starts here.

What this test does NOT do: run a trainer (tests/train/test_grpo.py and test_sft.py do),
or import tritonrl's modules (their paths may move; the table below is the contract).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

pytest.importorskip("trl")

REWARDS = ["inputs", "prompts", "completions", "completion_ids_list"]
GRPO, RLOO, SFT = "trl:GRPOTrainer", "trl:RLOOTrainer", "trl:SFTTrainer"
HOOKS = "the step clock and the GPU hold wrap it"
CURRICULUM = "the curriculum's sampler and state"
TIED = "TiedWeightsLoad drops tied weights from the missing keys"
INIT_METRICS = 'self._metrics = {"train": defaultdict(list)'
TURNS = "multi-turn RL (rl.turns > 1)"

# The tables keep one row a line (ruff would fold each row over several).
# fmt: off

# (owner, method, the parameter names after `self` the code relies on, in order; why).
# `owner` is "module:Class" (or "module:" for a function); the method may be inherited.
# An override with a fixed signature breaks when the base gains or renames a parameter,
# so the names must match exactly.
SIGNATURES = [
    (GRPO, "_calculate_rewards", REWARDS, "hierarchical overrides it by name; " + HOOKS),
    (RLOO, "_calculate_rewards", REWARDS, HOOKS),
    (GRPO, "_generate_and_score_completions", ["inputs"], "hierarchical overrides it"),
    (GRPO, "_generate", ["prompts"], "the step clock times it"),
    (RLOO, "_generate", ["prompts"], "the step clock times it"),
    (GRPO, "_get_train_sampler", ["dataset"], CURRICULUM + ", dataset passed on"),
    (RLOO, "_get_train_sampler", ["dataset"], CURRICULUM + ", dataset passed on"),
    (GRPO, "_save_checkpoint", ["model", "trial"], CURRICULUM + " saved per checkpoint"),
    (RLOO, "_save_checkpoint", ["model", "trial"], CURRICULUM + " saved per checkpoint"),
    (GRPO, "_get_output_dir", ["trial"], "called with trial= for the checkpoint folder"),
    (RLOO, "_get_output_dir", ["trial"], "called with trial= for the checkpoint folder"),
    (GRPO, "log", ["logs", "start_time"], "the curriculum's metrics join each log"),
    (RLOO, "log", ["logs", "start_time"], "the curriculum's metrics join each log"),
    (SFT, "_set_signature_columns_if_needed", [], "weighted SFT keeps its `weight` column"),
    (SFT, "compute_loss", ["model", "inputs", "return_outputs", "num_items_in_batch"],
     "weighted SFT overrides the loss with these names"),
    (SFT, "_issue_warnings_after_load", ["load_result"], TIED),
    (GRPO, "_issue_warnings_after_load", ["load_result"], TIED),
    (RLOO, "_issue_warnings_after_load", ["load_result"], TIED),
    ("trl.trainer.utils:", "nanstd", ["tensor", "dim", "keepdim"],
     "hierarchical's advantages: nanstd(x, dim=1)"),
    (GRPO, "_tokenize_prompts", ["prompts"], TURNS + " tokenizes each turn's conversations"),
    (RLOO, "_tokenize_prompts", ["prompts"], TURNS + " tokenizes each turn's conversations"),
    (GRPO, "_generate_single_turn",
     ["prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
     TURNS + " generates one answer per conversation (num_generations=1)"),
    (RLOO, "_generate_single_turn", ["prompt_ids", "images", "multimodal_fields"],
     TURNS + " generates one answer per conversation"),
    ("trl.trainer.utils:RepeatSampler", "__init__",
     ["data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"],
     TURNS + " repeats each prompt num_generations x turns times"),
]

# (owner, method, what its source must still hold; why): an override is dead code if TRL
# stops calling the hooked method from where the code expects it.
CALLS = [
    (GRPO, "_generate_and_score_completions", ["self._generate(", "self._calculate_rewards("],
     "a step's generation and rewards go through the hooked methods"),
    (RLOO, "_generate_and_score_completions", ["self._generate(", "self._calculate_rewards("],
     "a step's generation and rewards go through the hooked methods"),
    (GRPO, "_generate_and_score_completions", ['"completion_ids"', '"advantages"'],
     "hierarchical reads completion_ids from its output and replaces advantages"),
    (GRPO, "_generate", ["self.rollout_func(prompts, self)", 'extra_fields.pop("env_mask"'],
     TURNS + " is GRPO's rollout_func; its env_mask masks empty slots"),
    (GRPO, "_generate_and_score_completions", ["inp[key] = values[i]", "torch.nanmean("],
     TURNS + "'s fields reach the reward per slot; a None reward is out of its baseline"),
    (RLOO, "_calculate_rewards", ["for key in inputs[0]"],
     TURNS + " writes the reward's fields into the batch's rows (RLOO)"),
    (SFT, "__init__", ["add_fused_lm_head("], "weighted SFT calls model(..., fused_lm_head=True)"),
    (GRPO, "__init__", [INIT_METRICS], "the step clock and hierarchical append to _metrics"),
    (RLOO, "__init__", [INIT_METRICS], "the step clock appends to _metrics"),
]

# (owner, attributes its __init__ must set; why).
ATTRIBUTES = [
    (GRPO, ["_tokenizer", "num_generations", "num_generations_eval", "scale_rewards",
            "multi_objective_aggregation", "num_iterations", "reward_funcs"],
     "hierarchical and the curriculum's sampler read them"),
    (RLOO, ["num_generations", "num_iterations"], "the curriculum's sampler reads them"),
    (GRPO, ["shuffle_dataset"], TURNS + ": its sampler shuffles as TRL's"),
    (RLOO, ["shuffle_dataset"], TURNS + ": its sampler shuffles as TRL's"),
    ("transformers:Trainer", ["_signature_columns"], "weighted SFT extends it"),
]

# (dataclass, fields the code reads: the trainer's args, the fused LM head's output).
FIELDS = [
    ("trl:GRPOConfig", ["generation_batch_size", "steps_per_generation"]),
    ("trl:RLOOConfig", ["generation_batch_size", "steps_per_generation"]),
    ("trl.trainer.utils:FusedCausalLMOutput", ["log_probs", "label_mask"]),
]

# fmt: on


def _owner(spec: str):
    module, _, name = spec.partition(":")
    found = importlib.import_module(module)
    return getattr(found, name) if name else found


def _label(owner: str, method: str) -> str:
    module, _, name = owner.partition(":")
    return f"{name or module}.{method}"


def _method(owner: str, method: str):
    found = getattr(_owner(owner), method, None)
    if found is None:
        pytest.fail(f"{_label(owner, method)} is gone from the installed TRL/transformers")
    return found


@pytest.mark.parametrize(
    ("owner", "method", "expected", "why"),
    SIGNATURES,
    ids=[_label(o, m) for o, m, *_ in SIGNATURES],
)
def test_a_hooked_method_keeps_the_parameters_the_code_relies_on(owner, method, expected, why):
    params = list(inspect.signature(_method(owner, method)).parameters)
    params = params[1:] if params[:1] == ["self"] else params
    if params != expected:
        gone = [p for p in expected if p not in params]
        new = [p for p in params if p not in expected]
        pytest.fail(
            f"{_label(owner, method)}: parameters ({', '.join(params)}), tritonrl relies on "
            f"({', '.join(expected)}): missing {gone}, new {new}"
            f"{'' if gone or new else ', order changed'} ({why})"
        )


@pytest.mark.parametrize(
    ("owner", "method", "calls", "why"),
    CALLS,
    ids=[f"{_label(o, m)}-{i}" for i, (o, m, *_) in enumerate(CALLS)],
)
def test_a_hooked_method_is_still_called_where_the_code_expects(owner, method, calls, why):
    source = inspect.getsource(_method(owner, method))
    missing = [c for c in calls if c not in source]
    assert not missing, f"{_label(owner, method)} no longer holds {missing} ({why})"


@pytest.mark.parametrize(
    ("owner", "names", "why"), ATTRIBUTES, ids=[o.partition(":")[2] for o, *_ in ATTRIBUTES]
)
def test_the_attributes_the_code_reads_are_still_set(owner, names, why):
    source = inspect.getsource(_owner(owner).__init__)
    missing = [n for n in names if f"self.{n} =" not in source]
    assert not missing, f"{_label(owner, '__init__')} no longer sets {missing} ({why})"


@pytest.mark.parametrize(("owner", "names"), FIELDS, ids=[o.partition(":")[2] for o, _ in FIELDS])
def test_the_fields_the_code_reads_still_exist(owner, names):
    fields = {f.name for f in dataclasses.fields(_owner(owner))}
    missing = [n for n in names if n not in fields]
    assert not missing, f"{owner.partition(':')[2]} has no field {missing}"
