"""RL prompts and their tasks, found through the run's manifest: the data SFT trained on,
less the tasks the starting policy always or never solves when `rl.pass_rates` says so.

    prompts, tasks, source = rl_prompts(run, config)
    # prompts: datasets.Dataset with "prompt" (chat messages) and "task_id" columns
    # tasks:   {task id: Task}, for the reward (`make_trl_reward(tasks)`)

The prompts come from the same training file the SFT stage used
(`tritonrl.data.heldout.training_prompts`: prepare's `train`, or the `sft/train_data`
SFT built from distill's answers or from the builtin suite and generator); every row
keeps its `task_id`, so the reward knows which task's reference to verify a completion
against (prepare's and distill's `tasks.jsonl`, or the tasks `data.*` names), and prompts
whose task equals one of `data.decontaminate_against` are dropped.

Pass-rate filter: a group whose answers all earn the same reward has no advantage, so
GRPO learns nothing from it; a task the policy never or always solves is such a group
at almost every draw. With `rl.pass_rates` (an eval folder of the starting policy on
`--tasks train:RUN`, or its samples.jsonl) only the tasks whose verified-correct share
there lies within [`rl.pass_rate_min`, `rl.pass_rate_max`] are kept; the counts are in
the log and the stage info (`pass_rate_filter`).

Fresh tasks (`rl.generated_tasks` N > 0): N generator tasks for RL alone, from seeds past
those SFT's generator tasks can use (`rl.generator_seed` overrides), or with
`rl.fresh_source families[:NAMES]` training-split task-family tasks (the families in
turn, from seed 100000), prompted as SFT's builtin rows are; a task whose source is a
training task's (or an earlier fresh task's), or that equals (in
`data.decontaminate_form`) a task of `data.decontaminate_against` or one of the run's
held-out tasks, is left out, so RL never trains on what the run is evaluated on, and the
next seed's task is drawn in its place: N distinct tasks, the same N for the same seed,
unless 10 x N more seeds give no more (a warning then says how many). A policy that has
learnt its few filtered tasks by heart keeps meeting prompts it has not seen.
The pass-rate filter filters those its file names (`tritonrl eval --tasks gen:N:SEED`
measures them) and keeps the others: the curriculum's retirement
(`curriculum.retire_after`, `retire_unsolved_after`) sets aside those with no signal.

What it does NOT do: choose the level mix (the curriculum's sampler does), no validation prompts
(RL trains on the training split only; `tritonrl.data.heldout` gives evaluation the
held-out tasks); it does not sample or verify anything itself (the eval did).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from tritonrl.config import Config
from tritonrl.data.heldout import heldout_tasks, training_prompts
from tritonrl.data.prompts import build_messages, prompt_settings
from tritonrl.runs import Run, RunError
from tritonrl.tasks import Task, families
from tritonrl.tasks.decontaminate import Decontaminator, checker, describe
from tritonrl.tasks.generator import generate_task

log = logging.getLogger(__name__)
SAMPLES = "samples.jsonl"  # an eval folder's answers (tritonrl.evaluate.runner)
EXTRA_DRAWS = 10  # seeds tried past N for each fresh task asked, before settling for fewer
FAMILY_SEED = 100_000  # fresh family tasks' first seed: past those `fam:` specs take


def rl_prompts(run: Run, config: Config):
    """(prompts Dataset, {task id: Task}, source) for the RL stage of `run`."""
    import datasets  # lazy: a heavy optional dependency

    rows, tasks, source = training_prompts(run, config)
    fresh = fresh_tasks(run, config, tasks)
    if config.rl.pass_rates:
        keep, summary = pass_rate_filter(config, list(tasks), [t.id for t in fresh])
        rows = [r for r in rows if r["task_id"] in keep]
        fresh = [t for t in fresh if t.id in keep]
        run.set_info("rl", pass_rate_filter=summary)
    else:  # an earlier attempt's filter does not describe this one's prompts
        run.set_info("rl", pass_rate_filter=None)
    rows += fresh_rows(fresh, config)
    tasks = {**tasks, **{t.id: t for t in fresh}}
    log.info("RL prompts: %d (%s, %d of them fresh tasks, rl.fresh_source %s)", len(rows),
             source, len(fresh), config.rl.fresh_source)  # fmt: skip
    used = {r["task_id"] for r in rows}
    return datasets.Dataset.from_list(rows), {k: tasks[k] for k in used}, source


def fresh_tasks(run: Run, config: Config, training: dict[str, Task]) -> list[Task]:
    """`rl.generated_tasks` generator tasks for RL alone (see the module docstring): none
    a training task, none equal to a task of `data.decontaminate_against` or to one the
    run holds out. A drawn task that is left out is replaced by the next seed's, up to
    `EXTRA_DRAWS` x N seeds past the first N; fewer than N then is a warning."""
    rl, data = config.rl, config.data
    n = rl.generated_tasks
    if not n:
        return []
    draw, seed = fresh_draw(config)
    against = checker(data.decontaminate_against, data.decontaminate_form,
                      "data.decontaminate_against")  # fmt: skip
    try:
        held = heldout_tasks(run, config)
    except RunError:  # the run records no held-out prompts: nothing more to keep out
        held = []
    holdout = Decontaminator(held, data.decontaminate_form) if held else None
    sources = {t.source for t in training.values()}  # and the fresh ones', as drawn
    tasks: list[Task] = []
    copies, on_against, on_held = 0, [], []
    end = seed + n + EXTRA_DRAWS * n
    for s in range(seed, end):
        if len(tasks) == n:
            end = s
            break
        task = draw(s)
        if task is None:  # a held-out family program: never a training task
            continue
        if task.id in training or task.source in sources:
            copies += 1  # a training task, or a fresh one drawn already
            continue
        sources.add(task.source)
        if against is not None and (found := against.matches(task)):
            on_against += found
        elif holdout is not None and (found := holdout.matches(task)):
            on_held += found
        else:
            tasks.append(task)
    if on_against:
        log.warning("rl.generated_tasks: dropped %s, equal to a task of "
                    "data.decontaminate_against %s (%s form)", describe(on_against),
                    data.decontaminate_against, data.decontaminate_form)  # fmt: skip
    if on_held:
        log.warning("rl.generated_tasks: dropped %s, equal to a task the run holds out",
                    describe(on_held))  # fmt: skip
    if len(tasks) < n:
        log.warning("rl.generated_tasks: %d fresh tasks (%s) of the %d asked: draws %d "
                    "to %d gave no more that are neither a training task nor equal to a "
                    "held-out one; ask fewer, or another rl.generator_seed", len(tasks),
                    rl.fresh_source, n, seed, end - 1)  # fmt: skip
    log.info("rl.generated_tasks: %d fresh tasks (%s) from draws %d to %d (%d drawn and left "
             "out)", len(tasks), rl.fresh_source, seed, end - 1,
             end - seed - len(tasks))  # fmt: skip
    return tasks


def fresh_draw(config: Config) -> tuple[Callable[[int], Task | None], int]:
    """(the task of a seed, the first seed) for `rl.fresh_source`: the generator's task
    of seed s, or the families' (in turn: seed s names family s mod F, with seed s // F),
    None where that program is held out; the first seed is `rl.generator_seed`, else past
    every seed SFT's tasks may use."""
    rl, data = config.rl, config.data
    if rl.fresh_source == "generator":
        first = data.generator_seed + 20 * data.generated_tasks + 20
        return generate_task, first if rl.generator_seed is None else rl.generator_seed
    names = fresh_families(rl.fresh_source)

    def family_draw(s: int) -> Task | None:
        name, seed = names[s % len(names)], s // len(names)
        if families.is_heldout(families.draw_one(name, seed).signature):
            return None
        return families.family_task(name, seed)

    first = FAMILY_SEED if rl.generator_seed is None else rl.generator_seed
    return family_draw, first * len(names)


def fresh_families(source: str) -> list[str]:
    """The families `rl.fresh_source` names (`families`: all of them); a ValueError names
    an unknown one and lists the families."""
    if source == "families":
        return list(families.FAMILIES)
    names = [n.strip() for n in source.removeprefix("families:").split(",") if n.strip()]
    unknown = [n for n in names if n not in families.FAMILIES]
    if unknown or not names:
        raise ValueError(f"rl.fresh_source {source!r}: unknown task families {unknown}; the "
                         f"families are {', '.join(families.FAMILIES)}")  # fmt: skip
    return names


def fresh_rows(tasks: list[Task], config: Config) -> list[dict]:
    """Prompt rows of `tasks`, built as SFT builds its rows from tasks."""
    return [{"prompt": build_messages(t.source, **prompt_settings(config, t.id)), "task_id": t.id}
            for t in tasks]  # fmt: skip


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


def pass_rate_filter(
    config: Config, task_ids: list[str], fresh: list[str] | None = None
) -> tuple[set[str], dict]:
    """The ids of `task_ids` (and of `fresh`, RL's own generator tasks) whose pass rate in
    `rl.pass_rates` lies within [rl.pass_rate_min, rl.pass_rate_max], with the `fresh`
    ones the file does not name, and a summary (kept, never solved, always solved, not in
    the file, fresh). A ValueError when none is kept, saying what was found."""
    rl = config.rl
    rates = pass_rates(rl.pass_rates)
    keep: set[str] = set()
    absent = [t for t in task_ids if t not in rates]
    unmeasured = [t for t in fresh or [] if t not in rates]  # kept: nothing says otherwise
    below, above = [], []
    for task in [*task_ids, *(fresh or [])]:
        if task not in rates:
            continue
        correct, n = rates[task]
        p = correct / n
        (keep.add(task) if rl.pass_rate_min <= p <= rl.pass_rate_max else
         (below if p < rl.pass_rate_min else above).append(task))  # fmt: skip
    keep.update(unmeasured)
    summary = {"file": str(rl.pass_rates), "tasks": len(task_ids), "kept": len(keep),
               "below_min": len(below), "above_max": len(above), "not_in_file": len(absent),
               "fresh": len(fresh or []), "fresh_unmeasured": len(unmeasured),
               "range": [rl.pass_rate_min, rl.pass_rate_max]}  # fmt: skip
    log.info(
        "RL pass-rate filter (%s): %d of %d tasks kept; %d below %.2f, %d above %.2f, "
        "%d not in the file; %d fresh generator tasks, %d of them not in it (kept)",
        rl.pass_rates, len(keep), len(task_ids) + len(fresh or []), len(below),
        rl.pass_rate_min, len(above), rl.pass_rate_max, len(absent), len(fresh or []),
        len(unmeasured),
    )  # fmt: skip
    if absent and len(absent) == len(task_ids) and not fresh:
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
