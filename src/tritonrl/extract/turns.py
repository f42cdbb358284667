"""Chat leftovers and reasoning (rules 1 and 2 of `tritonrl.extract`).

`answer_turn` cuts a completion down to the assistant's own turn and deletes chat-template
special tokens; `split_reasoning` separates `<think>`-style reasoning from the answer and
notes a reasoning block never closed.

What it does NOT do: it never looks for code; code inside the reasoning is kept only so
that `messages` can say a ModelNew appeared there, never as an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tritonrl.extract.common import MODEL_NEW_LINE

_TURN_HEADER = re.compile(
    r"<\|im_start\|>(?P<chatml>[A-Za-z]+)\n?"
    r"|<\|start_header_id\|>(?P<llama>[A-Za-z]+)<\|end_header_id\|>\n*"
    r"|<start_of_turn>(?P<gemma>[A-Za-z]+)\n?"
    r"|<\|(?P<phi>system|user|assistant)\|>\n?"
    r"|<｜(?P<deepseek>User|Assistant)｜>"
    r"|(?P<inst>\[/?INST\])"
)
_ASSISTANT_ROLES = {"assistant", "model", "gpt", "bot", "[/INST]"}
_END_OF_TURN = re.compile(
    r"<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>|<\|end_of_text\|>|<\|end\|>|<\|EOT\|>"
    r"|</s>|<eos>|<end_of_turn>|<｜end▁of▁sentence｜>"
)
_SPECIAL = re.compile(
    r"<\|[A-Za-z0-9_]{1,40}\|>|<｜[^｜\n]{1,40}｜>|<s>|<bos>|<pad>|<start_of_turn>"
    r"|" + _END_OF_TURN.pattern
)
_THINK = re.compile(r"<(/?)(?:think|thinking|reasoning|thought)>", re.I)


@dataclass
class Split:
    answer: str
    reasoning: str = ""
    unclosed: bool = False


def _has_text(segment: str) -> bool:
    return bool(_SPECIAL.sub("", segment).strip())


def answer_turn(text: str) -> str:
    """The assistant's own text, without chat-template tokens (rule 1)."""
    headers = list(_TURN_HEADER.finditer(text))
    segment = text
    if headers and not _has_text(text[: headers[0].start()]):
        segment = _last_assistant_turn(text, headers)
    elif headers:
        segment = text[: headers[0].start()]
    end = _END_OF_TURN.search(segment)
    if end and MODEL_NEW_LINE.search(segment, 0, end.start()):
        segment = segment[: end.start()]
    return _SPECIAL.sub("", segment)


def _last_assistant_turn(text: str, headers: list[re.Match]) -> str:
    for i in range(len(headers) - 1, -1, -1):
        role = next(g for g in headers[i].groups() if g)
        if role.lower() in _ASSISTANT_ROLES or role in _ASSISTANT_ROLES:
            stop = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            return text[headers[i].end() : stop]
    return text


def split_reasoning(text: str) -> Split:
    """Separate `<think>` reasoning from the answer (rule 2)."""
    answer, reasoning = [], []
    pos, opened_at = 0, None
    for m in _THINK.finditer(text):
        if not m.group(1):  # an opener; one inside reasoning is part of it
            if opened_at is None:
                answer.append(text[pos : m.start()])
                opened_at = m.end()
            continue
        if opened_at is not None:
            reasoning.append(text[opened_at : m.start()])
            opened_at = None
        else:  # a closer with no opener: everything before it was reasoning
            reasoning.append(text[pos : m.start()])
        pos = m.end()
    if opened_at is not None:
        reasoning.append(text[opened_at:])
    else:
        answer.append(text[pos:])
    return Split("\n".join(answer), "\n".join(reasoning), opened_at is not None)
