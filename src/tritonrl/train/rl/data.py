"""RL prompts and their tasks, found through the run's manifest: the data SFT trained on.

    prompts, tasks, source = rl_prompts(run, config)
    # prompts: datasets.Dataset with "prompt" (chat messages) and "task_id" columns
    # tasks:   {task id: Task}, for the reward (`make_trl_reward(tasks)`)

The RL stage draws its prompts from the same training file the SFT stage used
(`tritonrl.train.sft.data.sft_data_files`): `prepare/train` when SFT took prepare's files (the tasks
then come from `prepare/tasks`), else the `sft/train_data` SFT built from the builtin
suite and generator (the tasks are rebuilt from `data.tasks` and `data.generated_tasks`,
which the run's recorded config fixes). Every row keeps its `task_id`, so the reward knows
which task's reference to verify a completion against; a row without one, or naming a
task that cannot be found, is an error that says so. Prompts whose task equals a task of
`data.decontaminate_against` are dropped (`tritonrl.data.heldout.decontaminate`), so a
run whose config gained a benchmark after SFT does not train on it.

What it does NOT do: choose the level mix (the curriculum's sampler does), no validation prompts
(RL trains on the training split only; `tritonrl.data.heldout` gives evaluation the
held-out tasks).
"""

from __future__ import annotations

import logging

from tritonrl.config import Config
from tritonrl.data.heldout import builtin_tasks, decontaminate, prompt_rows
from tritonrl.data.kernelbook import load_prepared_tasks
from tritonrl.runs import Run, RunError

log = logging.getLogger(__name__)


def rl_prompts(run: Run, config: Config):
    """(prompts Dataset, {task id: Task}, source) for the RL stage of `run`."""
    import datasets  # lazy: a heavy optional dependency

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
    clean = {t.id for t in decontaminate([by_id[i] for i in used], config, "RL prompts")}
    rows = [r for r in rows if r["task_id"] in clean]
    if not rows:
        raise ValueError(
            f"{train}: every prompt's task equals a task of data.decontaminate_against "
            f"{config.data.decontaminate_against}; train on other tasks or change that key"
        )
    log.info("RL prompts: %d from %s (%s)", len(rows), run.relpath(train), source)
    used = {r["task_id"] for r in rows}
    return datasets.Dataset.from_list(rows), {k: by_id[k] for k in used}, source
