"""Why no code was found: the `ExtractError` message of `tritonrl.extract`.

`explain` prefers the chosen block's own error (a syntax error, a ModelNew not at the top
level), then a ModelNew seen only in the reasoning or an unclosed `<think>`, and otherwise
says what was looked at (fences by language, tags, raw text).

What it does NOT do: it never searches again; it only reports on what the tiers found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonrl.extract.choose import Fit
from tritonrl.extract.common import MODEL_LINE, MODEL_NEW_LINE, Block
from tritonrl.extract.turns import Split


@dataclass
class Search:
    """What one tier found, for the final message."""

    blocks: list[Block] = field(default_factory=list)
    fit: Fit | None = None


def explain(split: Split, searches: list[Search]) -> str:
    for search in searches:
        if search.fit is not None and search.fit.error:
            return search.fit.error
    if MODEL_NEW_LINE.search(split.reasoning):
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


def _looked_at(split: Split, searches: list[Search]) -> str:
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
    if MODEL_LINE.search(split.answer):
        what += "; found class Model (the reference) but the answer must define class ModelNew"
    elif "ModelNew" in split.answer:
        what += "; ModelNew is mentioned but no line starts with `class ModelNew`"
    return what
