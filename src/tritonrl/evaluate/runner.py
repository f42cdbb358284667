"""`tritonrl eval`'s work: a model's answers to tasks, verified, written and summarized.

    tasks = eval_tasks(["builtin:level1", "gen:20:7", "run:runs/demo"], levels=[1, 2])
    model = open_model("runs/demo")            # tritonrl.evaluate.backends
    summary = evaluate(model, tasks, samples=4, out_dir="evals/rl", config=config)

The models are `tritonrl.evaluate.backends`'s (a model or adapter dir, a .gguf, a run,
openai:MODEL@URL), so API models are measured by the same verifier. Prompts are
`tritonrl.data.prompts.build_messages`'s; verdicts come from the warm verifier pool
(`shared_verifier`: this machine's, or a Ray cluster's with `verify.backend: ray`),
rewards from `tritonrl.reward.schemes.reward_for`.

Tasks: `load_tasks` sources (the builtin suite, a KernelBench checkout: every level, the
task families: `fam:N:SEED:heldout` for programs no training task has), `gen:N[:SEED]`
(N generated tasks, seed 1 by default: not the training generator's 0),
`run:RUN` (the run's held-out tasks: prepare's validation split, or the one SFT held out),
`train:RUN` (the tasks of the run's training prompts, as RL takes them: what the SFT model
solves there is what `rl.pass_rates` reads).

Files in `out_dir`: `eval.json` (what the evaluation is of: the model's path and files'
fingerprint, the generation settings, the tasks; `tritonrl.evaluate.identity`),
`samples.jsonl` (a line per sample: task, level, sample, prompt, completion, verdict,
reward), appended as each answer is verified (in the order verdicts arrive, not the
tasks'; readers key rows by task, sample and turn), and `summary.json` (model, its path and
fingerprint, generation, tasks, samples, metrics per level and overall, notes, config:
the verify and sampling sections, versions). An interrupted eval continues, and more
--samples or tasks extend it: only the (task, sample) pairs not in the file are asked,
each once. Answers are generated a batch at a time (`BATCH_TASKS` tasks, or the model's
`batch_tasks`) and verified together, each row written the moment its verdict comes, so
an eval stopped mid-batch (a lost spot instance, Ctrl-C) keeps every verdict it had.

Turns (`turns` > 1, `tritonrl eval --turns T`): each sample is a conversation. After an
answer is verified, the next user turn is `tritonrl.data.feedback`'s message on its
verdict, and the model answers again, up to T answers. A conversation goes on while its
last answer is not correct, or is correct and was timed (the feedback then gives the
speedup and asks for a faster kernel); a correct answer that was not timed (the CPU) ends
it. Every turn is a row of samples.jsonl with its `turn` (1, 2, ...) and, as `prompt`,
the whole conversation before its answer. summary.json then has `turns` and
`metrics.turns` (`turn_metrics`: correct@t, fast_1@t, best speedup@t, each "by turn t",
the best of a conversation's answers so far), and its overall and per-level metrics are
over each conversation's best answer. An interrupted eval goes on from the turns it has.
With one turn (the default) nothing of this is written: rows, summary and eval.json are
as before turns existed.

What it does NOT do: no retry of a sample whose verdict is a failure beyond the turns
asked (a verdict is the answer), and it never mixes two models, or two settings (turns
included), in one folder: `evaluate` refuses a folder whose eval.json is another's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from tritonrl.config import Config
from tritonrl.data.feedback import feedback_message, goes_on
from tritonrl.data.prompts import build_messages, prompt_settings
from tritonrl.data.sources import load_sources
from tritonrl.evaluate.identity import check_folder, eval_identity, record
from tritonrl.evaluate.metrics import k_values, summarize, turn_metrics
from tritonrl.reward.schemes import reward_for
from tritonrl.runs.manifest import versions
from tritonrl.tasks import Task
from tritonrl.verify.client import client_for

log = logging.getLogger(__name__)
SAMPLES, SUMMARY = "samples.jsonl", "summary.json"
BATCH_TASKS = 8  # tasks generated and verified together (a model may ask for more)


def eval_tasks(specs: list[str], levels: list[int] | None = None, limit: int | None = None):
    """The tasks `specs` name (see the module docstring), filtered by level, first `limit`."""
    report = load_sources(specs)
    for e in report.errors:
        log.warning("skipped %s", e)
    tasks = report.tasks
    if levels:
        tasks = [t for t in tasks if t.level in levels]
    tasks = list({t.id: t for t in tasks}.values())[:limit]
    if not tasks:
        raise ValueError(f"no tasks in {' '.join(specs)} (levels {levels}, limit {limit})")
    return tasks


def done_samples(path: Path) -> dict[tuple[str, int], dict]:
    """The first-turn rows already in samples.jsonl `path`, by (task, sample), the first
    of each (whose they are is eval.json's to say: `tritonrl.evaluate.identity`)."""
    return {(task, i): r for (task, i, turn), r in done_turns(path).items() if turn == 1}


def done_turns(path: Path) -> dict[tuple[str, int, int], dict]:
    """The rows already in samples.jsonl `path`, by (task, sample, turn), the first of
    each; a row without `turn` is a first answer."""
    rows: dict[tuple[str, int, int], dict] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill: asked again
        rows.setdefault((r["task"], r["sample"], r.get("turn", 1)), r)
    return rows


def next_prompt(row: dict) -> list[dict]:
    """The conversation after `row`'s answer: its prompt, its answer, and the feedback on
    its verdict, ready for the next answer."""
    answer = {"role": "assistant", "content": row["completion"]}
    return [*row["prompt"], answer, feedback_message(row["verdict"])]


def best_row(rows: list[dict]) -> dict:
    """A conversation's best answer of `rows`: correct before not, then the higher
    speedup, then the later turn."""

    def key(r: dict):
        v = r["verdict"]
        speed = v.get("reward_speedup") if v.get("reward_speedup") is not None else v.get(
            "speedup")  # fmt: skip
        return (bool(v.get("correct")), speed or 0.0, r.get("turn", 1))

    return max(rows, key=key)


def _ask(model, batch: list[Task], indices: tuple[int, ...], greedy: bool,
         config: Config, turns: int = 1) -> Iterator[dict]:  # fmt: skip
    """Answers `indices` (sample numbers) to each task of `batch`, verified: the rows
    samples.jsonl gets, each as its verdict arrives. `greedy` is the evaluation's (one
    sample a task), not the batch's: a third sample added to two is drawn as they were.
    With `turns` > 1 they are first turns (`turn` 1)."""
    n = len(indices)
    prompts = [build_messages(t.source, **prompt_settings(config, t.id)) for t in batch]
    answers = model.generate(prompts, n, config, greedy=greedy)
    asked = [(t, indices[j], prompts[i]) for i, t in enumerate(batch) for j in range(n)]
    return _verified(model, asked, [a for per in answers for a in per], config,
                     1 if turns > 1 else None)  # fmt: skip


def _ask_again(model, rows: list[dict], tasks: dict[str, Task], greedy: bool,
               config: Config) -> Iterator[dict]:  # fmt: skip
    """The next turn of each conversation whose last row is in `rows`, verified, each as
    its verdict arrives."""
    prompts = [next_prompt(r) for r in rows]
    answers = model.generate(prompts, 1, config, greedy=greedy)
    asked = [(tasks[r["task"]], r["sample"], p) for r, p in zip(rows, prompts, strict=True)]
    turn = rows[0].get("turn", 1) + 1
    return _verified(model, asked, [a for per in answers for a in per], config, turn)


def _verified(model, asked: list[tuple[Task, int, list[dict]]], answers: list, config: Config,
              turn: int | None) -> Iterator[dict]:  # fmt: skip
    """The rows of `answers` to `asked` ((task, sample, prompt) each), verified, yielded
    as each verdict arrives (not in `asked`'s order); `turn` is written when there are
    turns. Closed early (an interrupt), the verifier drops the candidates no lane or
    actor has started."""
    from tritonrl.verify.backend import shared_verifier  # lazy: loads torch

    verify = config.verify
    pairs = [(task, a.text) for (task, _, _), a in zip(asked, answers, strict=True)]
    # The local pool and the Ray backend stream verdicts as they finish; the service
    # (`verify.endpoint`: its server's verify settings decide) answers a request at a time.
    client = client_for(verify)
    results = (client.imap(pairs) if client is not None
               else shared_verifier(verify).imap_unordered(pairs, verify))  # fmt: skip
    with contextlib.closing(results):
        for j, r in results:
            (task, i, prompt), a = asked[j], answers[j]
            row = {"model": model.name, "task": task.id, "level": task.level, "sample": i}
            if turn is not None:
                row["turn"] = turn
            yield {**row, "prompt": prompt, "completion": a.text, "truncated": a.truncated,
                   "verdict": r.to_dict(), "reward": reward_for(r, verify)}  # fmt: skip


def _summary(ident: dict, tasks: list[Task], samples: int, rows: list[dict],
             config: Config, turns: int = 1) -> dict:  # fmt: skip
    """summary.json of `rows` (every turn's, with turns)."""
    convs: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        convs.setdefault((r["task"], r["sample"]), []).append(r)
    best = [best_row(c) for c in convs.values()] if turns > 1 else rows
    metrics = summarize(best, k_values(samples))
    truncated = sum(bool(r.get("truncated")) for r in rows)
    model = ident["model"]
    summary = {"model": model["name"], "model_path": model.get("path"),
               "fingerprint": model.get("fingerprint"), "generation": ident["generation"],
               "tasks": len(tasks), "task_ids": sorted(t.id for t in tasks), "samples": samples,
               "truncated": truncated,
               "metrics": {k: metrics[k] for k in ("overall", "levels")},
               "notes": metrics["notes"], "versions": versions(),
               "config": {"verify": json.loads(json.dumps(config.verify.__dict__, default=str)),
                          "sampling": dataclasses.asdict(config.sampling)}}  # fmt: skip
    if turns > 1:
        summary["turns"], summary["answers"] = turns, len(rows)
        summary["metrics"]["turns"] = turn_metrics(list(convs.values()), turns)
        summary["notes"].append(
            "with turns, overall and per-level metrics are over each conversation's best "
            "answer; metrics.turns gives them by turn (correct@t: correct by turn t)"
        )
    return summary


def _identity(model, samples: int, config: Config, turns: int = 1) -> dict:
    known = getattr(model, "identity", None) or {"name": model.name}
    return eval_identity(known, samples, config, turns)


def _append(out: Path, rows: list[dict], done: dict) -> None:
    """`rows` at the end of samples.jsonl, on a line of their own after one a kill cut."""
    path = out / SAMPLES
    cut = False
    if path.is_file() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, 2)
            cut = f.read(1) != b"\n"
    with open(path, "a", encoding="utf-8") as f:
        if cut:
            f.write("\n")
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            done[(row["task"], row["sample"], row.get("turn", 1))] = row


def _open_conversations(done: dict, tasks: list[Task], samples: int, turn: int) -> list[dict]:
    """The rows of turn `turn - 1` whose conversations go on and lack turn `turn`."""
    return [done[(t.id, i, turn - 1)] for t in tasks for i in range(samples)
            if (t.id, i, turn - 1) in done and (t.id, i, turn) not in done
            and goes_on(done[(t.id, i, turn - 1)]["verdict"])]  # fmt: skip


def evaluate(model, tasks: list[Task], samples: int, out_dir: str | Path, config: Config,
             progress: Callable[[int, int], None] | None = None,
             turns: int = 1) -> dict:  # fmt: skip
    """Every (task, sample) not yet in out_dir's samples.jsonl asked, verified and
    appended answer by answer as the verdicts come, then each conversation's further turns
    up to `turns` (the module docstring); then summary.json. `progress(done, total)` as
    each answer is written (the total grows as conversations go on); an exception it
    raises stops the eval with every row before it written. A folder that holds another
    evaluation (model, settings, turns) is a ValueError."""
    if turns < 1:
        raise ValueError(f"turns must be 1 or more (answers per conversation), not {turns}")
    out = Path(out_dir)
    ident = _identity(model, samples, config, turns)
    check_folder(out, ident, tasks)
    out.mkdir(parents=True, exist_ok=True)
    record(out, ident, tasks)
    done = done_turns(out / SAMPLES)
    wanted = {t.id for t in tasks}
    total = len(tasks) * samples
    missing: dict[tuple[int, ...], list[Task]] = {}  # the sample numbers a task lacks
    for t in tasks:
        lacks = tuple(i for i in range(samples) if (t.id, i, 1) not in done)
        if lacks:
            missing.setdefault(lacks, []).append(t)
    asked = sum(len(k) * len(ts) for k, ts in missing.items())
    total += sum(1 for (task, i, turn) in done if turn > 1 and task in wanted and i < samples)
    written = total - asked
    if progress:
        progress(written, total)

    def keep(rows: Iterator[dict]) -> None:
        """Each of `rows` appended the moment it is verified; the rest of its batch
        dropped when this stops early (Ctrl-C, a `progress` that raises)."""
        nonlocal written
        with contextlib.closing(rows):
            for row in rows:
                _append(out, [row], done)
                written += 1
                if progress:
                    progress(written, total)

    step = getattr(model, "batch_tasks", BATCH_TASKS)
    for indices, todo in missing.items():
        for start in range(0, len(todo), step):
            keep(_ask(model, todo[start : start + step], indices, samples == 1, config, turns))
    by_id = {t.id: t for t in tasks}
    for turn in range(2, turns + 1):
        todo = _open_conversations(done, tasks, samples, turn)
        total += len(todo)
        for start in range(0, len(todo), step):
            keep(_ask_again(model, todo[start : start + step], by_id, samples == 1, config))
    rows = [r for (task, i, turn), r in done.items()
            if task in wanted and i < samples and turn <= turns]  # fmt: skip
    summary = _summary(ident, tasks, samples, rows, config, turns)
    tmp = out / f".{SUMMARY}.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(out / SUMMARY)
    log.info("eval of %s: %d answers in %s", model.name, len(rows), out)
    return summary


def finished(out_dir: str | Path, ident: dict, tasks: list[Task], samples: int,
             turns: int = 1) -> dict | None:  # fmt: skip
    """out_dir's summary when it is a finished evaluation of these; None when there is
    nothing or part of it (go on); ValueError when it is another evaluation (`ident`:
    `tritonrl.evaluate.identity.eval_identity`'s)."""
    check_folder(out_dir, ident, tasks)
    path = Path(out_dir) / SUMMARY
    if not path.is_file():
        return None
    old = json.loads(path.read_text())
    done = done_turns(Path(out_dir) / SAMPLES)
    asked = (old.get("task_ids"), old.get("samples"), old.get("turns", 1))
    if asked != (sorted(t.id for t in tasks), samples, turns):
        return None
    if not all((t.id, i, 1) in done for t in tasks for i in range(samples)):
        return None
    if any(_open_conversations(done, tasks, samples, turn) for turn in range(2, turns + 1)):
        return None
    return old
