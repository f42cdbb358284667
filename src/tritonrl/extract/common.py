"""Shared pieces of `tritonrl.extract`: the error, the size limits, the `Block` that
scanning yields, and the whitespace normalisation and parsing every stage relies on.

`to_text` decodes and cleans the input (CRLF, BOM, zero-width space, NBSP, NUL);
`normalise` drops blank edge lines and common indentation; `parse` wraps `ast.parse` so
that a bad candidate yields an error value instead of an exception.

What it does NOT do: no searching or choosing (see `scan` and `choose`), and nothing here
runs code: `ast.parse` only.
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from dataclasses import dataclass
from functools import cached_property

from tritonrl.astlock import AST_LOCK

# A kernel module is a few hundred lines; anything bigger is not an answer and parsing it
# would cost seconds.
MAX_CODE_CHARS = 200_000
# Total size of earlier blocks that may be parsed to resolve a split answer.
MAX_SUPPORT_CHARS = 400_000
MAX_SUPPORT_BLOCKS = 16
# Prose-trimming attempts on one raw region or cut-off block.
MAX_TRIM_STEPS = 50


class ExtractError(ValueError):
    """No usable `class ModelNew` in a completion; the message says what was looked at."""


MODEL_NEW_LINE = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.M)
MODEL_LINE = re.compile(r"^[ \t]*class[ \t]+Model\b", re.M)
_INVISIBLE = str.maketrans({"\ufeff": None, "\u200b": None, "\x00": None, "\u00a0": " "})


@dataclass
class Block:
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
        return normalise(self.text.split("\n"))

    @property
    def has_model_new(self) -> bool:
        return "ModelNew" in self.text and MODEL_NEW_LINE.search(self.text) is not None


def to_text(completion: object) -> str:
    if isinstance(completion, (bytes, bytearray, memoryview)):
        completion = bytes(completion).decode("utf-8", errors="replace")
    if not isinstance(completion, str):
        raise ExtractError(f"a completion must be str or bytes, not {type(completion).__name__}")
    text = completion.replace("\r\n", "\n").replace("\r", "\n")
    return text.translate(_INVISIBLE)


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def normalise(lines: list[str]) -> str:
    """Drop blank edges, remove the indentation common to every line, end with one newline."""
    lo, hi = 0, len(lines)
    while lo < hi and not lines[lo].strip():
        lo += 1
    while hi > lo and not lines[hi - 1].strip():
        hi -= 1
    kept = lines[lo:hi]
    if not kept:
        return ""
    margins = [line[: indent(line)] for line in kept if line.strip()]
    prefix = os.path.commonprefix(margins)
    if prefix:
        cut = len(prefix)
        kept = [line[cut:] if line.startswith(prefix) else line.lstrip(" \t") for line in kept]
    return "\n".join(kept) + "\n"


def parse(code: str) -> tuple[ast.Module | None, SyntaxError | None]:
    try:
        return _parse_once(code)
    except SystemError as e:
        # CPython 3.11 (gh-106905): "AST constructor recursion depth mismatch" when
        # another thread parsed at the same time, or after a parse that hit the recursion
        # limit; the next parse counts afresh.
        if "recursion depth mismatch" not in str(e):
            raise
        return _parse_once(code)


def _parse_once(code: str) -> tuple[ast.Module | None, SyntaxError | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences and the like
        try:
            with AST_LOCK:
                return ast.parse(code), None
        except SyntaxError as e:
            return None, e
        except (ValueError, MemoryError, RecursionError) as e:
            return None, SyntaxError(f"cannot parse: {type(e).__name__}: {e}")


def top_level_model_new(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])
