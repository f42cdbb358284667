"""`tritonrl tasks list`, `check` and `decontaminate`: the tasks a source holds, each
task's own solution through the full verifier, and training tasks that copy others.

    tritonrl tasks list SOURCE... [--json]     one task per line: id, level, name
    tritonrl tasks check SOURCE... [--device] [--solution FILE]
                                               each task's solution through the verifier
    tritonrl tasks decontaminate TRAIN... --against SOURCE [--against ...]
                  [--form program|forward] [--json]
                                               training tasks equal to a task of SOURCE

SOURCE is any spec `tritonrl.data.sources.load_sources` reads: a KernelBench-format
file, a KernelBench-style directory, `builtin:level1|level2|all|heldout`, the task
families' `fam:[FAMILY:]N[:SEED][:train|heldout|all][:small]`, the generator's
`gen:N[:SEED]`, a run's held-out (`run:RUN`) or training (`train:RUN`) tasks, or a
`tasks.jsonl` that `prepare` wrote. `tasks check` takes `--config FILE|NAME` and
`--verify.KEY VALUE` overrides (`tritonrl.cli_config`); `--device` is short for `--verify.device`.
`register(app)` adds the `tasks` group to the `tritonrl` app; the helpers that load
tasks, refuse bad usage and resolve the verifier's config are the `verify` command's too
(`tritonrl.verify.commands`).

What it does NOT do: verify anything itself (`tritonrl.verify` does, in a sandbox) or
load torch before a command needs it (`tasks list` never does).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tritonrl.cli_config import CONFIG, OVERRIDES, command_config
from tritonrl.config import VerifyConfig
from tritonrl.data.sources import load_sources
from tritonrl.reward import reward_for
from tritonrl.tasks import LoadReport, Task, TaskLoadError
from tritonrl.tasks.decontaminate import FORMS, FORWARD, find_matches
from tritonrl.tasks.loaders import solution_path

SOURCES_HELP = "Task sources: files, folders, builtin:..., fam:..., gen:N:SEED, run:RUN, ..."
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def usage(message: str) -> NoReturn:
    """Bad usage: one line on stderr naming what to fix, exit 2."""
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(2)


def load(sources: list[str]) -> LoadReport:
    """The tasks `sources` name; a source that cannot be read exits 2, a task file that
    cannot be loaded is reported as skipped."""
    try:
        report = load_sources(sources)
    except TaskLoadError as e:
        usage(str(e))
    for e in report.errors:
        err.print(f"[yellow]skipped[/yellow] {escape(str(e))}")
    return report


def verify_config(ctx: typer.Context, path, stage: str, shortcuts: dict, args, max_args):
    """(the command's VerifyConfig with its device resolved, its positional arguments);
    with verify.backend 'ray' the device is left for the cluster's actors to resolve."""
    from tritonrl.verify.compare import resolve_device  # lazy: loads torch

    config, positional = command_config(ctx, path, stage, shortcuts, args, max_args)
    if config.verify.backend == "ray":  # the cluster's device, not this machine's
        return config.verify, positional
    try:
        device = resolve_device(config.verify.device)
    except ValueError as e:
        usage(f"verify.device: {e} (set --verify.device, or --device)")
    return dataclasses.replace(config.verify, device=device), positional


def tasks_list(
    sources: list[str] = typer.Argument(..., help=SOURCES_HELP),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
):
    """Print one task per line (id, level, name). Exit 1 if some file could not be loaded."""
    report = load(sources)
    for t in report.tasks:
        if as_json:
            row = {
                "id": t.id,
                "level": t.level,
                "name": t.name,
                "origin": t.origin,
                "problem_id": t.problem_id,
                "has_solution": t.solution is not None,
            }
            typer.echo(json.dumps(row))
        else:
            typer.echo(f"{t.id}\t{t.level}\t{t.name}")
    if report.errors:
        raise typer.Exit(1)


def _no_solution(task: Task) -> str:
    """Why a task cannot be checked, and the two ways to give it a solution."""
    where = ""
    if Path(task.origin).is_file():
        where = f", or save it as {solution_path(task.origin)}"
    return f"task has no reference solution (pass --solution FILE{where})"


def _with_solution(report: LoadReport, solution: Path) -> None:
    """`tasks check --solution FILE`: FILE is the solution of the one task loaded."""
    if len(report.tasks) != 1:
        usage(
            f"--solution goes with one task, and SOURCE names {len(report.tasks)}; for "
            "several, put each solution in a solutions/ folder beside the tasks"
        )
    try:
        text = solution.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        usage(f"--solution {solution}: {getattr(e, 'strerror', None) or e}")
    report.tasks[0] = dataclasses.replace(report.tasks[0], solution=text)


def _check_one(task: Task, config: VerifyConfig) -> dict:
    """A task's own solution through the full verifier: correct, with no flag."""
    from tritonrl.verify.funnel import verify  # lazy: loads torch

    start = time.perf_counter()
    if task.solution is None:
        return {"task": task.id, "ok": False, "error": _no_solution(task), "flags": [],
                "input_sets": [], "seconds": 0.0, "device": config.device}  # fmt: skip
    r = verify(task, task.solution, config)
    ok = r.correct and not r.flags
    error = r.error or (f"flags: {', '.join(r.flags)}" if r.flags else None)
    return {
        "task": task.id, "ok": ok, "error": error, "flags": r.flags,
        "reward": reward_for(r, config),
        "speedup": r.speedup, "speedup_ci": r.speedup_ci,
        "input_sets": [f"{o.name}: {o.detail}" for o in r.input_sets],
        "seconds": round(time.perf_counter() - start, 3), "device": r.device,
    }  # fmt: skip


def tasks_check(
    ctx: typer.Context,
    sources: list[str] = typer.Argument(..., help=SOURCES_HELP),
    config: str | None = CONFIG,
    device: str | None = typer.Option(
        None, help="Short for --verify.device: auto, cpu (Triton interpreter) or cuda."
    ),
    workers: int = typer.Option(0, help="Verifications at once (0: one per CPU core)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per task."),
    solution: Path | None = typer.Option(
        None, "--solution", help="The solution (ModelNew) of the one task SOURCE names."
    ),
):
    """Verify every task's reference solution with the full verifier (sandbox, every input
    set, every cheating check). A task's solution is --solution FILE, or the file of the
    same name in a solutions/ folder beside the task's folder (solutions/level1/1_ReLU.py
    for level1/1_ReLU.py), as the builtin suite has. Exits 1 if any is refused or
    flagged, lacks a solution, or could not be loaded. The verifier's settings are the
    config's verify section (--config, --verify.KEY VALUE).
    """
    shortcuts = {"--device": ("verify.device", device)}
    checked, sources = verify_config(ctx, config, "tasks check", shortcuts, sources, None)
    if not sources:
        usage("give at least one SOURCE (a task file, a folder, or builtin:...)")
    device = checked.device
    report = load(sources)
    if solution is not None:
        _with_solution(report, solution)
    results = []
    progress = Progress(
        TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=as_json or not sys.stderr.isatty(),
    )  # fmt: skip
    with progress, ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        bar = progress.add_task("check", total=len(report.tasks))
        futures = [pool.submit(_check_one, t, checked) for t in report.tasks]
        for fut in as_completed(futures):
            row = fut.result()
            results.append(row)
            progress.advance(bar)
            if as_json:
                typer.echo(json.dumps(row))
            else:
                status = "[green]PASS[/green]" if row["ok"] else "[red]FAIL[/red]"
                error = f": {row['error']}" if row["error"] else ""
                out.print(f"{status} {row['task']} ({row['seconds']:.1f}s){error}")
    failed = [r for r in results if not r["ok"]]
    if not as_json:
        out.print(f"{len(results) - len(failed)} passed, {len(failed)} failed on {device}")
    if failed or report.errors or not results:
        raise typer.Exit(1)


def tasks_decontaminate(
    train: list[str] = typer.Argument(
        ...,
        help="The training tasks: files, directories, builtin:..., gen:N:SEED, or "
        "prepare's tasks.jsonl.",
    ),
    against: list[str] = typer.Option(
        [],
        "--against",
        help="Tasks not to train on: a KernelBench checkout, builtin:heldout, "
        "a file, gen:N:SEED, fam:N:SEED:heldout; repeat for several.",
    ),
    form: str = typer.Option(
        FORWARD, help="The weakest equality that counts: program, or forward (both)."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object: counts and matches."),
):
    """Report every training task whose reference equals one of the --against tasks: the
    same program once names, docstrings and sizes are set aside (`program`), or the same
    op sequence in forward (`forward`); see tritonrl.tasks.normalize for what counts as
    equal. Exits 1 when any task matched, 0 when none did, 2 for bad usage."""
    if not against:
        usage("give --against SOURCE (a KernelBench checkout, builtin:heldout, a task file)")
    if form not in FORMS:
        usage(f"--form must be one of {', '.join(FORMS)}, not {form!r}")
    train_tasks, against_tasks = load(train).tasks, load(against).tasks
    try:
        matches = find_matches(train_tasks, against_tasks, form)
    except TaskLoadError as e:
        usage(str(e))
    matched = list(dict.fromkeys(m.task for m in matches))
    if as_json:
        typer.echo(json.dumps({
            "train": len(train_tasks), "against": len(against_tasks), "form": form,
            "matched": len(matched), "tasks": matched,
            "matches": [m.to_dict() for m in matches],
        }))  # fmt: skip
    else:
        for m in matches:
            typer.echo(f"{m.task}\t{m.against}\t{m.form}")
        typer.echo(
            f"{len(matched)} of {len(train_tasks)} training tasks equal one of "
            f"{len(against_tasks)} tasks (form {form})"
        )
    if matches:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `tasks` group (`list`, `check`, `decontaminate`) to the `tritonrl` app."""
    tasks_app = typer.Typer(no_args_is_help=True, help="List, check and decontaminate tasks.")
    tasks_app.command("list")(tasks_list)
    tasks_app.command("check", context_settings=OVERRIDES)(tasks_check)
    tasks_app.command("decontaminate")(tasks_decontaminate)
    app.add_typer(tasks_app, name="tasks")
