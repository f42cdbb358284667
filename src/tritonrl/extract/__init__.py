"""Completion text -> kernel code: find the `class ModelNew` that a model wrote.

`extract_code(completion)` returns the source of the candidate module, or raises
`ExtractError` saying what was looked at and why nothing fits; `try_extract` returns
`(code, error)` and never raises. Both accept `str` or `bytes` (decoded as UTF-8 with
replacement). The result always parses with `ast.parse`, defines a top-level
`class ModelNew`, has no leading blank lines and ends with exactly one newline;
`normalise_code` applies that same normalisation to any code (SFT targets use it).
`kernel_key(completion)` is what two answers holding the same kernel share (`key`; multi-turn
RL and `eval --turns` find answers that repeat an earlier one with it).

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

The package, in the order a completion goes through it: `turns` (chat-template tokens and
`<think>` reasoning, rules 1-2), `scan` (fences, tags and raw regions, rule 3), `choose`
(picking and repairing the block, rule 4), `join` (borrowing helper definitions, rule 5),
`messages` (why nothing fits); `common` holds the block type, limits and parsing helpers.
"""

from __future__ import annotations

import logging

from tritonrl.extract.choose import choose_fit, whole_answer

# The limits stay importable from here, as they were from the single-module version.
from tritonrl.extract.common import MAX_CODE_CHARS as MAX_CODE_CHARS
from tritonrl.extract.common import MAX_SUPPORT_BLOCKS as MAX_SUPPORT_BLOCKS
from tritonrl.extract.common import MAX_SUPPORT_CHARS as MAX_SUPPORT_CHARS
from tritonrl.extract.common import MAX_TRIM_STEPS as MAX_TRIM_STEPS
from tritonrl.extract.common import MODEL_NEW_LINE, ExtractError, normalise, to_text
from tritonrl.extract.key import code_key
from tritonrl.extract.messages import Search, explain
from tritonrl.extract.scan import Text, scan_fences, tagged_blocks, tiers
from tritonrl.extract.turns import answer_turn, split_reasoning

log = logging.getLogger(__name__)

__all__ = ["ExtractError", "extract_code", "normalise_code", "try_extract"]


def extract_code(completion: str | bytes) -> str:
    """Return the kernel module in `completion`; raise `ExtractError` when there is none."""
    text = to_text(completion)
    if not text.strip():
        raise ExtractError("the completion is empty")
    split = split_reasoning(answer_turn(text))
    whole = whole_answer(split.answer)
    if whole is not None:
        return whole
    answer = Text.of(split.answer)
    fences, spans = scan_fences(answer, answer.fence_lines, lenient=False)
    if not MODEL_NEW_LINE.search(answer.text):  # nothing to find: only count for the message
        blocks = fences + tagged_blocks(answer.text)
        raise ExtractError(explain(split, [Search(blocks)]))
    searches = []
    for tier, blocks in enumerate(tiers(answer, fences, spans)):
        searches.append(Search(blocks, choose_fit(blocks)))
        fit = searches[-1].fit
        if fit is not None and fit.code is not None:
            return fit.code
        if tier == 1 and any(s.fit for s in searches):
            break  # a broken ModelNew inside fences is the answer: raw text is not searched
    raise ExtractError(explain(split, searches))


def normalise_code(code: str) -> str:
    """Code as `extract_code` returns it: CRLF and invisible characters fixed, blank edge
    lines dropped, common indentation removed, one final newline."""
    return normalise(to_text(code).split("\n"))


def kernel_key(completion: str | bytes) -> str | None:
    """What two answers holding the same kernel share: the extracted code's syntax tree
    with comments, formatting, docstrings and the names it binds itself set aside
    (`key.code_key`; extracted code always parses); None for an answer with no code."""
    code, _ = try_extract(completion)
    return None if code is None else code_key(code)


def try_extract(completion: str | bytes) -> tuple[str | None, str | None]:
    """`(code, None)` on success, `(None, reason)` otherwise; never raises."""
    try:
        return extract_code(completion), None
    except ExtractError as e:
        return None, str(e)
    except Exception as e:  # a bug here must cost one sample, never a training run
        log.exception("extract_code failed unexpectedly")
        return None, f"internal error in extract_code: {type(e).__name__}: {e}"
