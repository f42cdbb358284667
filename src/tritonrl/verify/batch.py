"""Batch verification from a JSONL file: what `tritonrl verify --batch` reads and writes.

Input, one case per non-blank line:

    {"task": "builtin:level1/1_ReLU", "kernel": "<code or a whole completion>"}
    {"task": "builtin:level1/1_ReLU", "kernel_file": "answers/relu.md"}

A case gives its candidate in exactly one of two fields: `kernel`, the text itself (code
or a whole completion), or `kernel_file`, a path to a file holding it (relative to the
JSONL file's folder unless absolute). `task` is what `tritonrl verify TASK` takes (a
builtin id, or a path relative to the current directory); each distinct task is loaded
once. `read_cases` never stops at a bad line: a line that is not a JSON object, lacks
`task`, gives neither or both kernel fields, has a value that is not a string, names no
single task, names a `kernel_file` that cannot be read, or gives as `kernel` what is the
path of an existing file (one line ending in .py, .md or .txt) becomes a `Case` with
`error` set ("line 3: ..."), reported in its own output row.

Output, one row per case as each finishes (`result_row`): the `VerifyResult` dict with
the caller's reward, `task` and `kernel` (or `kernel_file`) as given, `task_id` the
verifier's id, `index` (0-based case number) and `line` (1-based line number); a bad
case's row has `input_error` instead of a verdict.

What it does NOT do: verify (the caller runs the cases through a `VerifierPool`), open
the output file (the CLI does, refusing to overwrite one without `--force`), or limit
the size of a `kernel_file` (it is read whole; the verifier refuses what is too big).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonrl.tasks import Task, TaskLoadError, load_source
from tritonrl.verify.result import VerifyResult

KERNEL_FIELDS = ("kernel", "kernel_file")
_EXPECTED = "give 'kernel' (the completion text) or 'kernel_file' (a path to a file holding it)"
_PATH_SUFFIXES = (".py", ".md", ".txt")


@dataclass
class Case:
    """One line: `task_spec`, `kernel` and `kernel_file` as given; `task` and `code`
    (what is verified) once read; `error` when the line cannot be verified."""

    index: int
    line: int
    task_spec: Any = None
    kernel: Any = None
    kernel_file: Any = None
    code: str | bytes | None = None
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


def _existing_file(text: str, base: Path) -> Path | None:
    """The file `text` names, relative to `base` or to the current directory, if any."""
    path = Path(text).expanduser()
    for candidate in (base / path, path):
        try:
            if candidate.is_file():
                return candidate.resolve()
        except OSError:
            pass  # a name too long for the file system is no file
    return None


def _path_given_as_kernel(text: str, base: Path) -> str | None:
    """Why `text` (a `kernel` value) looks like a file's path, not a kernel, if it does."""
    name = text.strip()
    if "\n" in name or not name.endswith(_PATH_SUFFIXES):
        return None
    path = _existing_file(name, base)
    if path is None:
        return None
    suggested = name if (base / Path(name).expanduser()).is_file() else str(path)
    return (
        f"'kernel' is the completion text, but {name!r} is the path of a file; to verify "
        f"that file give {json.dumps({'kernel_file': suggested})} (relative to the JSONL "
        "file's folder)"
    )


def _kernel_code(case: Case, obj: dict, base: Path) -> str | None:
    """Set `case.code` from the line's kernel field; the problem with it, if any."""
    given = [k for k in KERNEL_FIELDS if k in obj]
    if not given:
        fields = ", ".join(repr(k) for k in obj) or "no fields"
        return f"neither 'kernel' nor 'kernel_file' given (the line has {fields}); {_EXPECTED}"
    if len(given) == 2:
        return f"both 'kernel' and 'kernel_file' given; give one: {_EXPECTED}"
    field = given[0]
    value = obj[field]
    if not isinstance(value, str):
        return f"{field!r} must be a string, not {type(value).__name__}"
    if field == "kernel":
        case.code = value
        return _path_given_as_kernel(value, base)
    path = base / Path(value).expanduser()
    try:
        case.code = path.read_bytes()
    except OSError as e:
        return f"kernel_file {value!r}: cannot read {path.resolve()}: {e.strerror or e}"
    return None


def _task(case: Case, obj: dict, tasks: dict[str, Task | str]) -> str | None:
    """Set `case.task` from the line's `task`; the problem with it, if any."""
    if "task" not in obj:
        return "missing 'task'"
    if not isinstance(case.task_spec, str):
        return f"'task' must be a string, not {type(case.task_spec).__name__}"
    if case.task_spec not in tasks:
        tasks[case.task_spec] = _load_task(case.task_spec)
    found = tasks[case.task_spec]
    if isinstance(found, str):
        return found
    case.task = found
    return None


def _parse(case: Case, raw: bytes, base: Path, tasks: dict[str, Task | str]) -> str | None:
    """Fill `case` from one input line; the problems with it, if any."""
    try:
        obj = json.loads(raw)
    except ValueError as e:
        return f"not valid JSON ({e})"
    if not isinstance(obj, dict):
        return f"not a JSON object but {type(obj).__name__}"
    case.task_spec = obj.get("task")
    case.kernel, case.kernel_file = obj.get("kernel"), obj.get("kernel_file")
    problems = [p for p in (_task(case, obj, tasks), _kernel_code(case, obj, base)) if p]
    return "; ".join(problems) or None


def read_cases(path: str | Path) -> list[Case]:
    """Every non-blank line of `path` as a Case (raises OSError if it cannot be read)."""
    base = Path(path).resolve().parent
    tasks: dict[str, Task | str] = {}
    cases: list[Case] = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            case = Case(len(cases), line_no)
            problem = _parse(case, raw, base, tasks)
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
    if case.kernel_file is not None:
        row["kernel_file"] = case.kernel_file
    return row
