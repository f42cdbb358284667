"""RL prompts and their tasks, found through the run's manifest: the data SFT trained on.

    prompts, tasks, source = rl_prompts(run, config)
    # prompts: datasets.Dataset with "prompt" (chat messages) and "task_id" columns
    # tasks:   {task id: Task}, for the reward (`make_trl_reward(tasks)`)

The RL stage draws its prompts from the same training file the SFT stage used
(`sft_data.sft_data_files`): `prepare/train` when SFT took prepare's files (the tasks
then come from `prepare/tasks`), else the `sft/train_data` SFT built from the builtin
suite and generator (the tasks are rebuilt from `data.tasks` and `data.generated_tasks`,
which the run's recorded config fixes). Every row keeps its `task_id`, so the reward knows
which task's reference to verify a completion against; a row without one, or naming a
task that cannot be found, is an error that says so.

What it does NOT do: no curriculum or level mix (not built yet), no validation prompts
(RL trains on the training split only; evaluate on the validation tasks).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tritonrl.config import Config
from tritonrl.runs import Run, RunError
from tritonrl.tasks import Task

log = logging.getLogger(__name__)


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import datasets

        return datasets.Dataset.from_parquet(str(path)).to_list()
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _prompt_rows(path: Path) -> list[dict]:
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


def _builtin_tasks(config: Config) -> list[Task]:
    from tritonrl.tasks import load_tasks
    from tritonrl.tasks.generator import generate_tasks

    data = config.data
    tasks = list(load_tasks(data.tasks).tasks) if data.tasks else []
    if data.generated_tasks:
        tasks += generate_tasks(data.generated_tasks, seed=data.generator_seed)
    return tasks


def rl_prompts(run: Run, config: Config):
    """(prompts Dataset, {task id: Task}, source) for the RL stage of `run`."""
    import datasets

    if run.has_artifact("prepare", "train") and run.has_artifact("prepare", "tasks"):
        from tritonrl.data.kernelbook import load_prepared_tasks

        train, source = run.artifact("prepare", "train"), "prepare"
        tasks = load_prepared_tasks(run.artifact("prepare", "tasks"))
    elif run.has_artifact("sft", "train_data"):
        train, source = run.artifact("sft", "train_data"), "builtin"
        tasks = _builtin_tasks(config)
    else:
        raise RunError(
            f"run {run.path} records no training prompts (neither prepare/train nor "
            "sft/train_data): RL takes the prompts SFT trained on"
        )
    rows = _prompt_rows(train)
    by_id = {t.id: t for t in tasks}
    missing = sorted({r["task_id"] for r in rows} - set(by_id))
    if missing:
        raise ValueError(
            f"{train}: {len(missing)} task id(s) have no task to verify against, e.g. "
            f"{missing[0]!r} (the run's data.* config must be the one SFT used)"
        )
    log.info("RL prompts: %d from %s (%s)", len(rows), run.relpath(train), source)
    used = {r["task_id"] for r in rows}
    return datasets.Dataset.from_list(rows), {k: by_id[k] for k in used}, source


def heldout_tasks(run: Run, config: Config) -> list[Task]:
    """The tasks of the prompts `run` held out from training (prepare's validation split,
    or the one SFT held out of the builtin rows), for evaluation."""
    if run.has_artifact("prepare", "validation") and run.has_artifact("prepare", "tasks"):
        from tritonrl.data.kernelbook import load_prepared_tasks

        path = run.artifact("prepare", "validation")
        tasks = load_prepared_tasks(run.artifact("prepare", "tasks"))
    elif run.has_artifact("sft", "validation_data"):
        path, tasks = run.artifact("sft", "validation_data"), _builtin_tasks(config)
    else:
        raise RunError(
            f"run {run.path} records no held-out prompts (neither prepare/validation nor "
            "sft/validation_data): evaluate it on other tasks (--tasks builtin:all, gen:N)"
        )
    by_id = {t.id: t for t in tasks}
    ids = list(dict.fromkeys(r["task_id"] for r in _prompt_rows(path)))
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} held-out task id(s) have no task, e.g. {missing[0]!r}"
        )
    return [by_id[i] for i in ids]
