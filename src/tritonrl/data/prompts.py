"""The one prompt builder shared by SFT, RL and evaluation.

A prompt is two chat messages: a system message, and a user message holding the
instruction, an optional one-shot example (an element-wise add and its Triton answer,
written here), the task's reference code in a ```python fence, and the OUTPUT CONTRACT
that `tritonrl.extract` and the verifier enforce. `build_prompt` renders them with the
model's chat template (or as plain text); `sft_example` pairs them with a target answer in
TRL's conversational prompt/completion format, and guarantees that `extract_code` of that
answer returns the solution exactly.

What it does NOT do: it does not load tasks or datasets (`tritonrl.tasks`,
`tritonrl.data.kernelbook`), does not validate the reference beyond it being text, and
does not tokenize or truncate: length limits belong to the trainers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from tritonrl.config import PARTIAL_TORCH_OPS, POLICIES
from tritonrl.extract import ExtractError, extract_code, normalise_code
from tritonrl.tasks.families import verify_config_for

log = logging.getLogger(__name__)


SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer. You rewrite PyTorch modules as correct, fast "
    "Triton kernels, and you follow the output contract exactly."
)

DEFAULT_INSTRUCTION = (
    "Write an optimized Triton implementation of the PyTorch reference `Model` below. "
    "Name the new module `ModelNew`: it takes the same __init__ arguments as `Model` and "
    "returns the same outputs from forward for the same inputs."
)

_CONTRACT_HEAD = """OUTPUT CONTRACT
1. Think briefly first, inside <think> ... </think>: the plan, the tiling, the masks.
2. Then give exactly one final ```python block, and nothing after it. It defines the \
@triton.jit kernel(s) and `class ModelNew(nn.Module)`, with every import it needs \
(torch, torch.nn as nn, triton, triton.language as tl).
3. `ModelNew` takes the same __init__ arguments as `Model` and creates the same \
parameters in the same order (keep e.g. `self.linear = nn.Linear(...)` and read its \
weight and bias): both modules are built under the same random seed. Its forward takes \
the same inputs and returns the same outputs (shapes, dtypes, values within float \
tolerance).
4. It must work for any input size, not only the sizes above: mask the tails."""

_CONTRACT_TAIL = (
    "6. Do not define Model, get_inputs or get_init_inputs. Do not print, test, time or "
    "benchmark anything. No try/except fallbacks, no torch.compile, no other kernel libraries."
)

_STRICT_RULE = (
    "5. Policy strict: all computation happens inside @triton.jit kernels. Use torch only "
    "to allocate outputs (torch.empty, torch.empty_like, torch.zeros), for views and layout "
    "(.view, .reshape, .contiguous, .stride, .shape) and to hold parameters. No torch math "
    "in forward: no torch.* or F.* operations, no @, no calling nn layers."
)

_PARTIAL_RULE = (
    "5. Policy partial: only these torch ops may stay in torch: {ops}. Every other "
    "operation (element-wise, activations, reductions, normalisation) happens inside "
    "@triton.jit kernels; otherwise use torch only to allocate outputs, for views and to "
    "hold parameters."
)

EXAMPLE_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors element-wise."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


size = 4096


def get_inputs():
    return [torch.randn(size), torch.randn(size)]


def get_init_inputs():
    return []
'''

EXAMPLE_REASONING = (
    "One program per block of 1024 elements over the flattened tensors; a mask guards the "
    "tail, so any size works."
)

EXAMPLE_SOLUTION = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = out.numel()
        BLOCK = 1024
        add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
        return out
"""

_THINK_TAG = re.compile(r"</?think>", re.I)


def output_contract(policy: str = "strict", allowed_torch_ops: Sequence[str] | None = None) -> str:
    """The OUTPUT CONTRACT paragraph for a policy (`strict`, or `partial` with the torch
    ops it allows; `PARTIAL_TORCH_OPS` when none are named)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    if policy == "strict" and allowed_torch_ops:
        raise ValueError("allowed_torch_ops given with policy 'strict'; use policy 'partial'")
    if policy == "strict":
        rule = _STRICT_RULE
    else:
        ops = PARTIAL_TORCH_OPS if allowed_torch_ops is None else tuple(allowed_torch_ops)
        if not ops:
            raise ValueError("policy 'partial' with no allowed_torch_ops is strict: say 'strict'")
        rule = _PARTIAL_RULE.format(ops=", ".join(f"`{op}`" for op in ops))
    return f"{_CONTRACT_HEAD}\n{rule}\n{_CONTRACT_TAIL}"


def fenced(code: str, lang: str = "python") -> str:
    """`code` in a Markdown fence long enough that no line inside can close it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    body = code if code.endswith("\n") else code + "\n"
    return f"{ticks}{lang}\n{body}{ticks}"


def answer_text(solution_code: str, reasoning: str | None = None) -> str:
    """An assistant answer in the contract's shape: optional <think> reasoning, then the
    solution in one ```python fence. Think tags inside `reasoning` are removed so that it
    cannot close the reasoning early."""
    code = fenced(normalise_code(solution_code))
    if not reasoning or not reasoning.strip():
        return code
    thought = _THINK_TAG.sub("", reasoning).strip()
    return f"<think>\n{thought}\n</think>\n\n{code}"


def _example_section() -> str:
    return (
        "Example of the expected answer, for a different problem.\n"
        f"Reference:\n{fenced(EXAMPLE_REFERENCE)}\n"
        f"Answer:\n{answer_text(EXAMPLE_SOLUTION, EXAMPLE_REASONING)}"
    )


def build_messages(
    task_source: str,
    *,
    instruction: str | None = None,
    include_example: bool = True,
    policy: str = "strict",
    allowed_torch_ops: Sequence[str] | None = None,
) -> list[dict]:
    """System + user chat messages asking for a Triton `ModelNew` for `task_source`.

    `policy` and `allowed_torch_ops` should be the verifier's (`VerifyConfig`): the
    contract states what the reward will accept.
    """
    if not isinstance(task_source, str) or not task_source.strip():
        raise ValueError("task_source must be the reference's source code, a non-empty string")
    parts = [instruction or DEFAULT_INSTRUCTION]
    if include_example:
        parts.append(_example_section())
    reference = task_source.strip("\n") + "\n"
    parts.append(f"Reference:\n{fenced(reference)}")
    parts.append(output_contract(policy, allowed_torch_ops))
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def policy_settings(verify, task_id: str = "") -> dict:
    """`build_messages`' policy and allowed torch ops for a task under a `VerifyConfig`:
    those it is verified under (`verify_config_for`), so the prompt promises what the
    verifier allows."""
    verify = verify_config_for(verify, task_id)
    return {"policy": verify.policy, "allowed_torch_ops": verify.allowed_torch_ops}


def prompt_settings(config, task_id: str = "") -> dict:
    """`build_messages`' settings from a run's `Config` for a task: `data.include_example`
    and `policy_settings`, so SFT's rows, RL's own prompts and eval's ask alike."""
    return {"include_example": config.data.include_example,
            **policy_settings(config.verify, task_id)}  # fmt: skip


def render_plain(messages: list[dict]) -> str:
    """Plain-text rendering for models without a chat template; ends ready for the answer."""
    turns = [f"{m['role'].capitalize()}:\n{m['content']}" for m in messages]
    return "\n\n".join([*turns, "Assistant:\n"])


def build_prompt(task_source: str, tokenizer=None, **kw) -> str:
    """The prompt string: the tokenizer's chat template when given, else plain text.

    `kw` goes to `build_messages`. A tokenizer without a chat template is an error rather
    than a silent fallback: SFT, RL and evaluation must all see the same format.
    """
    messages = build_messages(task_source, **kw)
    if tokenizer is None:
        return render_plain(messages)
    if not hasattr(tokenizer, "apply_chat_template"):
        raise TypeError(
            f"{type(tokenizer).__name__} has no apply_chat_template; pass a transformers "
            "tokenizer, or tokenizer=None for plain text"
        )
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "the tokenizer has no chat_template: set tokenizer.chat_template, or pass "
            "tokenizer=None for the plain-text rendering"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def sft_example(
    task_source: str, solution_code: str, reasoning: str | None = None, **prompt_kw
) -> dict:
    """One SFT row in TRL's conversational prompt/completion format.

    `prompt_kw` goes to `build_messages` (policy, allowed_torch_ops, include_example,
    instruction).
    The completion ends with the solution in a ```python fence; `extract_code` of it
    returns `normalise_code(solution_code)` exactly, and a solution for which it would not
    (no top-level `class ModelNew`, a syntax error) raises `ValueError` here, so no SFT row
    teaches an answer the reward could not read.
    """
    content = answer_text(solution_code, reasoning)
    try:
        extracted = extract_code(content)
    except ExtractError as e:
        raise ValueError(f"solution cannot be used as an SFT target: {e}") from None
    if extracted != normalise_code(solution_code):
        raise ValueError("solution does not survive extraction unchanged; refusing the SFT row")
    return {
        "prompt": build_messages(task_source, **prompt_kw),
        "completion": [{"role": "assistant", "content": content}],
    }
