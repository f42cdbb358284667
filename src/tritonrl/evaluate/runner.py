"""`tritonrl eval`'s work: a model's answers to tasks, verified, written and summarized.

    tasks = eval_tasks(["builtin:level1", "gen:20:7", "run:runs/demo"], levels=[1, 2])
    model = open_model("runs/demo")            # tritonrl.evaluate.backends
    summary = evaluate(model, tasks, samples=4, out_dir="evals/rl", config=config)

The models are `tritonrl.evaluate.backends`'s (a model or adapter dir, a .gguf, a run,
openai:MODEL@URL), so API models are measured by the same verifier. Prompts are
`tritonrl.data.prompts.build_messages`'s; verdicts come from the warm verifier pool
(`shared_pool`), rewards from `tritonrl.reward.schemes.reward_for`.

Tasks: `load_tasks` sources (the builtin suite, a KernelBench checkout: every level, the
task families: `fam:N:SEED:heldout` for programs no training task has), `gen:N[:SEED]`
(N generated tasks, seed 1 by default: not the training generator's 0),
`run:RUN` (the run's held-out tasks: prepare's validation split, or the one SFT held out).

Files in `out_dir`: `eval.json` (what the evaluation is of: the model's path and files'
fingerprint, the generation settings, the tasks; `tritonrl.evaluate.identity`),
`samples.jsonl` (a line per sample: task, level, sample, prompt, completion, verdict,
reward), appended as each batch is verified, and `summary.json` (model, its path and
fingerprint, generation, tasks, samples, metrics per level and overall, notes, config:
the verify and sampling sections, versions). An interrupted eval continues, and more
--samples or tasks extend it: only the (task, sample) pairs not in the file are asked,
each once.

What it does NOT do: no multi-turn refinement, no retry of a sample whose verdict is a
failure (a verdict is the answer), and it never mixes two models, or two settings, in one
folder: `evaluate` refuses a folder whose eval.json is another's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path

from tritonrl.config import Config
from tritonrl.config_loader import config_from_dict
from tritonrl.data.heldout import heldout_tasks
from tritonrl.data.prompts import build_messages
from tritonrl.evaluate.identity import check_folder, eval_identity, record
from tritonrl.evaluate.metrics import k_values, summarize
from tritonrl.reward.schemes import reward_for
from tritonrl.runs import Run
from tritonrl.runs.manifest import versions
from tritonrl.tasks import Task, load_tasks
from tritonrl.tasks.generator import generate_tasks

log = logging.getLogger(__name__)
SAMPLES, SUMMARY = "samples.jsonl", "summary.json"
BATCH_TASKS = 8  # tasks generated and verified together (a model may ask for more)


def eval_tasks(specs: list[str], levels: list[int] | None = None, limit: int | None = None):
    """The tasks `specs` name (see the module docstring), filtered by level, first `limit`."""
    tasks: list[Task] = []
    for spec in specs:
        if spec.startswith("gen:"):
            parts = spec.split(":")
            tasks += generate_tasks(int(parts[1]), seed=int(parts[2]) if len(parts) > 2 else 1)
        elif spec.startswith("run:"):
            run = Run.open(spec[4:])
            tasks += heldout_tasks(run, config_from_dict(run.config, f"run {run.path}"))
        else:
            report = load_tasks(spec)
            if report.errors:
                log.warning("%s: %d tasks could not be loaded", spec, len(report.errors))
            tasks += report.tasks
    if levels:
        tasks = [t for t in tasks if t.level in levels]
    tasks = list({t.id: t for t in tasks}.values())[:limit]
    if not tasks:
        raise ValueError(f"no tasks in {' '.join(specs)} (levels {levels}, limit {limit})")
    return tasks


def done_samples(path: Path) -> dict[tuple[str, int], dict]:
    """The rows already in samples.jsonl `path`, by (task, sample), the first of each
    (whose they are is eval.json's to say: `tritonrl.evaluate.identity`)."""
    rows: dict[tuple[str, int], dict] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill: asked again
        rows.setdefault((r["task"], r["sample"]), r)
    return rows


def _ask(model, batch: list[Task], indices: tuple[int, ...], greedy: bool,
         config: Config) -> list[dict]:  # fmt: skip
    """Answers `indices` (sample numbers) to each task of `batch`, verified: the rows
    samples.jsonl gets. `greedy` is the evaluation's (one sample a task), not the batch's:
    a third sample added to two is drawn as they were."""
    from tritonrl.verify.pool.pool import shared_pool  # lazy: loads torch

    verify, n = config.verify, len(indices)
    prompts = [build_messages(t.source, include_example=config.data.include_example,
                              policy=verify.policy, allowed_torch_ops=verify.allowed_torch_ops)
               for t in batch]  # fmt: skip
    answers = model.generate(prompts, n, config, greedy=greedy)
    cut = [a.truncated for per_task in answers for a in per_task]
    pairs = [(t, a.text) for t, per_task in zip(batch, answers, strict=True) for a in per_task]
    results = shared_pool(verify).verify_many(pairs, verify)
    return [{"model": model.name, "task": task.id, "level": task.level, "sample": indices[i % n],
             "prompt": prompts[i // n], "completion": text, "truncated": cut[i],
             "verdict": r.to_dict(), "reward": reward_for(r, verify)}
            for i, ((task, text), r) in enumerate(zip(pairs, results, strict=True))]  # fmt: skip


def _summary(ident: dict, tasks: list[Task], samples: int, rows: list[dict],
             config: Config) -> dict:  # fmt: skip
    metrics = summarize(rows, k_values(samples))
    truncated = sum(bool(r.get("truncated")) for r in rows)
    model = ident["model"]
    return {"model": model["name"], "model_path": model.get("path"),
            "fingerprint": model.get("fingerprint"), "generation": ident["generation"],
            "tasks": len(tasks), "task_ids": sorted(t.id for t in tasks), "samples": samples,
            "truncated": truncated,
            "metrics": {k: metrics[k] for k in ("overall", "levels")},
            "notes": metrics["notes"], "versions": versions(),
            "config": {"verify": json.loads(json.dumps(config.verify.__dict__, default=str)),
                       "sampling": dataclasses.asdict(config.sampling)}}  # fmt: skip


def _identity(model, samples: int, config: Config) -> dict:
    known = getattr(model, "identity", None) or {"name": model.name}
    return eval_identity(known, samples, config)


def evaluate(model, tasks: list[Task], samples: int, out_dir: str | Path, config: Config,
             progress: Callable[[int, int], None] | None = None) -> dict:  # fmt: skip
    """Every (task, sample) not yet in out_dir's samples.jsonl asked, verified, appended
    batch by batch; then summary.json. `progress(done, total)` as samples are written.
    A folder that holds another evaluation (model, settings) is a ValueError."""
    out = Path(out_dir)
    ident = _identity(model, samples, config)
    check_folder(out, ident, tasks)
    out.mkdir(parents=True, exist_ok=True)
    record(out, ident, tasks)
    done = done_samples(out / SAMPLES)
    total = len(tasks) * samples
    missing: dict[tuple[int, ...], list[Task]] = {}  # the sample numbers a task lacks
    for t in tasks:
        lacks = tuple(i for i in range(samples) if (t.id, i) not in done)
        if lacks:
            missing.setdefault(lacks, []).append(t)
    asked = sum(len(k) * len(ts) for k, ts in missing.items())
    if progress:
        progress(total - asked, total)
    step = getattr(model, "batch_tasks", BATCH_TASKS)
    for indices, todo in missing.items():
        for start in range(0, len(todo), step):
            rows = _ask(model, todo[start : start + step], indices, samples == 1, config)
            with open(out / SAMPLES, "a", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    done[(row["task"], row["sample"])] = row
            asked -= len(rows)
            if progress:
                progress(total - asked, total)
    wanted = {t.id for t in tasks}
    rows = [r for (task, i), r in done.items() if task in wanted and i < samples]
    summary = _summary(ident, tasks, samples, rows, config)
    tmp = out / f".{SUMMARY}.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(out / SUMMARY)
    log.info("eval of %s: %d samples in %s", model.name, len(rows), out)
    return summary


def finished(out_dir: str | Path, ident: dict, tasks: list[Task], samples: int) -> dict | None:
    """out_dir's summary when it is a finished evaluation of these; None when there is
    nothing or part of it (go on); ValueError when it is another evaluation (`ident`:
    `tritonrl.evaluate.identity.eval_identity`'s)."""
    check_folder(out_dir, ident, tasks)
    path = Path(out_dir) / SUMMARY
    if not path.is_file():
        return None
    old = json.loads(path.read_text())
    done = done_samples(Path(out_dir) / SAMPLES)
    asked = (old.get("task_ids"), old.get("samples"))
    if all((t.id, i) in done for t in tasks for i in range(samples)) and asked == (
            sorted(t.id for t in tasks), samples):  # fmt: skip
        return old
    return None
