"""The tasks a run held out from training, for evaluation; and the prompt files both the
held-out split and RL's prompts are read from.

    source = sft_source(run, config)        # "prepare", "distill" or "builtin"
    tasks = heldout_tasks(run, config)      # prepare's validation split, or SFT's
    rows, tasks, source = training_prompts(run, config)   # what SFT trained on, clean

`sft_source` is where a run's SFT examples come from, one answer for SFT, RL and
evaluation: the source its sft stage recorded using, else `data.sft_source` with `auto`
resolved (prepare's files when the run records them, else distill's, else the builtin
suite + generator). prepare's examples are its `train`/`validation` files and tasks its
`tasks.jsonl`; distill's and the builtin ones are the `sft/train_data` and
`sft/validation_data` SFT split them into, their tasks `distill/tasks` or the ones
`data.*` names. `prompt_rows` reads a prompts file (JSONL or parquet) whose every row
names its `task_id`; `builtin_tasks` rebuilds the builtin and generated tasks a run's
`data.*` config names; `distill_tasks` loads the tasks distill asked; `decontaminate`
drops the training tasks equal to a task of `data.decontaminate_against`
(`tritonrl.tasks.decontaminate`), as SFT's examples and RL's prompts do.
`training_prompts` is the training split's prompts and tasks, as RL takes them
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
from tritonrl.tasks import Task, TaskLoadError, load_tasks
from tritonrl.tasks.decontaminate import checker, describe
from tritonrl.tasks.generator import generate_tasks

log = logging.getLogger(__name__)

SOURCES = ("prepare", "distill", "builtin")  # data.sft_source, auto resolved
# source -> (stage, train artifact, validation artifact) of the files SFT trains on
FILES = {
    "prepare": ("prepare", "train", "validation"),
    "distill": ("sft", "train_data", "validation_data"),
    "builtin": ("sft", "train_data", "validation_data"),
}


def read_rows(path: Path) -> list[dict]:
    """The rows of a JSONL or parquet file, as they are."""
    if path.suffix == ".parquet":
        import datasets  # lazy: a heavy optional dependency

        return datasets.Dataset.from_parquet(str(path)).to_list()
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def prompt_rows(path: Path) -> list[dict]:
    """The rows of a prompts file as {"prompt", "task_id"}; a ValueError for a row without
    a task_id or a file without rows."""
    rows = []
    for n, row in enumerate(read_rows(path), 1):
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


def sft_source(run: Run, config: Config) -> str:
    """Where `run`'s SFT examples come from: "prepare", "distill" or "builtin" (see the
    module docstring). The source the sft stage recorded (`data_source`) comes first, so
    that RL and evaluation follow what SFT trained on, whatever the run recorded since."""
    used = run.stages.get("sft", {}).get("info", {}).get("data_source")
    if used in SOURCES:
        return used
    if config.data.sft_source != "auto":
        return config.data.sft_source
    return next((s for s in ("prepare", "distill") if run.has_artifact(s, "train")), "builtin")


def distill_tasks(run: Run) -> list[Task]:
    """The tasks `run`'s distill stage asked (`distill/tasks`). A distill recorded without
    that file (an older tritonrl) has its rows' task ids loaded as task specs, which the
    builtin suite's ids are."""
    if run.has_artifact("distill", "tasks"):
        return load_prepared_tasks(run.artifact("distill", "tasks"))
    train = run.artifact("distill", "train")
    tasks = []
    for task_id in dict.fromkeys(r["task_id"] for r in prompt_rows(train)):
        try:
            found = [t for t in load_tasks(task_id).tasks if t.id == task_id]
        except TaskLoadError:
            found = []
        if not found:
            raise ValueError(
                f"run {run.path} records no distill/tasks and task id {task_id!r} of {train} "
                "is no task spec: distill again with this tritonrl (it records the tasks)"
            )
        tasks.append(found[0])
    return tasks


def source_tasks(run: Run, config: Config, source: str) -> list[Task]:
    """The tasks the examples of `source` (`sft_source`) name by `task_id`."""
    if source == "prepare":
        return load_prepared_tasks(run.artifact("prepare", "tasks"))
    return distill_tasks(run) if source == "distill" else builtin_tasks(config)


def heldout_tasks(run: Run, config: Config) -> list[Task]:
    """The tasks of the prompts `run` held out from training (prepare's validation split,
    or the one SFT held out of the distilled or builtin rows), for evaluation."""
    source = sft_source(run, config)
    stage, _, name = FILES[source]
    if not run.has_artifact(stage, name):
        raise RunError(
            f"run {run.path} records no held-out prompts ({stage}/{name}, of SFT's {source} "
            "examples): evaluate it on other tasks (--tasks builtin:all, gen:N)"
        )
    path, tasks = run.artifact(stage, name), source_tasks(run, config, source)
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
    the file SFT trained on (`sft_source`: prepare's `train`, or the `sft/train_data` SFT
    built from distill's rows or from `data.tasks` and the generator), each row's task
    loaded from where that source keeps it; rows whose task equals one of
    `data.decontaminate_against` are left out."""
    source = sft_source(run, config)
    stage, name, _ = FILES[source]
    if not run.has_artifact(stage, name):
        raise RunError(
            f"run {run.path} records no training prompts ({stage}/{name}, of SFT's {source} "
            "examples): RL takes the prompts SFT trained on; run sft first"
        )
    train = run.artifact(stage, name)
    rows = prompt_rows(train)
    by_id = {t.id: t for t in source_tasks(run, config, source)}
    missing = sorted({r["task_id"] for r in rows} - set(by_id))
    if missing:
        where = {"prepare": "prepare/tasks", "distill": "distill/tasks"}.get(
            source, "the run's data.* config (it must be the one SFT used)")  # fmt: skip
        raise ValueError(
            f"{train}: {len(missing)} task id(s) have no task to verify against in {where}, "
            f"e.g. {missing[0]!r}"
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
