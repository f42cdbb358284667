"""SFT examples: built from tasks, written and read as JSONL, found through the manifest.

An example is one line `{"prompt": [messages], "completion": [assistant message]}` (TRL's
conversational prompt/completion format, made by `tritonrl.data.prompts.sft_example`),
optionally with a `task_id`. `data.sft_source` says where the SFT stage takes its examples
(`tritonrl.data.heldout.sft_source`):

* `prepare`: the `prepare/train` and `prepare/validation` artifacts (KernelBook, ...);
* `distill`: the teacher's verified answers `tritonrl distill --run RUN` recorded as
  `distill/train` (tasks in `distill/tasks`); an error names the command when there are none;
* `builtin`: built here from tasks with solutions: the builtin suite plus generator tasks
  (`data.tasks`, `data.generated_tasks`);
* `auto` (the default): prepare's files when the manifest records them, else distill's,
  else builtin. A run that records both trains on prepare's and says in the log that it
  leaves distill's out (`data.sft_source: distill` takes those instead): prepare's split
  is the run's held-out set, and distilled rows of a task it holds out would leak into it.

distill's and the builtin rows, less those whose task equals a task of
`data.decontaminate_against` (`tritonrl.data.heldout.decontaminate`), are split by task
into train and validation (tasks equal in `data.decontaminate_form` in one split, so
every answer to one task lands on one side) and written as `sft/train_data` and
`sft/validation_data`; the source is recorded as the sft stage's `data_source` at once,
so that RL's prompts (`tritonrl.data.heldout.training_prompts`) and the held-out tasks
follow it. The log says which files SFT trains on.

Note that the builtin suite is also what `tritonrl eval` measures by default: a model
SFT'd on builtin solutions must be evaluated on the validation split's tasks (their ids
are in `sft/validation_data`) or on other tasks, or its scores are contaminated.

`long_examples` counts the examples longer than `sft.max_length` tokens, which the
trainer would cut (the stage warns and records the count).

What it does NOT do: it does not truncate (the trainer does), download
KernelBook (`tritonrl.data.kernelbook`), or check solutions with the verifier (the builtin
and generated solutions are checked by their own tests).
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

from tritonrl.config import Config
from tritonrl.data.heldout import (
    builtin_tasks,
    decontaminate,
    distill_tasks,
    read_rows,
    sft_source,
)
from tritonrl.data.kernelbook import split_groups
from tritonrl.data.prompts import prompt_settings, sft_example
from tritonrl.runs import Run, RunError, atomic_write_bytes
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


def distill_examples(run: Run, config: Config) -> tuple[list[Task], list[dict]]:
    """(tasks, rows) of the verified teacher answers `run`'s distill stage recorded, less
    those whose task equals a task of `data.decontaminate_against`. A `RunError` names
    the command to run when the run records none."""
    if not run.has_artifact("distill", "train"):
        raise RunError(
            f"data.sft_source is distill but run {run.path} records no distill file: run "
            f"`tritonrl distill --run {run.path} --endpoint URL --model NAME` first"
        )
    path = run.artifact("distill", "train")
    rows = [{**r, **check_row(r, f"{path} row {n}")} for n, r in enumerate(read_rows(path), 1)]
    if not rows:
        raise ValueError(
            f"{path} holds no examples: the teacher gave no verified-correct answer (its "
            "summary.json says why); distill again with more --variations or other --tasks"
        )
    by_id = {t.id: t for t in distill_tasks(run)}
    missing = sorted({str(r.get("task_id")) for r in rows} - set(by_id))
    if missing:
        raise ValueError(f"{path}: {len(missing)} row task id(s) name no task of "
                         f"distill/tasks, e.g. {missing[0]!r}")  # fmt: skip
    used = [by_id[i] for i in dict.fromkeys(r["task_id"] for r in rows)]
    tasks = decontaminate(used, config, "distilled SFT examples")
    kept = {t.id for t in tasks}
    rows = [r for r in rows if r["task_id"] in kept]
    if not rows:
        raise ValueError(
            f"{path}: every row's task equals a task of data.decontaminate_against "
            f"{config.data.decontaminate_against}: nothing to train on"
        )
    return tasks, rows


def split_rows(
    rows: list[dict], fraction: float, seed: int, groups: dict[str, str] | None = None
) -> tuple[list[dict], list[dict]]:
    """A seeded split; at least one validation row when `fraction` > 0 and there are two.
    With `groups` (task id -> key, `tritonrl.data.kernelbook.split_groups`) the rows of
    one key land in one split: whole groups are taken in the seeded order, one that would
    overshoot the validation share skipped; when every group would (a distilled task's
    several answers), the smallest is the validation split, unless it is the only one."""
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
    if n_val and not val and len(members) >= 2:
        val = min(members.values(), key=len)
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

    The source is `tritonrl.data.heldout.sft_source` (see the module docstring); prepare
    insists on its files (a clear error names the missing artifact). Files built here
    are recorded as `sft/train_data` and `sft/validation_data` (reused when already
    recorded), and the source as the stage's `data_source`.
    """
    source = sft_source(run, config)
    if source == "prepare":
        if config.data.sft_source == "auto" and run.has_artifact("distill", "train"):
            log.warning(
                "the run records both prepare's and distill's files: SFT trains on "
                "prepare's (data.sft_source auto); %s is left out (set data.sft_source "
                "distill to train on it instead)", run.stage("distill")["artifacts"]["train"],
            )  # fmt: skip
        return _trains_on(run, "prepare", "train", "validation", "prepare")
    if run.has_artifact("sft", "train_data"):
        return _trains_on(run, "sft", "train_data", "validation_data", source)
    if source == "distill":
        tasks, rows = distill_examples(run, config)
        origin = run.stage("distill")["artifacts"]["train"]
    else:
        tasks = training_tasks(config)
        rows, origin = builtin_examples(config, tasks), "data.tasks and the generator"
    # tasks equal in data.decontaminate_form stay in one split: no validation task has a
    # copy in training
    groups = split_groups(tasks, config.data.decontaminate_form)
    train_rows, val_rows = split_rows(
        rows, config.data.validation_fraction, config.data.generator_seed, groups
    )
    data_dir = run.stage_dir("sft") / "data"
    data_dir.mkdir(exist_ok=True)
    run.add_artifact("sft", "train_data", write_jsonl(data_dir / "train.jsonl", train_rows))
    if val_rows:
        val = write_jsonl(data_dir / "validation.jsonl", val_rows)
        run.add_artifact("sft", "validation_data", val)
    run.set_info("sft", data_source=source)  # RL and eval follow what SFT trains on
    log.info("SFT examples from %s (%s): %d train, %d validation, split by task",
             origin, source, len(train_rows), len(val_rows))  # fmt: skip
    return _trains_on(run, "sft", "train_data", "validation_data", source)


def _trains_on(run: Run, stage: str, train: str, val: str, source: str):
    """(train file, validation file or None, source) as `stage` recorded them; the log
    names them."""
    train_file, val_file = _recorded(run, stage, train, val)
    shown = run.relpath(val_file) if val_file else "none"
    log.info("SFT trains on %s (validation: %s), the %s examples", run.relpath(train_file),
             shown, source)  # fmt: skip
    return train_file, val_file, source


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


def long_examples(rows, tokenizer, max_length: int) -> tuple[int, int]:
    """(how many of `rows` run past `max_length` tokens, the longest's tokens): each
    prompt and completion in the model's chat template, as the trainer tokenizes them
    before it cuts them at max_length. One batch: a fast tokenizer encodes it in parallel."""
    chats = [row["prompt"] + row["completion"] for row in rows]
    if not chats:
        return 0, 0
    texts = tokenizer.apply_chat_template(chats, tokenize=False)
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return sum(n > max_length for n in lengths), max(lengths)
