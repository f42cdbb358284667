"""Choosing and repairing the answer block (rule 4 of `tritonrl.extract`).

`choose_fit` takes the last candidate defining `class ModelNew`, parses it (with tab and
HTML-entity repairs, and, for raw regions and cut-off blocks, trimming of prose and of
whole top-level statements after the class), and hands the result to `join` for split
code. `whole_answer` is the fast path for an answer that is nothing but the module.

What it does NOT do: it never falls back from a closed block to an earlier draft, never
cuts into the `class ModelNew` itself, and never edits code beyond whitespace, tabs and
HTML entities in tags.
"""

from __future__ import annotations

import ast
import html
from dataclasses import dataclass

from tritonrl.extract.common import (
    MAX_CODE_CHARS,
    MAX_TRIM_STEPS,
    MODEL_NEW_LINE,
    Block,
    first_line,
    indent,
    normalise,
    parse,
    top_level_model_new,
)
from tritonrl.extract.join import join_split


@dataclass
class Fit:
    """What one block gave: the code and its tree, or the error that explains why not."""

    code: str | None = None
    tree: ast.Module | None = None
    error: str | None = None


def whole_answer(answer: str) -> str | None:
    """Fast path: the answer is nothing but the module (raw code, e.g. `tritonrl verify`)."""
    if len(answer) > MAX_CODE_CHARS or not MODEL_NEW_LINE.search(answer):
        return None
    code = normalise(answer.split("\n"))
    tree, _ = parse(code)
    if tree is None or not top_level_model_new(tree):
        return None
    return _strip_prose_statements(code, tree)[0]


def choose_fit(blocks: list[Block]) -> Fit | None:
    """Rule 4 then rule 5; None when no block mentions `class ModelNew`."""
    first: Fit | None = None
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if not block.has_model_new:
            continue
        where = block.label if block.loose else f"{block.label} {i + 1} of {len(blocks)}"
        fit = _fit(block, where)
        if fit.code is not None:
            fit.code = join_split(fit.code, fit.tree, blocks[:i])
            return fit
        first = first or fit
        if block.closed:
            break  # a finished block is the model's final answer; no earlier draft
    return first


def _fit(block: Block, where: str) -> Fit:
    """Parse the block (with repairs, and trimming where allowed) and check ModelNew."""
    if len(block.text) > MAX_CODE_CHARS:
        return Fit(
            error=f"the {where} is too large to be a kernel module "
            f"({len(block.text)} characters; the limit is {MAX_CODE_CHARS})"
        )
    first_error = None
    for code in _variants(block):
        tree, err = parse(code)
        if tree is None and (block.loose or not block.closed):
            code, tree = _trim(code, leading=block.loose)
        if tree is not None and top_level_model_new(tree):
            if block.loose or not block.closed:
                code, tree = _strip_prose_statements(code, tree)
            return Fit(code, tree)
        if tree is not None:
            first_error = first_error or "class ModelNew is not defined at the top level"
        elif err is not None:
            first_error = first_error or _describe(err, block.code)
    cut = "" if block.closed else " (the fence is never closed: generation was cut off?)"
    return Fit(
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
    base, s, e = indent(lines[m]), 0, len(lines)
    for _ in range(MAX_TRIM_STEPS):
        text = normalise(lines[s:e])
        tree, err = parse(text)
        if tree is not None:
            return text, tree
        first = s + _leading_blank(lines, s, e)
        at = min(max(first + (err.lineno or 1) - 1, s), e - 1)
        if at < m and leading and (at == first or indent(lines[at]) <= base):
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
        if body and not body.startswith("#") and indent(lines[k]) <= base:
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
    text = normalise(lines[first_line(body[0]) - 1 : body[-1].end_lineno])
    new_tree, _ = parse(text)
    return (text, new_tree) if new_tree is not None else (code, tree)


def _is_bare_word(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Name)
    return isinstance(node, ast.AnnAssign) and node.value is None


def _last_model_new_line(lines: list[str]) -> int | None:
    for k in range(len(lines) - 1, -1, -1):
        if MODEL_NEW_LINE.match(lines[k]):
            return k
    return None


def _describe(err: SyntaxError, code: str) -> str:
    line_no = err.lineno or 0
    lines = code.split("\n")
    text = lines[line_no - 1].strip() if 0 < line_no <= len(lines) else ""
    where = f"line {line_no}: " if line_no else ""
    shown = f": `{text[:80]}`" if text else ""
    return f"{where}{err.msg}{shown}"


def _variants(block: Block) -> list[str]:
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
