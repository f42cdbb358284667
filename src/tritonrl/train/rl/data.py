"""RL prompts and their tasks, found through the run's manifest: the data SFT trained on,
less the tasks the starting policy always or never solves when `rl.pass_rates` says so.

    prompts, tasks, source = rl_prompts(run, config)
    # prompts: datasets.Dataset with "prompt" (chat messages) and "task_id" columns
    # tasks:   {task id: Task}, for the reward (`make_trl_reward(tasks)`)

The prompts come from the same training file the SFT stage used
(`tritonrl.data.heldout.training_prompts`: prepare's `train`, or the `sft/train_data`
SFT built from the builtin suite and generator); every row keeps its `task_id`, so the
reward knows which task's reference to verify a completion against, and prompts whose
task equals one of `data.decontaminate_against` are dropped.

Pass-rate filter: a group whose answers all earn the same reward has no advantage, so
GRPO learns nothing from it; a task the policy never or always solves is such a group
at almost every draw. With `rl.pass_rates` (an eval folder of the starting policy on
`--tasks train:RUN`, or its samples.jsonl) only the tasks whose verified-correct share
there lies within [`rl.pass_rate_min`, `rl.pass_rate_max`] are kept; the counts are in
the log and the stage info (`pass_rate_filter`).

What it does NOT do: choose the level mix (the curriculum's sampler does), no validation prompts
(RL trains on the training split only; `tritonrl.data.heldout` gives evaluation the
held-out tasks); it does not sample or verify anything itself (the eval did).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tritonrl.config import Config
from tritonrl.data.heldout import training_prompts
from tritonrl.runs import Run

log = logging.getLogger(__name__)
SAMPLES = "samples.jsonl"  # an eval folder's answers (tritonrl.evaluate.runner)


def rl_prompts(run: Run, config: Config):
    """(prompts Dataset, {task id: Task}, source) for the RL stage of `run`."""
    import datasets  # lazy: a heavy optional dependency

    rows, tasks, source = training_prompts(run, config)
    if config.rl.pass_rates:
        keep, summary = pass_rate_filter(config, list(tasks))
        rows = [r for r in rows if r["task_id"] in keep]
        run.set_info("rl", pass_rate_filter=summary)
    else:  # an earlier attempt's filter does not describe this one's prompts
        run.set_info("rl", pass_rate_filter=None)
    log.info("RL prompts: %d (%s)", len(rows), source)
    used = {r["task_id"] for r in rows}
    return datasets.Dataset.from_list(rows), {k: tasks[k] for k in used}, source


def pass_rates(path: str | Path) -> dict[str, tuple[int, int]]:
    """{task id: (verified-correct answers, answers)} of an eval folder or samples.jsonl
    (first answers of each (task, sample) only, as the eval counts them); a ValueError
    names a path with no answers or a row that is not an eval answer."""
    path = Path(path)
    file = path / SAMPLES if path.is_dir() else path
    if not file.is_file():
        raise ValueError(
            f"rl.pass_rates {path}: no {SAMPLES} there; write one with `tritonrl eval "
            f"--model RUN/sft/final --tasks train:RUN --samples 4 --out {path}`"
        )
    counts: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill (the eval asks it again); or blank
        try:
            key, correct = (row["task"], row["sample"]), bool(row["verdict"]["correct"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"rl.pass_rates {file} line {n} is not an eval answer: {e!r}") from e
        if row.get("turn", 1) != 1 or key in seen:
            continue  # later turns of a conversation, or an answer written twice
        seen.add(key)
        c = counts.setdefault(key[0], [0, 0])
        c[0] += correct
        c[1] += 1
    if not counts:
        raise ValueError(f"rl.pass_rates {file}: no answers in it")
    return {t: (c[0], c[1]) for t, c in counts.items()}


def pass_rate_filter(config: Config, task_ids: list[str]) -> tuple[set[str], dict]:
    """The ids of `task_ids` whose pass rate in `rl.pass_rates` lies within
    [rl.pass_rate_min, rl.pass_rate_max], and a summary (kept, never solved, always
    solved, not in the file). A ValueError when none is kept, saying what was found."""
    rl = config.rl
    rates = pass_rates(rl.pass_rates)
    keep: set[str] = set()
    below, above, absent = [], [], []
    for task in task_ids:
        if task not in rates:
            absent.append(task)
            continue
        correct, n = rates[task]
        p = correct / n
        (keep.add(task) if rl.pass_rate_min <= p <= rl.pass_rate_max else
         (below if p < rl.pass_rate_min else above).append(task))  # fmt: skip
    summary = {"file": str(rl.pass_rates), "tasks": len(task_ids), "kept": len(keep),
               "below_min": len(below), "above_max": len(above), "not_in_file": len(absent),
               "range": [rl.pass_rate_min, rl.pass_rate_max]}  # fmt: skip
    log.info(
        "RL pass-rate filter (%s): %d of %d tasks kept; %d below %.2f, %d above %.2f, "
        "%d not in the file", rl.pass_rates, len(keep), len(task_ids), len(below),
        rl.pass_rate_min, len(above), rl.pass_rate_max, len(absent),
    )  # fmt: skip
    if absent and len(absent) == len(task_ids):
        raise ValueError(
            f"rl.pass_rates {rl.pass_rates}: none of the run's {len(task_ids)} training "
            f"tasks is in it (e.g. {task_ids[0]!r}); evaluate with --tasks train:RUN"
        )
    if not keep:
        raise ValueError(
            f"rl.pass_rates {rl.pass_rates}: no training task's pass rate lies within "
            f"[{rl.pass_rate_min}, {rl.pass_rate_max}] ({len(below)} below, {len(above)} "
            "above): widen rl.pass_rate_min/max or set rl.pass_rates null"
        )
    return keep, summary
