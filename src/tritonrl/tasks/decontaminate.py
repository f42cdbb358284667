"""Decontamination: which training tasks are copies of a benchmark or held-out task.

    against = load_specs(["path/to/KernelBench", "builtin:heldout"]).tasks
    matches = find_matches(train_tasks, against, form="forward")
    kept, matches = drop_matches(train_tasks, against, form="forward")
    check = checker(config.data.decontaminate_against)   # None when there is nothing
    check.matches(task)                                    # one training task at a time

A training task matches a task it is checked against when their references are equal in
a normal form of `tritonrl.tasks.normalize`: `program` (the whole program, names and
sizes abstracted) or `forward` (the forward computation's op sequence). `form` names the
weakest form that counts: `program` counts only program-equal pairs; `forward` (the
default) counts both, and a pair that is program-equal is reported as such.

Specs are `tritonrl.tasks.load_tasks`'s (a task file, a KernelBench-layout folder such as
a KernelBench checkout, `builtin:...`, where `builtin:heldout` is the builtin tasks kept
out of training, `fam:N:SEED:heldout`, programs of the task families' held-out
signatures) and `gen:N:SEED`, N tasks of the generator from SEED (the seed is required:
training draws from `data.generator_seed`, evaluation from 1).

What it does NOT do: decide what to do with a match (`prepare` and the SFT and RL data
drop them; `tritonrl tasks decontaminate` reports them), or compare solutions.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from tritonrl.tasks.loaders import LoadReport, load_tasks
from tritonrl.tasks.normalize import FORMS, FORWARD, PROGRAM, NormalForm, normal_form
from tritonrl.tasks.task import Task, TaskLoadError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Match:
    """A training task (`task`) equal to a task it was checked against (`against`) in
    `form` (`program` or `forward`)."""

    task: str
    against: str
    form: str
    task_origin: str
    against_origin: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.task} = {self.against} ({self.form})"


def load_specs(specs: list[str]) -> LoadReport:
    """The tasks `specs` name (`load_tasks`'s sources); a bad spec is a `TaskLoadError`."""
    return load_tasks(list(specs))


class Decontaminator:
    """The tasks to check against, indexed once: `matches(task)` for each training task."""

    def __init__(self, against: list[Task], form: str = FORWARD):
        if form not in FORMS:
            raise ValueError(f"form must be one of {', '.join(FORMS)}, not {form!r}")
        self.form, self.forms = form, FORMS[: FORMS.index(form) + 1]
        self._cache: dict[str, NormalForm] = {}
        self._index: dict[tuple[str, str], list[Task]] = {}
        for other in against:
            keys = self._form(other)
            for f in self.forms:
                if keys.key(f) is not None:
                    self._index.setdefault((f, keys.key(f)), []).append(other)

    def _form(self, task: Task) -> NormalForm:
        if task.source not in self._cache:
            self._cache[task.source] = normal_form(task.source, task.origin)
        return self._cache[task.source]

    def matches(self, task: Task) -> list[Match]:
        """The tasks `task` equals, each once, in its strictest form that counts."""
        keys, seen, found = self._form(task), set(), []
        for f in self.forms:
            for other in self._index.get((f, keys.key(f)), []):
                if other.id not in seen:
                    seen.add(other.id)
                    found.append(Match(task.id, other.id, f, task.origin, other.origin))
        return found


def find_matches(train: list[Task], against: list[Task], form: str = FORWARD) -> list[Match]:
    """Every (training task, task against) pair equal in `form` or a stricter form, in
    the order of `train`; a program-equal pair is reported once, as `program`."""
    check = Decontaminator(against, form)
    return [m for task in train for m in check.matches(task)]


def checker(specs: list[str], form: str = FORWARD, setting: str = "--against"):
    """A `Decontaminator` over the tasks `specs` name, or None when there are none; a spec
    that cannot be loaded is a ValueError naming `setting` (the option or config key)."""
    if not specs:
        return None
    try:
        report = load_specs(list(specs))
    except TaskLoadError as e:
        raise ValueError(
            f"{setting}: {e} (each entry is a KernelBench checkout, builtin:heldout, a task "
            "file, gen:N:SEED or fam:N:SEED:heldout)"
        ) from None
    for e in report.errors:
        log.warning("%s: skipping %s", setting, e)
    return Decontaminator(report.tasks, form)


def drop_matches(
    train: list[Task], against: list[Task], form: str = FORWARD
) -> tuple[list[Task], list[Match]]:
    """(the training tasks that match nothing in `against`, the matches)."""
    matches = find_matches(train, against, form)
    bad = {m.task for m in matches}
    return [t for t in train if t.id not in bad], matches


def describe(matches: list[Match], most: int = 10, per_task: int = 3) -> str:
    """The matched training tasks in one line, each once, in the order first matched: the
    first `most` of them named, each with the first `per_task` tasks it equals. A task
    equal to several tasks, or given twice, has several matches: still one entry."""
    equals: dict[str, list[str]] = {}
    for m in matches:
        said = f"{m.against} ({m.form})"
        if said not in equals.setdefault(m.task, []):
            equals[m.task].append(said)

    def entry(task: str) -> str:
        others = equals[task]
        more = f" and {len(others) - per_task} more" if len(others) > per_task else ""
        return f"{task} = {', '.join(others[:per_task])}{more}"

    named = "; ".join(entry(t) for t in list(equals)[:most])
    more = f"; and {len(equals) - most} more" if len(equals) > most else ""
    return f"{len(equals)} task(s): {named}{more}"


__all__ = ["FORMS", "FORWARD", "PROGRAM", "Decontaminator", "Match", "checker", "describe",
           "drop_matches", "find_matches", "load_specs"]  # fmt: skip
