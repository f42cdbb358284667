"""Completion text -> kernel code: find the `class ModelNew` that a model wrote.

`extract_code(completion)` returns the source of the candidate module, or raises
`ExtractError` saying what was looked at and why nothing fits; `try_extract` returns
`(code, error)` and never raises. Both accept `str` or `bytes` (decoded as UTF-8 with
replacement). The result always parses with `ast.parse`, defines a top-level
`class ModelNew`, has no leading blank lines and ends with exactly one newline;
`normalise_code` applies that same normalisation to any code (SFT targets use it).

What it does NOT do: it never imports, runs or checks the code (that is
`tritonrl.verify`), and it never edits code beyond whitespace, a few invisible characters
(BOM, zero-width space, NBSP, NUL), tab indentation and HTML entities inside `<code>` tags.

The rules, in the order they apply:

1. Chat leftovers. When the text holds chat-template turn headers (`<|im_start|>assistant`,
   Llama-3, Gemma, DeepSeek, `[INST]`), the answer is the text before the first header if
   there is any (a model that ran on past its turn), else the last assistant turn (a
   decoded prompt + completion). The answer ends at the first end-of-turn token
   (`<|im_end|>`, `<|endoftext|>`, `</s>`, ...) when a ModelNew comes before it (what
   follows is padding or an invented next turn); other special tokens are deleted.
2. Reasoning. Text inside `<think>` / `<thinking>` / `<reasoning>` / `<thought>` is dropped,
   and so is everything before a `</think>` that has no opener (templates such as
   DeepSeek-R1's put the opener in the prompt). Code in the reasoning is NEVER the answer:
   a ModelNew that appears only there is an error, not a fallback, because the contract
   asks for the code after the reasoning, and a reward that accepted drafts left in the
   reasoning would teach the policy to skip its answer. A `<think>` never closed means
   the answer never came: an error, unless a ModelNew stands outside the reasoning.
   Helper code is never borrowed from the reasoning either (see 5).
3. Where code is looked for, by tier; the first tier that yields valid code wins:
   a. Markdown fences (``` or ~~~, three or more, any language tag or none, any
      indentation, fences nested in fences) and `<code>` / `<triton>` / `<python>` /
      `<answer>` tags. A fence still open at the end of the text (generation cut at max
      tokens) is a candidate too.
   b. Lenient fences: an opening fence at the end of a prose line, a closing fence at the
      end of a code line (small models write ``return y```).
   c. Raw text outside fences: lines split at obvious prose; the region holding the last
      `class ModelNew` is trimmed of leading and trailing prose until it parses.
4. Choice: the LAST candidate that defines `class ModelNew`. If it does not parse, its
   syntax error is reported; only a fence or tag cut off at the end of the text may fall
   back to an earlier complete ModelNew (a cut-off block is an accident, a closed one is
   the model's final word). A cut-off block or raw region may lose trailing lines, but
   only whole top-level statements after the `class ModelNew` line, never the class.
5. Split code. When the chosen block uses names it does not define (a kernel written in
   an earlier block, the imports), the top-level statements defining them are taken from
   earlier candidates of the same tier, nearest first and transitively, and placed before
   it in document order. Never taken: blocks that define `class Model` (the reference
   echoed back), and definitions of `Model`, `get_inputs`, `get_init_inputs`. Later
   blocks are never merged (a "fix" written after the ModelNew block is ignored).

Scanning is linear in the input (line splits, `str.find`, regexes without nested
quantifiers); only candidates that mention `class ModelNew`, and at most
`MAX_SUPPORT_CHARS` of helper blocks, are ever given to the parser.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import html
import keyword
import logging
import os
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate

log = logging.getLogger(__name__)

# A kernel module is a few hundred lines; anything bigger is not an answer and parsing it
# would cost seconds.
MAX_CODE_CHARS = 200_000
# Total size of earlier blocks that may be parsed to resolve a split answer.
MAX_SUPPORT_CHARS = 400_000
MAX_SUPPORT_BLOCKS = 16
# Prose-trimming attempts on one raw region or cut-off block.
MAX_TRIM_STEPS = 50

__all__ = ["ExtractError", "extract_code", "normalise_code", "try_extract"]


class ExtractError(ValueError):
    """No usable `class ModelNew` in a completion; the message says what was looked at."""


# ---------------------------------------------------------------- patterns

_MODEL_NEW_LINE = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.M)
_MODEL_LINE = re.compile(r"^[ \t]*class[ \t]+Model\b", re.M)

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
_TAG_OPEN = re.compile(r"<(code|triton|python|answer)(?:[ \t][^<>\n]{0,200})?>", re.I)
_FENCE_HEADS = ("```", "~~~")
_LANG = re.compile(r"[\w+.#-]*")
_INVISIBLE = str.maketrans({"\ufeff": None, "\u200b": None, "\x00": None, "\u00a0": " "})

# A line that cannot be Python at module level: Markdown bullets and emphasis, or a word
# followed by another word ("Here is", "Note: this is", "Explanation:").
_BULLET = re.compile(r"(?:[-*+>|][ \t]|\*\*|\d{1,3}[.)][ \t])")
_WORDS = re.compile(
    r"([A-Za-z][\w'’]*)(?:[ \t]+[A-Za-z]|[:,][ \t]+[A-Za-z][\w'’]*[ \t]+[A-Za-z(\"'’]|:[ \t]*$)"
)
_KEYWORDS = set(keyword.kwlist) | set(keyword.softkwlist) | {"print", "exec"}
_BUILTINS = set(dir(builtins))
# Never borrowed from another block when joining split code: the task's own names.
_TASK_NAMES = {"Model", "get_inputs", "get_init_inputs"}


# ---------------------------------------------------------------- data


@dataclass
class _Block:
    """One place that may hold code: a fence, a tag or a raw region of the answer."""

    text: str  # as found; normalised only when needed (most blocks never are)
    label: str  # for messages: "```python block"
    start: int  # position in the answer, for document order
    closed: bool = True  # False for a fence or tag cut off at the end of the text
    loose: bool = False  # raw text: leading prose may be trimmed too
    tagged: bool = False  # inside <code>-style tags: HTML entities may need unescaping

    @cached_property
    def code(self) -> str:
        """Dedented, no blank edges, ends with one newline."""
        return _normalise(self.text.split("\n"))

    @property
    def has_model_new(self) -> bool:
        return "ModelNew" in self.text and _MODEL_NEW_LINE.search(self.text) is not None


@dataclass
class _Fit:
    code: str | None = None
    tree: ast.Module | None = None
    error: str | None = None


@dataclass
class _Split:
    answer: str
    reasoning: str = ""
    unclosed: bool = False


@dataclass
class _Search:
    """What one tier found, for the final message."""

    blocks: list[_Block] = field(default_factory=list)
    fit: _Fit | None = None


# ---------------------------------------------------------------- public API


def extract_code(completion: str | bytes) -> str:
    """Return the kernel module in `completion`; raise `ExtractError` when there is none."""
    text = _to_text(completion)
    if not text.strip():
        raise ExtractError("the completion is empty")
    split = _split_reasoning(_answer_turn(text))
    whole = _whole_answer(split.answer)
    if whole is not None:
        return whole
    answer = _Text.of(split.answer)
    fences, spans = _scan_fences(answer, answer.fence_lines, lenient=False)
    if not _MODEL_NEW_LINE.search(answer.text):  # nothing to find: only count for the message
        blocks = fences + _tagged_blocks(answer.text)
        raise ExtractError(_explain(split, [_Search(blocks)]))
    searches = []
    for tier, blocks in enumerate(_tiers(answer, fences, spans)):
        searches.append(_Search(blocks, _choose(blocks)))
        fit = searches[-1].fit
        if fit is not None and fit.code is not None:
            return fit.code
        if tier == 1 and any(s.fit for s in searches):
            break  # a broken ModelNew inside fences is the answer: raw text is not searched
    raise ExtractError(_explain(split, searches))


def normalise_code(code: str) -> str:
    """Code as `extract_code` returns it: CRLF and invisible characters fixed, blank edge
    lines dropped, common indentation removed, one final newline."""
    return _normalise(_to_text(code).split("\n"))


def try_extract(completion: str | bytes) -> tuple[str | None, str | None]:
    """`(code, None)` on success, `(None, reason)` otherwise; never raises."""
    try:
        return extract_code(completion), None
    except ExtractError as e:
        return None, str(e)
    except Exception as e:  # a bug here must cost one sample, never a training run
        log.exception("extract_code failed unexpectedly")
        return None, f"internal error in extract_code: {type(e).__name__}: {e}"


# ---------------------------------------------------------------- input and turns


def _to_text(completion: object) -> str:
    if isinstance(completion, (bytes, bytearray, memoryview)):
        completion = bytes(completion).decode("utf-8", errors="replace")
    if not isinstance(completion, str):
        raise ExtractError(f"a completion must be str or bytes, not {type(completion).__name__}")
    text = completion.replace("\r\n", "\n").replace("\r", "\n")
    return text.translate(_INVISIBLE)


def _has_text(segment: str) -> bool:
    return bool(_SPECIAL.sub("", segment).strip())


def _answer_turn(text: str) -> str:
    """The assistant's own text, without chat-template tokens (rule 1)."""
    headers = list(_TURN_HEADER.finditer(text))
    segment = text
    if headers and not _has_text(text[: headers[0].start()]):
        segment = _last_assistant_turn(text, headers)
    elif headers:
        segment = text[: headers[0].start()]
    end = _END_OF_TURN.search(segment)
    if end and _MODEL_NEW_LINE.search(segment, 0, end.start()):
        segment = segment[: end.start()]
    return _SPECIAL.sub("", segment)


def _last_assistant_turn(text: str, headers: list[re.Match]) -> str:
    for i in range(len(headers) - 1, -1, -1):
        role = next(g for g in headers[i].groups() if g)
        if role.lower() in _ASSISTANT_ROLES or role in _ASSISTANT_ROLES:
            stop = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            return text[headers[i].end() : stop]
    return text


def _split_reasoning(text: str) -> _Split:
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
    return _Split("\n".join(answer), "\n".join(reasoning), opened_at is not None)


def _whole_answer(answer: str) -> str | None:
    """Fast path: the answer is nothing but the module (raw code, e.g. `tritonrl verify`)."""
    if len(answer) > MAX_CODE_CHARS or not _MODEL_NEW_LINE.search(answer):
        return None
    code = _normalise(answer.split("\n"))
    tree, _ = _parse(code)
    if tree is None or not _top_level_model_new(tree):
        return None
    return _strip_prose_statements(code, tree)[0]


# ---------------------------------------------------------------- candidates


@dataclass
class _Text:
    """The answer split into lines, with each line's offset, for linear scans."""

    text: str
    lines: list[str]
    offsets: list[int]

    @classmethod
    def of(cls, text: str) -> _Text:
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
        return [k for k, x in enumerate(self.lines) if "ModelNew" in x and _MODEL_NEW_LINE.match(x)]


def _tiers(answer: _Text, fences: list[_Block], spans: list[tuple[int, int]]):
    """Yield the candidate lists of rule 3, lazily: later tiers are rarely needed."""
    tagged = _tagged_blocks(answer.text)
    yield sorted(fences + tagged, key=lambda b: b.start)
    glued = set(answer.glued_fence_lines) - set(answer.fence_lines)
    if glued:  # else the lenient scan would find the same blocks
        lenient, _ = _scan_fences(answer, sorted(glued | set(answer.fence_lines)), lenient=True)
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


def _scan_fences(
    answer: _Text, candidates: list[int], lenient: bool, depth: int = 0
) -> tuple[list[_Block], list[tuple[int, int]]]:
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
                blocks.append(_Block(text, f"```{opener[2]} block", answer.offsets[i], closed))
        if depth < 3 and k > idx:  # fence-like lines inside: nested fences
            blocks += _scan_fences(answer, candidates[idx:k], lenient, depth + 1)[0]
        idx = k + 1
    return blocks, spans


def _tagged_blocks(text: str) -> list[_Block]:
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
            blocks.append(_Block(content, f"<{name}> block", m.start(), close >= 0, tagged=True))
    return blocks


def _next_closer(text: str, name: str, after: int, cache: dict[str, list[int]]) -> int:
    """Start of the first `</name>` at or after `after`, or -1; each name is scanned once."""
    if name not in cache:
        cache[name] = [m.start() for m in re.finditer(rf"</{name}>", text, re.I)]
    positions = cache[name]
    k = bisect.bisect_left(positions, after)
    return positions[k] if k < len(positions) else -1


def _raw_blocks(answer: _Text, fenced: bytearray) -> list[_Block]:
    """Runs of code-looking lines outside fences: the one holding the last ModelNew, and
    the runs before it (nearest first, within the support budget) for split answers."""
    lines = answer.lines
    last = next((k for k in reversed(answer.model_new_lines()) if not fenced[k]), None)
    if last is None:
        return []
    base = _indent(lines[last])

    def breaks(k: int) -> bool:
        return bool(fenced[k]) or (_indent(lines[k]) <= base and _is_prose(lines[k]))

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


def _raw_block(answer: _Text, run: list[int]) -> _Block:
    text = "\n".join(answer.lines[k] for k in run)
    where = f"raw text (lines {run[0] + 1}-{run[-1] + 1} of the answer)"
    return _Block(text, where, answer.offsets[run[0]], loose=True)


def _is_prose(line: str) -> bool:
    """True for a line that cannot be module-level Python (conservative)."""
    s = line.strip()
    if not s:
        return False
    if not s[0].isascii() or _BULLET.match(s):
        return True
    m = _WORDS.match(s)
    return m is not None and m.group(1) not in _KEYWORDS


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _last_model_new_line(lines: list[str]) -> int | None:
    for k in range(len(lines) - 1, -1, -1):
        if _MODEL_NEW_LINE.match(lines[k]):
            return k
    return None


# ---------------------------------------------------------------- normalising and parsing


def _normalise(lines: list[str]) -> str:
    """Drop blank edges, remove the indentation common to every line, end with one newline."""
    lo, hi = 0, len(lines)
    while lo < hi and not lines[lo].strip():
        lo += 1
    while hi > lo and not lines[hi - 1].strip():
        hi -= 1
    kept = lines[lo:hi]
    if not kept:
        return ""
    margins = [line[: _indent(line)] for line in kept if line.strip()]
    prefix = os.path.commonprefix(margins)
    if prefix:
        cut = len(prefix)
        kept = [line[cut:] if line.startswith(prefix) else line.lstrip(" \t") for line in kept]
    return "\n".join(kept) + "\n"


def _parse(code: str) -> tuple[ast.Module | None, SyntaxError | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences and the like
        try:
            return ast.parse(code), None
        except SyntaxError as e:
            return None, e
        except (ValueError, MemoryError, RecursionError) as e:
            return None, SyntaxError(f"cannot parse: {type(e).__name__}: {e}")


def _top_level_model_new(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def _describe(err: SyntaxError, code: str) -> str:
    line_no = err.lineno or 0
    lines = code.split("\n")
    text = lines[line_no - 1].strip() if 0 < line_no <= len(lines) else ""
    where = f"line {line_no}: " if line_no else ""
    shown = f": `{text[:80]}`" if text else ""
    return f"{where}{err.msg}{shown}"


def _variants(block: _Block) -> list[str]:
    """The code, then repaired versions (tab indentation, HTML entities in tags)."""
    variants = [block.code]
    if "\t" in block.code:
        variants.append(_expand_leading_tabs(block.code))
    if block.tagged and "&" in block.code:
        variants.append(html.unescape(variants[-1]))
    return variants


def _expand_leading_tabs(code: str) -> str:
    out = []
    for line in code.split("\n"):
        body = line.lstrip(" \t")
        out.append(line[: len(line) - len(body)].replace("\t", "    ") + body)
    return "\n".join(out)


# ---------------------------------------------------------------- choosing


def _choose(blocks: list[_Block]) -> _Fit | None:
    """Rule 4 then rule 5; None when no block mentions `class ModelNew`."""
    first: _Fit | None = None
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if not block.has_model_new:
            continue
        where = block.label if block.loose else f"{block.label} {i + 1} of {len(blocks)}"
        fit = _fit(block, where)
        if fit.code is not None:
            fit.code = _join(fit.code, fit.tree, blocks[:i])
            return fit
        first = first or fit
        if block.closed:
            break  # a finished block is the model's final answer; no earlier draft
    return first


def _fit(block: _Block, where: str) -> _Fit:
    """Parse the block (with repairs, and trimming where allowed) and check ModelNew."""
    if len(block.text) > MAX_CODE_CHARS:
        return _Fit(
            error=f"the {where} is too large to be a kernel module "
            f"({len(block.text)} characters; the limit is {MAX_CODE_CHARS})"
        )
    first_error = None
    for code in _variants(block):
        tree, err = _parse(code)
        if tree is None and (block.loose or not block.closed):
            code, tree = _trim(code, leading=block.loose)
        if tree is not None and _top_level_model_new(tree):
            if block.loose or not block.closed:
                code, tree = _strip_prose_statements(code, tree)
            return _Fit(code, tree)
        if tree is not None:
            first_error = first_error or "class ModelNew is not defined at the top level"
        elif err is not None:
            first_error = first_error or _describe(err, block.code)
    cut = "" if block.closed else " (the fence is never closed: generation was cut off?)"
    return _Fit(
        error=f"the code defining class ModelNew ({where}{cut}) does not parse: {first_error}"
    )


def _trim(code: str, leading: bool) -> tuple[str, ast.Module | None]:
    """Drop prose before and top-level statements after `class ModelNew` until it parses.

    Leading lines go one error at a time, and only from the start of the region or at
    the class's own indentation; trailing lines go from the start of the top-level
    statement holding the error. The class itself is never cut.
    """
    lines = code.split("\n")
    m = _last_model_new_line(lines)
    if m is None:
        return code, None
    base, s, e = _indent(lines[m]), 0, len(lines)
    for _ in range(MAX_TRIM_STEPS):
        text = _normalise(lines[s:e])
        tree, err = _parse(text)
        if tree is not None:
            return text, tree
        first = s + _leading_blank(lines, s, e)
        at = min(max(first + (err.lineno or 1) - 1, s), e - 1)
        if at < m and leading and (at == first or _indent(lines[at]) <= base):
            s = at + 1
        elif at > m and (cut := _statement_start(lines, m, at, base)) is not None:
            e = cut
        else:
            return code, None
    return code, None


def _leading_blank(lines: list[str], s: int, e: int) -> int:
    k = s
    while k < e and not lines[k].strip():
        k += 1
    return k - s


def _statement_start(lines: list[str], m: int, at: int, base: int) -> int | None:
    """First line of the top-level statement holding line `at`, if it comes after `m`."""
    for k in range(at, m, -1):
        body = lines[k].strip()
        if body and not body.startswith("#") and _indent(lines[k]) <= base:
            return k
    return None


def _strip_prose_statements(code: str, tree: ast.Module) -> tuple[str, ast.Module]:
    """Drop bare words that parsed as code at the edges ("Solution", "Answer: below")."""
    body = list(tree.body)
    while body and _is_bare_word(body[0]):
        body.pop(0)
    while body and _is_bare_word(body[-1]):
        body.pop()
    if len(body) == len(tree.body):
        return code, tree
    lines = code.split("\n")
    text = _normalise(lines[_first_line(body[0]) - 1 : body[-1].end_lineno])
    new_tree, _ = _parse(text)
    return (text, new_tree) if new_tree is not None else (code, tree)


def _is_bare_word(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Name)
    return isinstance(node, ast.AnnAssign) and node.value is None


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


# ---------------------------------------------------------------- split answers


@dataclass
class _Stmt:
    block: int  # index of the source block
    node: ast.stmt
    text: str


def _join(code: str, tree: ast.Module, earlier: list[_Block]) -> str:
    """Prepend the earlier top-level definitions that `code` needs (rule 5)."""
    bound = _bound_anywhere(tree)
    need = _free_names(tree) - bound - _TASK_NAMES
    if not need:
        return code
    chosen = _resolve(need, bound, earlier)
    if not chosen:
        return code
    joined = _assemble(code, tree, chosen)
    new_tree, _ = _parse(joined)
    if new_tree is None or not _top_level_model_new(new_tree):
        log.debug("joined split answer does not parse; keeping the ModelNew block alone")
        return code
    log.debug("joined %d statements from earlier blocks for %s", len(chosen), sorted(need))
    return joined


def _resolve(need: set[str], bound: set[str], earlier: list[_Block]) -> list[_Stmt]:
    """Statements defining `need`, nearest block first, followed transitively."""
    defs: dict[str, _Stmt] = {}
    chosen: dict[int, _Stmt] = {}
    provided, need, budget = set(bound), set(need), MAX_SUPPORT_CHARS
    nearest_first = list(range(len(earlier) - 1, -1, -1))[:MAX_SUPPORT_BLOCKS]
    for j in [None, *nearest_first]:
        if j is not None and len(earlier[j].text) <= budget:
            budget -= len(earlier[j].text)
            for stmt in reversed(_definitions(earlier[j], j)):
                for name in _names_bound_by(stmt.node):
                    defs.setdefault(name, stmt)
        _satisfy(need, defs, chosen, provided)
        if not need:
            break
    return sorted(chosen.values(), key=lambda s: (s.block, s.node.lineno))


def _satisfy(need: set[str], defs: dict, chosen: dict, provided: set[str]) -> None:
    changed = True
    while changed:
        changed = False
        for name in sorted(need):
            stmt = defs.get(name)
            if stmt is None:
                continue
            need.discard(name)
            changed = True
            if id(stmt.node) in chosen:
                continue
            chosen[id(stmt.node)] = stmt
            provided |= _names_bound_by(stmt.node)
            need |= _free_names(stmt.node) - provided - _TASK_NAMES - _bound_anywhere(stmt.node)


def _definitions(block: _Block, index: int) -> list[_Stmt]:
    """Top-level statements of an earlier block that bind names, unless it is the reference."""
    tree, _ = _parse(block.code)
    if tree is None:
        return []
    if any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in tree.body):
        return []  # the reference echoed back: never part of the answer
    lines = block.code.split("\n")
    out = []
    for node in tree.body:
        names = _names_bound_by(node)
        if names and not names & _TASK_NAMES:
            text = "\n".join(lines[_first_line(node) - 1 : node.end_lineno])
            out.append(_Stmt(index, node, text))
    return out


def _assemble(code: str, tree: ast.Module, chosen: list[_Stmt]) -> str:
    """Borrowed statements first (after any `from __future__` of the chosen block)."""
    lines = code.split("\n")
    future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    head = [lines[n.lineno - 1 : n.end_lineno] for n in future]
    skip = {k for n in future for k in range(n.lineno - 1, n.end_lineno)}
    rest = [line for k, line in enumerate(lines) if k not in skip]
    parts = ["\n".join(sum(head, []))] if head else []
    previous = None
    for stmt in chosen:
        is_import = isinstance(stmt.node, (ast.Import, ast.ImportFrom))
        sep = "\n" if (is_import and previous) else "\n\n\n"
        parts.append(("" if not parts else sep) + stmt.text)
        previous = is_import
    borrowed = "".join(parts)
    return _normalise((borrowed + "\n\n\n" + "\n".join(rest)).split("\n"))


def _names_bound_by(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module namespace."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return set()
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {_import_name(a) for a in node.names if a.name != "*"}
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= _names_bound_by(child)
    return names


def _import_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _bound_anywhere(node: ast.AST) -> set[str]:
    """Every name bound anywhere below `node` (an over-approximation of what it defines)."""
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
            names.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, ast.arg):
            names.add(child.arg)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= {_import_name(a) for a in child.names}
        elif isinstance(child, (ast.Global, ast.Nonlocal)):
            names |= set(child.names)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            names.add(child.name)
    return names


def _free_names(node: ast.AST) -> set[str]:
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - _BUILTINS


# ---------------------------------------------------------------- messages


def _explain(split: _Split, searches: list[_Search]) -> str:
    for search in searches:
        if search.fit is not None and search.fit.error:
            return search.fit.error
    if _MODEL_NEW_LINE.search(split.reasoning):
        if split.unclosed:
            return (
                "the completion ends inside an unclosed <think> block: the reasoning never "
                "finished, so there is no answer (generation probably hit max tokens); "
                "a class ModelNew drafted inside the reasoning is not taken as the answer"
            )
        return (
            "class ModelNew appears only inside the <think> reasoning; the answer after "
            "</think> defines none (code in the reasoning is never taken as the answer)"
        )
    if split.unclosed:
        return (
            "the completion ends inside an unclosed <think> block: the reasoning never "
            "finished, so there is no answer (generation probably hit max tokens)"
        )
    return "no code defining class ModelNew found in the completion " + _looked_at(split, searches)


def _looked_at(split: _Split, searches: list[_Search]) -> str:
    blocks = searches[0].blocks if searches else []
    fenced = [b for b in blocks if not b.tagged]
    tagged = [b for b in blocks if b.tagged]
    langs = sorted({b.label.split(" ")[0].strip("`") or "no language" for b in fenced})
    what = f"(looked at {len(fenced)} fenced block{'s' * (len(fenced) != 1)}"
    if langs:
        what += f" [{', '.join(langs)}]"
    what += f", {len(tagged)} tagged block{'s' * (len(tagged) != 1)} and the raw text"
    if split.reasoning:
        what += " outside the reasoning"
    what += ")"
    if _MODEL_LINE.search(split.answer):
        what += "; found class Model (the reference) but the answer must define class ModelNew"
    elif "ModelNew" in split.answer:
        what += "; ModelNew is mentioned but no line starts with `class ModelNew`"
    return what
