"""Batch verification from a JSONL file: what `tritonrl verify --batch` reads and writes.

Input, one case per non-blank line:

    {"task": "builtin:level1/1_ReLU", "kernel": "<code or a whole completion>"}

`task` is what the single form accepts (a builtin id or a file path, relative to the
current directory); tasks are loaded once per distinct spec. `read_cases` never stops
at a bad line: a line that is not a JSON object, lacks `task` or `kernel`, has a value
that is not a string, or names no single task becomes a `Case` with `error` set
("line 3: ..."), reported in its own output row.

Output, one row per case as each finishes: the `VerifyResult` dict, with `task` and
`kernel` as given, `task_id` the verifier's id, `index` (0-based case number) and
`line` (1-based line number); a bad case's row has `input_error` instead of a verdict.

What it does NOT do: verify (the caller runs the cases through a `VerifierPool`) or
open the output file (the CLI does, refusing to overwrite one without `--force`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonrl.tasks import Task, TaskLoadError, load_source
from tritonrl.verify.result import VerifyResult


@dataclass
class Case:
    index: int
    line: int
    task_spec: Any = None
    kernel: Any = None
    task: Task | None = None
    error: str | None = None


def _load_task(spec: str) -> Task | str:
    """The one task `spec` names, or why it names none."""
    try:
        report = load_source(spec)
    except TaskLoadError as e:
        return f"unknown task {spec!r}: {e.reason}"
    except Exception as e:  # a task file that fails to load is this line's problem
        return f"task {spec!r} cannot be loaded: {type(e).__name__}: {e}"
    if len(report.tasks) != 1:
        return f"task {spec!r} names {len(report.tasks)} tasks, not one"
    return report.tasks[0]


def _parse(case: Case, raw: bytes, tasks: dict[str, Task | str]) -> str | None:
    """Fill `case` from one input line; the problem with it, if any."""
    try:
        obj = json.loads(raw)
    except ValueError as e:
        return f"not valid JSON ({e})"
    if not isinstance(obj, dict):
        return f"not a JSON object but {type(obj).__name__}"
    case.task_spec, case.kernel = obj.get("task"), obj.get("kernel")
    missing = [k for k in ("task", "kernel") if k not in obj]
    if missing:
        return "missing " + " and ".join(repr(k) for k in missing)
    wrong = [k for k in ("task", "kernel") if not isinstance(obj[k], str)]
    if wrong:
        return " and ".join(repr(k) for k in wrong) + " must be a string"
    if case.task_spec not in tasks:
        tasks[case.task_spec] = _load_task(case.task_spec)
    found = tasks[case.task_spec]
    if isinstance(found, str):
        return found
    case.task = found
    return None


def read_cases(path: str | Path) -> list[Case]:
    """Every non-blank line of `path` as a Case (raises OSError if it cannot be read)."""
    tasks: dict[str, Task | str] = {}
    cases: list[Case] = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            case = Case(len(cases), line_no)
            problem = _parse(case, raw, tasks)
            if problem:
                case.error = f"line {line_no}: {problem}"
            cases.append(case)
    return cases


def result_row(
    case: Case, result: VerifyResult | None, reward: float | None = None
) -> dict[str, Any]:
    """The output row of a case: its verdict (and `reward`, the caller's scheme's), or
    its input error."""
    row: dict[str, Any] = {}
    if result is not None:
        row = result.to_dict()
        row["task_id"] = row.pop("task")
        row["reward"] = reward
    else:
        row["input_error"] = case.error
    row.update(index=case.index, line=case.line, task=case.task_spec, kernel=case.kernel)
    return row
