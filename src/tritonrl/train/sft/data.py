"""SFT examples: built from tasks, written and read as JSONL, found through the manifest.

An example is one line `{"prompt": [messages], "completion": [assistant message]}` (TRL's
conversational prompt/completion format, made by `tritonrl.data.prompts.sft_example`),
optionally with a `task_id`. The SFT stage takes its examples from the `prepare` stage's
`prepare/train` and `prepare/validation` artifacts (KernelBook) when the manifest records
them, and otherwise builds them here from tasks with solutions: the builtin suite plus
generator tasks (`data.tasks`, `data.generated_tasks`) less those equal to a task of
`data.decontaminate_against` (`tritonrl.data.heldout.decontaminate`), split by task into
train and validation (tasks equal in `data.decontaminate_form` in one split), and records
the files it wrote as `sft/train_data` and `sft/validation_data`.

Note that the builtin suite is also what `tritonrl eval` measures by default: a model
SFT'd on builtin solutions must be evaluated on the validation split's tasks (their ids
are in `sft/validation_data`) or on other tasks, or its scores are contaminated.

What it does NOT do: it does not tokenize or truncate (the trainer does), download
KernelBook (`tritonrl.data.kernelbook`), or check solutions with the verifier (the builtin
and generated solutions are checked by their own tests).
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

from tritonrl.config import Config
from tritonrl.data.heldout import builtin_tasks, decontaminate
from tritonrl.data.kernelbook import split_groups
from tritonrl.data.prompts import prompt_settings, sft_example
from tritonrl.runs import Run, atomic_write_bytes
from tritonrl.tasks import Task

log = logging.getLogger(__name__)

COLUMNS = ("prompt", "completion")
ROLES = ("system", "user", "assistant")


def training_tasks(config: Config) -> list[Task]:
    """`data.tasks` then `data.generated_tasks` generator tasks, less those equal to a task
    of `data.decontaminate_against`."""
    return decontaminate(builtin_tasks(config), config, "SFT examples")


def builtin_examples(config: Config, tasks: list[Task] | None = None) -> list[dict]:
    """One example per task with a solution (`tasks`, by default `training_tasks`), prompts
    built with the verifier's policy."""
    data = config.data
    tasks = training_tasks(config) if tasks is None else tasks
    rows = []
    for task in tasks:
        if not task.solution:
            log.info("task %s has no solution; not an SFT example", task.id)
            continue
        kw = prompt_settings(config, task.id)
        rows.append({"task_id": task.id, **sft_example(task.source, task.solution, **kw)})
    if not rows:
        raise ValueError(
            f"no SFT examples: none of data.tasks {data.tasks} and data.generated_tasks "
            f"{data.generated_tasks} has a solution and differs from every task of "
            f"data.decontaminate_against {data.decontaminate_against}"
        )
    return rows


def split_rows(
    rows: list[dict], fraction: float, seed: int, groups: dict[str, str] | None = None
) -> tuple[list[dict], list[dict]]:
    """A seeded split; at least one validation row when `fraction` > 0 and there are two.
    With `groups` (task id -> key, `tritonrl.data.kernelbook.split_groups`) the rows of
    one key land in one split: whole groups are taken in the seeded order, one that would
    overshoot the validation share skipped."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = round(len(rows) * fraction)
    if fraction > 0 and len(rows) >= 2:
        n_val = max(1, n_val)
    n_val = min(n_val, len(rows) - 1)
    members: dict[tuple, list[int]] = {}
    for i in order:  # groups in the order of their first row
        task_id = rows[i].get("task_id")
        key = ("group", groups[task_id]) if groups and task_id in groups else ("row", i)
        members.setdefault(key, []).append(i)
    val: list[int] = []
    for group in members.values():
        if len(val) + len(group) <= n_val:
            val += group
    chosen = set(val)
    train = [i for i in range(len(rows)) if i not in chosen]
    return [rows[i] for i in train], [rows[i] for i in sorted(val)]


def write_jsonl(path: str | Path, rows: list[dict]) -> Path:
    """Write `rows` as JSONL, atomically."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    atomic_write_bytes(path, text.encode())
    return Path(path)


def _check_messages(value, where: str, field: str) -> None:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: {field!r} must be a non-empty list of chat messages")
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ValueError(f"{where}: {field!r} holds a message without a role in {ROLES}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"{where}: {field!r} holds a message whose content is not text")


def check_row(row, where: str) -> dict:
    """`row` reduced to prompt/completion, or a ValueError naming `where` and the fault."""
    if not isinstance(row, dict) or any(c not in row for c in COLUMNS):
        raise ValueError(
            f"{where}: an SFT example needs 'prompt' and 'completion' (conversational "
            "lists of messages, as tritonrl.data.prompts.sft_example writes)"
        )
    _check_messages(row["prompt"], where, "prompt")
    _check_messages(row["completion"], where, "completion")
    if row["completion"][-1]["role"] != "assistant":
        raise ValueError(f"{where}: the completion must end with an assistant message")
    return {c: row[c] for c in COLUMNS}


def read_examples(path: str | Path) -> list[dict]:
    """Prompt/completion rows of a JSONL or parquet file, each checked."""
    path = Path(path)
    if path.suffix == ".parquet":
        import datasets

        raw = datasets.Dataset.from_parquet(str(path)).to_list()
        rows = [check_row(r, f"{path} row {i}") for i, r in enumerate(raw)]
    else:
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
                rows.append(check_row(row, f"{path}:{n}"))
    if not rows:
        raise ValueError(f"{path}: no SFT examples in it")
    return rows


def _recorded(run: Run, stage: str, train: str, val: str) -> tuple[Path, Path | None]:
    """The train file (required) and validation file (optional) a stage recorded."""
    return run.artifact(stage, train), (
        run.artifact(stage, val) if run.has_artifact(stage, val) else None
    )


def sft_data_files(run: Run, config: Config) -> tuple[Path, Path | None, str]:
    """(train file, validation file or None, source) for the SFT stage of `run`.

    `data.sft_source` auto takes the prepare stage's files when the manifest records
    them, else builds from tasks; `prepare` insists on them (a clear error names the
    missing artifact); `builtin` always builds. Files built here are recorded as
    `sft/train_data` and `sft/validation_data` (reused when already recorded).
    """
    source = config.data.sft_source
    if source == "prepare" or (source == "auto" and run.has_artifact("prepare", "train")):
        return (*_recorded(run, "prepare", "train", "validation"), "prepare")
    if run.has_artifact("sft", "train_data"):
        return (*_recorded(run, "sft", "train_data", "validation_data"), "builtin")
    tasks = training_tasks(config)
    rows = builtin_examples(config, tasks)
    # tasks equal in data.decontaminate_form stay in one split: no validation task has a
    # copy in training
    groups = split_groups(tasks, config.data.decontaminate_form)
    train_rows, val_rows = split_rows(
        rows, config.data.validation_fraction, config.data.generator_seed, groups
    )
    data_dir = run.stage_dir("sft") / "data"
    data_dir.mkdir(exist_ok=True)
    train = write_jsonl(data_dir / "train.jsonl", train_rows)
    run.add_artifact("sft", "train_data", train)
    val = None
    if val_rows:
        val = write_jsonl(data_dir / "validation.jsonl", val_rows)
        run.add_artifact("sft", "validation_data", val)
    log.info("SFT examples from tasks: %d train, %d validation", len(train_rows), len(val_rows))
    return train, val, "builtin"


def load_datasets(train: Path, val: Path | None, config: Config):
    """`datasets.Dataset`s (prompt/completion only) for the trainer; without a validation
    file, the train rows are split by `data.validation_fraction`."""
    import datasets

    train_rows = read_examples(train)
    val_rows = read_examples(val) if val is not None else []
    if val is None and config.data.validation_fraction > 0:
        train_rows, val_rows = split_rows(
            train_rows, config.data.validation_fraction, config.data.generator_seed
        )
    train_ds = datasets.Dataset.from_list(train_rows)
    val_ds = datasets.Dataset.from_list(val_rows) if val_rows else None
    return train_ds, val_ds
