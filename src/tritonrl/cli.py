"""The `tritonrl` command: one sub-command per stage.

    tritonrl tasks list SOURCE... [--json]     one task per line: id, level, name
    tritonrl tasks check SOURCE... [--device] [--solution FILE]
                                               each task's solution through the verifier
    tritonrl verify TASK KERNEL [--json]       verify one candidate (code or completion)
    tritonrl verify --batch CASES.jsonl --out RESULTS.jsonl [--workers N]
                                               many, through the worker pool (streamed)
    tritonrl --version                         the installed version

The stage commands come from their packages: prepare/distill (data), tiny-model,
convert-gguf, sft, rl (train), eval (evaluate), pipeline and report, status, resume and
runs list (runs), bucket create (runs/bucket.py).

SOURCE is a KernelBench-format file, a KernelBench-style directory, or `builtin:level1`,
`builtin:level2`, `builtin:all`. `tasks check` and `verify` (like every stage command)
take `--config FILE|NAME` and `--verify.KEY VALUE` overrides (`tritonrl.cli_config`);
`--device` and `--policy` are short for `--verify.device` and `--verify.policy`. Library
code logs; this module owns all terminal output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
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
from tritonrl.reward import reward_for
from tritonrl.tasks import LoadReport, Task, TaskLoadError, load_tasks

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__.split("\n")[0])
tasks_app = typer.Typer(no_args_is_help=True, help="List and check tasks.")
app.add_typer(tasks_app, name="tasks")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _print_version(value: bool) -> None:
    if value:
        from tritonrl import __version__

        typer.echo(f"tritonrl {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
):
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


def _load(sources: list[str]) -> LoadReport:
    try:
        report = load_tasks(sources)
    except TaskLoadError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    for e in report.errors:
        err.print(f"[yellow]skipped[/yellow] {e}")
    return report


@tasks_app.command("list")
def tasks_list(
    sources: list[str] = typer.Argument(..., help="Files, directories or builtin:..."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
):
    """Print one task per line (id, level, name). Exit 1 if some file could not be loaded."""
    report = _load(sources)
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
    from tritonrl.tasks.loaders import solution_path

    where = ""
    if Path(task.origin).is_file():
        where = f", or save it as {solution_path(task.origin)}"
    return f"task has no reference solution (pass --solution FILE{where})"


def _with_solution(report: LoadReport, solution: Path) -> None:
    """`tasks check --solution FILE`: FILE is the solution of the one task loaded."""
    if len(report.tasks) != 1:
        _usage(
            f"--solution goes with one task, and SOURCE names {len(report.tasks)}; for "
            "several, put each solution in a solutions/ folder beside the tasks"
        )
    try:
        text = solution.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        _usage(f"--solution {solution}: {getattr(e, 'strerror', None) or e}")
    report.tasks[0] = dataclasses.replace(report.tasks[0], solution=text)


def _check_one(task: Task, config: VerifyConfig) -> dict:
    """A task's own solution through the full verifier: correct, with no flag."""
    from tritonrl.verify import verify

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


def _verify_config(ctx: typer.Context, path, stage: str, shortcuts: dict, args, max_args):
    """(the command's VerifyConfig with its device resolved, its positional arguments)."""
    from tritonrl.verify.compare import resolve_device

    config, positional = command_config(ctx, path, stage, shortcuts, args, max_args)
    try:
        device = resolve_device(config.verify.device)
    except ValueError as e:
        _usage(f"verify.device: {e} (set --verify.device, or --device)")
    return dataclasses.replace(config.verify, device=device), positional


@tasks_app.command("check", context_settings=OVERRIDES)
def tasks_check(
    ctx: typer.Context,
    sources: list[str] = typer.Argument(..., help="Files, directories or builtin:..."),
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
    verify_config, sources = _verify_config(ctx, config, "tasks check", shortcuts, sources, None)
    if not sources:
        _usage("give at least one SOURCE (a task file, a folder, or builtin:...)")
    device = verify_config.device
    report = _load(sources)
    if solution is not None:
        _with_solution(report, solution)
    results = []
    progress = Progress(
        TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=as_json or not sys.stderr.isatty(),
    )  # fmt: skip
    with progress, ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        bar = progress.add_task("check", total=len(report.tasks))
        futures = [pool.submit(_check_one, t, verify_config) for t in report.tasks]
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


def _one_task(spec: str) -> Task:
    report = _load([spec])
    if len(report.tasks) != 1:
        err.print(
            f"[red]error:[/red] {spec!r} names {len(report.tasks)} tasks; give exactly one "
            "(a file, or an id such as builtin:level1/1_ReLU)"
        )
        raise typer.Exit(2)
    return report.tasks[0]


def _read_kernel(kernel: str) -> bytes:
    """KERNEL is a file, `-` for stdin, or the code itself."""
    if kernel == "-":
        return sys.stdin.buffer.read()
    path = Path(kernel)
    try:
        if path.is_file():
            return path.read_bytes()
    except OSError:
        pass  # a long code string is not a path
    if "\n" in kernel or "ModelNew" in kernel:
        return kernel.encode()
    err.print(
        f"[red]error:[/red] KERNEL {kernel!r}: no such file (give a file, - for stdin, "
        "or the code itself)"
    )
    raise typer.Exit(2)


@app.command("verify", context_settings=OVERRIDES)
def verify_cmd(
    ctx: typer.Context,
    task: str | None = typer.Argument(
        None, help="One task: a file or an id like builtin:level1/1_ReLU."
    ),
    kernel: str | None = typer.Argument(
        None, help="Candidate file (code or completion), or - for stdin."
    ),
    config_path: str | None = CONFIG,
    device: str | None = typer.Option(
        None, help="Short for --verify.device: auto, cpu (Triton interpreter) or cuda."
    ),
    policy: str | None = typer.Option(
        None, help="Short for --verify.policy: strict (all compute in Triton) or partial."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    batch: Path | None = typer.Option(
        None,
        "--batch",
        help='CASES.jsonl, one {"task": ..., "kernel": TEXT} or {"task": ..., '
        '"kernel_file": PATH} per line (PATH relative to the JSONL file\'s folder).',
    ),
    out_path: Path | None = typer.Option(
        None, "--out", help="RESULTS.jsonl for --batch: one result per case, as each finishes."
    ),
    workers: int = typer.Option(
        0, help="--batch: pool lanes (0: one per CPU core; on CUDA at most 16 per GPU)."
    ),
    force: bool = typer.Option(False, "--force", help="--batch: overwrite an existing --out."),
):
    """Verify one candidate kernel, or with --batch many through the worker pool. Exit 0
    whenever every candidate got a verdict, 1 when some --batch line was unusable (its row
    says why), 2 for bad usage. --out is never overwritten without --force. The
    verifier's settings and the reward scheme are the config's verify section (--config,
    --verify.KEY VALUE, e.g. --verify.timeout_s 30)."""
    shortcuts = {"--device": ("verify.device", device), "--policy": ("verify.policy", policy)}
    config, args = _verify_config(ctx, config_path, "verify", shortcuts, (task, kernel), 2)
    task, kernel = (*args, None, None)[:2]
    if batch is not None or out_path is not None:
        if task is not None or kernel is not None or as_json:
            _usage("--batch takes no TASK, KERNEL or --json (results go to --out)")
        if batch is None or out_path is None:
            _usage("--batch and --out go together")
        _verify_batch(batch, out_path, config, workers, force)
        return
    if task is None or kernel is None:
        _usage("give TASK and KERNEL, or --batch CASES.jsonl --out RESULTS.jsonl")
    from tritonrl.verify import verify

    the_task = _one_task(task)
    code = _read_kernel(kernel)
    result = verify(the_task, code, config)
    reward = reward_for(result, config)
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "reward": reward}))
        return
    verdict = "[green]correct[/green]" if result.correct else "[red]not correct[/red]"
    out.print(f"{result.task}: {verdict}, stage {result.stage}, reward {reward:.3f}")
    if result.error:
        out.print(f"  error: {result.error}", markup=False)
    if result.flags:
        out.print(f"  flags: {', '.join(result.flags)}", markup=False)
    for o in result.input_sets:
        out.print(
            f"  {o.name}: {'ok' if o.ok else 'FAIL'} {o.detail if not o.ok else ''}", markup=False
        )
    if result.speedup is not None:
        lo, hi = result.speedup_ci or (result.speedup, result.speedup)
        out.print(f"  speedup {result.speedup:.3f} (95% CI {lo:.3f}-{hi:.3f})")


def _usage(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def _verify_batch(cases_path: Path, out_path: Path, config, workers: int, force: bool) -> None:
    """`verify --batch`: every case through one pool, rows streamed to --out."""
    from tritonrl.verify.batch import read_cases, result_row
    from tritonrl.verify.pool.pool import VerifierPool

    try:
        cases = read_cases(cases_path)
    except OSError as e:
        _usage(f"--batch {cases_path}: {e.strerror or e}")
    try:
        sink = open(out_path, "w" if force else "x", encoding="utf-8")  # noqa: SIM115
    except FileExistsError:
        _usage(f"--out {out_path} exists; pass --force to overwrite it")
    except OSError as e:
        _usage(f"--out {out_path}: {e.strerror or e}")
    good = [c for c in cases if c.error is None]
    bad = [c for c in cases if c.error is not None]
    correct = 0
    progress = Progress(
        TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=not sys.stderr.isatty(),
    )  # fmt: skip

    def emit(row: dict) -> None:
        sink.write(json.dumps(row) + "\n")
        sink.flush()
        progress.advance(bar)

    with sink, progress:
        bar = progress.add_task("verify", total=len(cases))
        for case in bad:
            err.print(f"[yellow]skipped[/yellow] {escape(case.error)}")
            emit(result_row(case, None))
        if good:
            with VerifierPool(config, workers or None) as pool:
                pairs = [(c.task, c.code) for c in good]
                for i, result in pool.imap_unordered(pairs):
                    correct += result.correct
                    emit(result_row(good[i], result, reward_for(result, config)))
    err.print(
        f"{len(cases)} cases: {correct} correct, {len(good) - correct} not correct, "
        f"{len(bad)} without a verdict (bad input); results in {out_path}"
    )
    if bad:
        raise typer.Exit(1)


def _register_stages() -> None:
    """Stage commands that live beside their code (data, training, runs)."""
    from tritonrl.data.commands import register as register_data
    from tritonrl.evaluate.commands import register as register_eval
    from tritonrl.pipeline import continue_pipeline
    from tritonrl.pipeline import register as register_pipeline
    from tritonrl.runs.bucket import register as register_bucket
    from tritonrl.runs.commands import register as register_runs
    from tritonrl.train.commands import register as register_train

    register_data(app)
    register_train(app)
    register_runs(app, continue_pipeline)
    register_bucket(app)
    register_eval(app)
    register_pipeline(app)


_register_stages()

if __name__ == "__main__":
    app()
