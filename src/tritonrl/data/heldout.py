"""The tasks a run held out from training, for evaluation; and the prompt files both the
held-out split and RL's prompts are read from.

    tasks = heldout_tasks(run, config)      # prepare's validation split, or SFT's
    rows, tasks, source = training_prompts(run, config)   # what SFT trained on, clean

`prompt_rows` reads a prompts file (JSONL or parquet) whose every row names its
`task_id`; `builtin_tasks` rebuilds the builtin and generated tasks a run's `data.*`
config names; `decontaminate` drops the training tasks equal to a task of
`data.decontaminate_against` (`tritonrl.tasks.decontaminate`), as SFT's examples and RL's
prompts do. `training_prompts` is the training split's prompts and tasks, as RL takes them
(`tritonrl.train.rl.data`) and as `tritonrl eval --tasks train:RUN` answers them.

What it does NOT do: it does not split anything (prepare and SFT wrote the splits) or
verify a task.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tritonrl.config import Config
from tritonrl.data.kernelbook import load_prepared_tasks
from tritonrl.runs import Run, RunError
from tritonrl.tasks import Task, load_tasks
from tritonrl.tasks.decontaminate import checker, describe
from tritonrl.tasks.generator import generate_tasks

log = logging.getLogger(__name__)


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import datasets  # lazy: a heavy optional dependency

        return datasets.Dataset.from_parquet(str(path)).to_list()
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def prompt_rows(path: Path) -> list[dict]:
    """The rows of a prompts file as {"prompt", "task_id"}; a ValueError for a row without
    a task_id or a file without rows."""
    rows = []
    for n, row in enumerate(_rows(path), 1):
        if not row.get("task_id"):
            raise ValueError(
                f"{path} row {n} has no task_id: RL needs each prompt's task to verify its "
                "completions (prepare and sft write one; re-run them with this tritonrl)"
            )
        rows.append({"prompt": row["prompt"], "task_id": str(row["task_id"])})
    if not rows:
        raise ValueError(f"{path}: no prompts in it")
    return rows


def builtin_tasks(config: Config) -> list[Task]:
    """The builtin and generated tasks the run's `data.*` config names."""
    data = config.data
    tasks = list(load_tasks(data.tasks).tasks) if data.tasks else []
    if data.generated_tasks:
        tasks += generate_tasks(data.generated_tasks, seed=data.generator_seed)
    return tasks


def decontaminate(tasks: list[Task], config: Config, what: str) -> list[Task]:
    """`tasks` less those equal to a task of `data.decontaminate_against` in
    `data.decontaminate_form`; a warning says how many `what` lost and which. A ValueError
    names the key when one of its specs cannot be loaded."""
    data = config.data
    check = checker(data.decontaminate_against, data.decontaminate_form,
                    "data.decontaminate_against")  # fmt: skip
    if check is None:
        return tasks
    kept, matches = [], []
    for task in tasks:
        found = check.matches(task)
        matches += found
        if not found:
            kept.append(task)
    if matches:
        log.warning(
            "%s: dropped %s, equal to a task of data.decontaminate_against %s (%s form)",
            what, describe(matches), data.decontaminate_against, data.decontaminate_form,
        )  # fmt: skip
    return kept


def heldout_tasks(run: Run, config: Config) -> list[Task]:
    """The tasks of the prompts `run` held out from training (prepare's validation split,
    or the one SFT held out of the builtin rows), for evaluation."""
    if run.has_artifact("prepare", "validation") and run.has_artifact("prepare", "tasks"):
        path = run.artifact("prepare", "validation")
        tasks = load_prepared_tasks(run.artifact("prepare", "tasks"))
    elif run.has_artifact("sft", "validation_data"):
        path, tasks = run.artifact("sft", "validation_data"), builtin_tasks(config)
    else:
        raise RunError(
            f"run {run.path} records no held-out prompts (neither prepare/validation nor "
            "sft/validation_data): evaluate it on other tasks (--tasks builtin:all, gen:N)"
        )
    by_id = {t.id: t for t in tasks}
    ids = list(dict.fromkeys(r["task_id"] for r in prompt_rows(path)))
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} held-out task id(s) have no task, e.g. {missing[0]!r}"
        )
    return [by_id[i] for i in ids]


def training_prompts(run: Run, config: Config) -> tuple[list[dict], dict[str, Task], str]:
    """(prompt rows, {task id: Task} of those rows, source) of `run`'s training split:
    prepare's `train` file when SFT took prepare's files, else SFT's `train_data` built
    from `data.tasks` and the generator (source "prepare" or "builtin"); rows whose task
    equals one of `data.decontaminate_against` are left out."""
    if run.has_artifact("prepare", "train") and run.has_artifact("prepare", "tasks"):
        train, source = run.artifact("prepare", "train"), "prepare"
        tasks = load_prepared_tasks(run.artifact("prepare", "tasks"))
    elif run.has_artifact("sft", "train_data"):
        train, source = run.artifact("sft", "train_data"), "builtin"
        tasks = builtin_tasks(config)
    else:
        raise RunError(
            f"run {run.path} records no training prompts (neither prepare/train nor "
            "sft/train_data): RL takes the prompts SFT trained on"
        )
    rows = prompt_rows(train)
    by_id = {t.id: t for t in tasks}
    missing = sorted({r["task_id"] for r in rows} - set(by_id))
    if missing:
        raise ValueError(
            f"{train}: {len(missing)} task id(s) have no task to verify against, e.g. "
            f"{missing[0]!r} (the run's data.* config must be the one SFT used)"
        )
    used = list(dict.fromkeys(r["task_id"] for r in rows))
    clean = {t.id for t in decontaminate([by_id[i] for i in used], config, "training prompts")}
    rows = [r for r in rows if r["task_id"] in clean]
    if not rows:
        raise ValueError(
            f"{train}: every prompt's task equals a task of data.decontaminate_against "
            f"{config.data.decontaminate_against}; train on other tasks or change that key"
        )
    log.info("training prompts: %d from %s (%s)", len(rows), run.relpath(train), source)
    return rows, {i: by_id[i] for i in dict.fromkeys(r["task_id"] for r in rows)}, source
