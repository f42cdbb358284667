"""Where code is looked for (rule 3 of `tritonrl.extract`): fences, tags, raw text.

`Text` holds the answer's lines and offsets; `scan_fences` finds Markdown fences (nested,
cut off at the end, or lenient ones glued to prose or code), `tagged_blocks` finds
`<code>`-style tags, and `tiers` yields the three candidate lists in order, lazily.
Every scan is linear in the input: line splits, `str.find` and regexes without nested
quantifiers.

What it does NOT do: it never parses a candidate or picks one (that is `choose`).
"""

from __future__ import annotations

import bisect
import keyword
import re
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

from tritonrl.extract.common import (
    MAX_SUPPORT_BLOCKS,
    MAX_SUPPORT_CHARS,
    MODEL_NEW_LINE,
    Block,
    indent,
)

_TAG_OPEN = re.compile(r"<(code|triton|python|answer)(?:[ \t][^<>\n]{0,200})?>", re.I)
_FENCE_HEADS = ("```", "~~~")
_LANG = re.compile(r"[\w+.#-]*")

# A line that cannot be Python at module level: Markdown bullets and emphasis, or a word
# followed by another word ("Here is", "Note: this is", "Explanation:").
_BULLET = re.compile(r"(?:[-*+>|][ \t]|\*\*|\d{1,3}[.)][ \t])")
_WORDS = re.compile(
    r"([A-Za-z][\w'’]*)(?:[ \t]+[A-Za-z]|[:,][ \t]+[A-Za-z][\w'’]*[ \t]+[A-Za-z(\"'’]|:[ \t]*$)"
)
_KEYWORDS = set(keyword.kwlist) | set(keyword.softkwlist) | {"print", "exec"}


@dataclass
class Text:
    """The answer split into lines, with each line's offset, for linear scans."""

    text: str
    lines: list[str]
    offsets: list[int]

    @classmethod
    def of(cls, text: str) -> Text:
        lines = text.split("\n")
        return cls(text, lines, list(accumulate((len(x) + 1 for x in lines), initial=0)))

    @cached_property
    def fence_lines(self) -> list[int]:
        """Lines that may open or close a standard fence (cheap string tests, no regex)."""
        return [k for k, x in enumerate(self.lines) if x.lstrip(" \t")[:3] in _FENCE_HEADS]

    @cached_property
    def glued_fence_lines(self) -> list[int]:
        """Lines holding a fence anywhere, for the lenient tier."""
        return [k for k, x in enumerate(self.lines) if "```" in x]

    def model_new_lines(self) -> list[int]:
        return [k for k, x in enumerate(self.lines) if "ModelNew" in x and MODEL_NEW_LINE.match(x)]


def tiers(answer: Text, fences: list[Block], spans: list[tuple[int, int]]):
    """Yield the candidate lists of rule 3, lazily: later tiers are rarely needed."""
    tagged = tagged_blocks(answer.text)
    yield sorted(fences + tagged, key=lambda b: b.start)
    glued = set(answer.glued_fence_lines) - set(answer.fence_lines)
    if glued:  # else the lenient scan would find the same blocks
        lenient, _ = scan_fences(answer, sorted(glued | set(answer.fence_lines)), lenient=True)
        yield sorted(lenient + tagged, key=lambda b: b.start)
    else:
        yield []
    fenced = bytearray(len(answer.lines))
    for a, b in spans:
        fenced[a : b + 1] = b"\x01" * (b + 1 - a)
    yield _raw_blocks(answer, fenced)


def _fence_open(line: str, lenient: bool) -> tuple[str, int, str] | None:
    """`(fence char, run length, language tag)` when `line` opens a fence."""
    body = line.lstrip(" \t")
    for char in "`~":
        if body.startswith(char * 3):
            run = len(body) - len(body.lstrip(char))
            info = body[run:].strip()
            if char == "`" and "`" in info:
                return None  # inline code, not a fence
            return char, run, info.split(" ")[0] if info else ""
    if lenient:  # "Here is the code:```python"
        at = line.rfind("```")
        tail = line[at + 3 :].strip()
        start = len(line[:at].rstrip("`"))
        if at > 0 and _LANG.fullmatch(tail) and (tail or line[:start].rstrip().endswith(":")):
            return "`", at + 3 - start, tail
    return None


def _find_close(
    lines: list[str], candidates: list[int], first: int, char: str, run: int, lenient: bool
) -> tuple[int, str | None]:
    """Index in `candidates` of the closing fence (len when none), and, in lenient mode,
    code written before the fence on the same line (`    return y````)."""
    closing = char * run
    for k in range(first, len(candidates)):
        line = lines[candidates[k]]
        body = line.strip()
        if body.startswith(closing) and not body.strip(char):
            return k, None
        if lenient and char == "`" and body.endswith("```") and body.strip("`"):
            return k, line.rstrip().rstrip("`")
    return len(candidates), None


def scan_fences(
    answer: Text, candidates: list[int], lenient: bool, depth: int = 0
) -> tuple[list[Block], list[tuple[int, int]]]:
    """Markdown fenced blocks in order, with the fences nested inside them.

    `candidates` are the indices of the lines that may open or close a fence, so the work
    is linear in their number. Returns the blocks (empty ones left out) and the line spans
    of the outer fences.
    """
    blocks, spans, idx, lines = [], [], 0, answer.lines
    while idx < len(candidates):
        i = candidates[idx]
        idx += 1
        opener = _fence_open(lines[i], lenient)
        if opener is None:
            continue
        k, before = _find_close(lines, candidates, idx, opener[0], opener[1], lenient)
        closed = k < len(candidates)
        j = candidates[k] if closed else len(lines)
        spans.append((i, min(j, len(lines) - 1)))
        if j > i + 1 or before:
            text = "\n".join(lines[i + 1 : j] + ([before] if before else []))
            if not text.isspace():
                blocks.append(Block(text, f"```{opener[2]} block", answer.offsets[i], closed))
        if depth < 3 and k > idx:  # fence-like lines inside: nested fences
            blocks += scan_fences(answer, candidates[idx:k], lenient, depth + 1)[0]
        idx = k + 1
    return blocks, spans


def tagged_blocks(text: str) -> list[Block]:
    """`<code>` / `<triton>` / `<python>` / `<answer>` regions holding no fence."""
    blocks, pos = [], 0
    closers: dict[str, list[int]] = {}
    for m in _TAG_OPEN.finditer(text):
        if m.start() < pos:
            continue  # inside the previous tag
        name = m.group(1).lower()
        close = _next_closer(text, name, m.end(), closers)
        pos = close if close >= 0 else len(text)
        content = text[m.end() : pos]
        if "```" in content or "~~~" in content:
            continue  # the fences inside are candidates of their own
        if content.strip():
            blocks.append(Block(content, f"<{name}> block", m.start(), close >= 0, tagged=True))
    return blocks


def _next_closer(text: str, name: str, after: int, cache: dict[str, list[int]]) -> int:
    """Start of the first `</name>` at or after `after`, or -1; each name is scanned once."""
    if name not in cache:
        cache[name] = [m.start() for m in re.finditer(rf"</{name}>", text, re.I)]
    positions = cache[name]
    k = bisect.bisect_left(positions, after)
    return positions[k] if k < len(positions) else -1


def _raw_blocks(answer: Text, fenced: bytearray) -> list[Block]:
    """Runs of code-looking lines outside fences: the one holding the last ModelNew, and
    the runs before it (nearest first, within the support budget) for split answers."""
    lines = answer.lines
    last = next((k for k in reversed(answer.model_new_lines()) if not fenced[k]), None)
    if last is None:
        return []
    base = indent(lines[last])

    def breaks(k: int) -> bool:
        return bool(fenced[k]) or (indent(lines[k]) <= base and _is_prose(lines[k]))

    hi = last + 1
    while hi < len(lines) and not breaks(hi):
        hi += 1
    # walk back from the class line: its own run first, then earlier runs (bounded)
    runs, run, size, k = [], list(range(hi - 1, last - 1, -1)), 0, last - 1
    while k >= 0 and len(runs) <= MAX_SUPPORT_BLOCKS and size <= MAX_SUPPORT_CHARS:
        if not breaks(k):
            run.append(k)
            size += len(lines[k]) + 1
        elif run:
            runs.append(run)
            run = []
        k -= 1
    runs.append(run)
    runs = [r[::-1] for r in reversed(runs) if any(lines[j].strip() for j in r)]
    return [_raw_block(answer, r) for r in runs]


def _raw_block(answer: Text, run: list[int]) -> Block:
    text = "\n".join(answer.lines[k] for k in run)
    where = f"raw text (lines {run[0] + 1}-{run[-1] + 1} of the answer)"
    return Block(text, where, answer.offsets[run[0]], loose=True)


def _is_prose(line: str) -> bool:
    """True for a line that cannot be module-level Python (conservative)."""
    s = line.strip()
    if not s:
        return False
    if not s[0].isascii() or _BULLET.match(s):
        return True
    m = _WORDS.match(s)
    return m is not None and m.group(1) not in _KEYWORDS
