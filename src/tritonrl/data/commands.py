"""The data stage's commands, `tritonrl prepare` and `tritonrl distill`.

    tritonrl prepare --source kernelbook|builtin|families|PATH --out DIR [--config FILE|NAME]
                     [--data.max_samples 1000] [--data.validation_fraction 0.1]
                     [--labeler openai:MODEL [--labeler-endpoint URL]] [--run RUN_DIR]
    tritonrl distill --endpoint URL --model NAME --variations 5 --tasks SOURCE --out DIR
                     [--api-key KEY] [--rate-limit 1.0] [--run RUN_DIR] [--config ...]
    tritonrl export-verl --tasks SPEC [--tasks SPEC ...] --out DIR [--split train]
                     verl's RL parquet (DIR/SPLIT.parquet; tritonrl.data.verl)

Both read the config like every stage command (`tritonrl.cli_config`): prepare takes
data.max_samples, data.validation_fraction, data.decontaminate_against and
data.decontaminate_form (rows equal to those tasks are dropped and listed), and the
prompts' verify.policy from it (and, for `--source families`, data.family_tasks and
data.families: it prints and records the count per family), and distill the whole
verify section and the sampling section's temperature, top_p and top_k
(`--max-samples`, `--val-fraction`, `--policy`, `--device` are short for those fields'
overrides, not defaults of their own).

`register(app)` adds both to the main Typer app (`tritonrl.cli`). With `--run RUN_DIR`
(opened, or created when it holds no run yet) the stage is marked running, `--out`
defaults to `RUN_DIR/<stage>/` (and must lie inside the run), and on success the files
are recorded in the manifest (`prepare/train`, `prepare/validation`, `prepare/tasks`;
`distill/train`, `distill/tasks`) with the counts as stage info; a failure marks the stage
failed. `sft --run RUN` finds them there (`data.sft_source`, `tritonrl.train.sft.data`).

Exit status: 0 done, 1 the endpoint failed (distill; the answers so far stay cached),
2 bad usage or unusable input (nothing written).

What it does NOT do: no work of its own; `tritonrl.data.kernelbook` and
`tritonrl.data.distill` do it, and this module only parses options and prints.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonrl.cli_config import CONFIG, OVERRIDES, command_config
from tritonrl.config_loader import moved_message
from tritonrl.data.distill import DistillError, distill
from tritonrl.data.heldout import decontaminate
from tritonrl.data.kernelbook import KernelBookError, prepare
from tritonrl.data.sources import load_sources
from tritonrl.data.verl import verl_rows, write_parquet
from tritonrl.runs import Run, RunError
from tritonrl.tasks import TaskLoadError

out_console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
SHOWN = 20  # contaminated rows prepare names on the terminal


def register(app: typer.Typer) -> None:
    """Add `prepare` and `distill` to `app`."""
    app.command("prepare", context_settings=OVERRIDES)(prepare_command)
    app.command("distill", context_settings=OVERRIDES)(distill_command)
    app.command("export-verl", context_settings=OVERRIDES)(export_verl_command)


def export_verl_command(
    ctx: typer.Context,
    tasks: list[str] = typer.Option(
        ...,
        "--tasks",
        help="Task source (builtin:..., a file, a directory, tasks.jsonl); repeatable.",
    ),
    out: Path = typer.Option(..., "--out", help="Output folder; the file is SPLIT.parquet."),
    split: str = typer.Option("train", help="Split name: the file's name and extra_info.split."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing SPLIT.parquet."),
    config: str | None = CONFIG,
):
    """Write the tasks as verl's RL dataset (one row per task: the chat prompt, the
    ground truth `tritonrl.reward.compute_score` resolves). The prompts state the
    config's verify.policy. The train split drops the tasks equal to one of
    data.decontaminate_against (builtin:heldout by default), as prepare does."""
    cfg, _ = command_config(ctx, config, "prepare")
    try:
        task_list = [t for spec in tasks for t in _load_tasks(spec, None)]
    except TaskLoadError as e:
        _fail(str(e))
    if not task_list:
        _fail(f"--tasks {' '.join(tasks)}: no tasks loaded")
    if not split or "/" in split:
        _fail(f"--split {split!r}: give a plain name such as train or validation")
    if split == "train":
        try:
            kept = decontaminate(task_list, cfg, "export-verl --tasks")
        except ValueError as e:
            _fail(str(e))
        if len(kept) < len(task_list):
            err.print(
                f"{len(task_list) - len(kept)} of {len(task_list)} tasks dropped: equal to a "
                f"task of data.decontaminate_against {cfg.data.decontaminate_against} "
                f"({cfg.data.decontaminate_form} form), which verl must not train on",
                markup=False, highlight=False,
            )  # fmt: skip
        if not kept:
            _fail("every task equals one of data.decontaminate_against: nothing to train on")
        task_list = kept
    path = out / f"{split}.parquet"
    if path.exists() and not force:
        _fail(f"{path} exists; pass --force to overwrite it")
    try:
        write_parquet(verl_rows(task_list, split, cfg.verify), path)
    except RuntimeError as e:
        _fail(str(e))
    out_console.print(f"{len(task_list)} tasks -> {path}", markup=False)


def _fail(message: str, code: int = 2):
    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(code)


def _start(run_dir: Path | None, out: Path | None, stage: str):
    """(run or None, output folder); with a run, the stage is marked running."""
    if run_dir is None:
        if out is None:
            _fail("give --out DIR (or --run RUN_DIR to write inside a run)")
        return None, out
    try:
        run = Run.open_or_create(run_dir)
        # --out is relative to where the command runs, like --run: resolved once here
        # (the run would read a relative path as relative to itself and double it).
        out = Path(out).resolve() if out else run.stage_dir(stage)
        run.relpath(out)  # refuses a folder outside the run
        run.start_stage(stage)
    except RunError as e:
        _fail(f"--run {run_dir}: {e}")
    return run, out


def _finish(run, stage: str, files: dict[str, str], names, info: dict) -> None:
    if run is None:
        return
    for name in names:
        run.add_artifact(stage, name, files[name])
    run.set_info(stage, **info)
    run.finish_stage(stage)


def _failed(run, stage: str, message: str, code: int = 2):
    if run is not None:
        run.fail_stage(stage, message)
    _fail(message, code)


def _counts_table(title: str, counts: dict) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    for key, value in counts.items():
        table.add_row(str(key), str(value))
    return table


def prepare_command(
    ctx: typer.Context,
    source: str = typer.Option(
        "kernelbook",
        help="kernelbook (HF hub), builtin, families (the task families: --data.family_tasks "
        "of each, 100; --data.families NAME,... to choose), or a PATH.",
    ),
    config: str | None = CONFIG,
    max_samples: int | None = typer.Option(
        None, "--max-samples", help="Short for --data.max_samples: most examples kept."
    ),
    out: Path | None = typer.Option(None, "--out", help="Output folder."),
    labeler: str | None = typer.Option(
        None, help="Difficulty labels: the AST heuristic (default) or openai:MODEL."
    ),
    labeler_endpoint: str | None = typer.Option(
        None, help="Endpoint for --labeler (default $TRITONRL_LABELER_ENDPOINT / $OPENAI_BASE_URL)."
    ),
    val_fraction: float | None = typer.Option(
        None, "--val-fraction", help="Short for --data.validation_fraction."
    ),
    seed: int = typer.Option(0, help="Seed of the row order and of the split."),
    policy: str | None = typer.Option(
        None, help="Short for --verify.policy: the prompts' policy, strict or partial."
    ),
    run: Path | None = typer.Option(None, "--run", help="Record the files in this run."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    force: bool = typer.Option(False, "--force", help="Overwrite an earlier prepare's --out."),
):
    """Turn KernelBook (the hub's or a local PATH), the builtin tasks or the task families
    into SFT files and a task list.

    The share held out for validation is data.validation_fraction, the most examples
    kept data.max_samples (--config, --data.KEY VALUE). Rows equal to a task of
    data.decontaminate_against (default the held-out builtin tasks; add a KernelBench
    checkout) are dropped and listed."""
    cfg, _ = command_config(ctx, config, "prepare", {
        "--max-samples": ("data.max_samples", max_samples),
        "--val-fraction": ("data.validation_fraction", val_fraction),
        "--policy": ("verify.policy", policy),
    })  # fmt: skip
    if run is None and out is not None and not force:
        held = [n for n in ("train.jsonl", "tasks.jsonl", "summary.json") if (out / n).exists()]
        if held:
            _fail(f"--out {out} already holds a prepare's {', '.join(held)}; pass --force to "
                  "overwrite them, or give another --out")  # fmt: skip
    handle, out_dir = _start(run, out, "prepare")
    try:
        summary = prepare(
            source, out_dir, max_samples=cfg.data.max_samples, seed=seed,
            val_fraction=cfg.data.validation_fraction, policy=cfg.verify.policy,
            allowed_torch_ops=cfg.verify.allowed_torch_ops,
            labeler=labeler, labeler_endpoint=labeler_endpoint,
            include_example=cfg.data.include_example, family_tasks=cfg.data.family_tasks,
            families=cfg.data.families or None,
            decontaminate_against=cfg.data.decontaminate_against,
            decontaminate_form=cfg.data.decontaminate_form,
        )  # fmt: skip
    except (KernelBookError, ValueError) as e:
        _failed(handle, "prepare", str(e))
    info = {k: getattr(summary, k) for k in ("source", "kept", "train", "validation", "dropped")}
    if summary.by_family:
        info["by_family"] = summary.by_family
    info["contaminated"] = sorted({m["task"] for m in summary.contaminated})
    _finish(handle, "prepare", summary.files, ("train", "validation", "tasks"), info)
    if as_json:
        typer.echo(json.dumps(summary.to_dict()))
        return
    out_console.print(
        f"{summary.kept} examples from {summary.rows_read} rows: {summary.train} train, "
        f"{summary.validation} validation -> {out_dir}"
    )
    out_console.print(_counts_table("by level", summary.by_level))
    if summary.by_family:
        out_console.print(_counts_table("by family", summary.by_family))
    if summary.dropped:
        out_console.print(_counts_table("dropped", summary.dropped))
    if summary.contaminated:
        against = ", ".join(summary.decontaminated_against)
        out_console.print(
            f"dropped {len(summary.contaminated)} match(es) with {against} "
            f"({summary.decontaminate_form} form):"
        )
        for m in summary.contaminated[:SHOWN]:
            out_console.print(f"  {m['task']} = {m['against']} ({m['form']})")
        if len(summary.contaminated) > SHOWN:
            more = len(summary.contaminated) - SHOWN
            out_console.print(f"  and {more} more (summary.json lists every one)")


def _load_tasks(spec: str, limit: int | None):
    """The tasks of `spec` (a `TaskLoadError` when it names none readable), the unreadable
    files of a folder said and skipped."""
    report = load_sources(spec)
    for e in report.errors:
        err.print(f"skipped {e}", markup=False, highlight=False)
    return report.tasks[:limit] if limit else report.tasks


def distill_command(
    ctx: typer.Context,
    endpoint: str = typer.Option(..., help="OpenAI-compatible server, e.g. http://host:8000/v1."),
    model: str = typer.Option(..., help="Teacher model name on that server."),
    tasks: str = typer.Option(
        "builtin:all", "--tasks", help="builtin:..., a task file or folder, or tasks.jsonl."
    ),
    variations: int = typer.Option(5, help="Answers asked per task."),
    out: Path | None = typer.Option(None, "--out", help="Output folder (cache inside)."),
    api_key: str | None = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer token."),
    rate_limit: float = typer.Option(1.0, "--rate-limit", help="Requests per second, at most."),
    max_retries: int = typer.Option(5, "--max-retries", help="Retries on 429/5xx/timeouts."),
    temperature: float | None = typer.Option(None, hidden=True),  # moved: refused
    max_tokens: int = typer.Option(16384, "--max-tokens", help="Longest answer."),
    timeout: float = typer.Option(600.0, help="Seconds to wait for one answer."),
    limit: int | None = typer.Option(None, help="Only the first N tasks."),
    device: str | None = typer.Option(
        None, help="Short for --verify.device: the verifier's auto, cpu or cuda."
    ),
    policy: str | None = typer.Option(
        None, help="Short for --verify.policy: verifier and prompt policy, strict or partial."
    ),
    run: Path | None = typer.Option(
        None, "--run", help="Record the files in this run: sft --run trains on them."
    ),
    config_path: str | None = CONFIG,
):
    """Ask a teacher model for kernels; keep the verified-correct ones as SFT data.

    The teacher is sampled as the config's sampling section says (--sampling.temperature,
    --sampling.top_p, --sampling.top_k); the answers are verified with its verify section
    (--config, --verify.KEY)."""
    if temperature is not None:
        _fail(moved_message("distill --temperature", "sampling.temperature"))
    cfg, _ = command_config(ctx, config_path, "distill", {
        "--device": ("verify.device", device), "--policy": ("verify.policy", policy),
    })  # fmt: skip
    config = cfg.verify
    handle, out_dir = _start(run, out, "distill")
    try:
        task_list = _load_tasks(tasks, None)
        kept = decontaminate(task_list, cfg, "distill --tasks")
        if len(kept) < len(task_list):
            err.print(f"{len(task_list) - len(kept)} of {len(task_list)} tasks left out: equal "
                      f"to a task of data.decontaminate_against "
                      f"{cfg.data.decontaminate_against}, which no training data may copy",
                      markup=False, highlight=False)  # fmt: skip
        task_list = kept[:limit] if limit else kept
        if not task_list:
            raise ValueError("every task equals one of data.decontaminate_against: none to ask")
        summary = distill(
            task_list, endpoint, model, out_dir, variations=variations, api_key=api_key,
            rate_limit_per_s=rate_limit, max_retries=max_retries, verify_config=config,
            sampling=cfg.sampling, max_tokens=max_tokens, timeout_s=timeout,
        )  # fmt: skip
    except DistillError as e:
        cached = f"answers received so far are cached in {out_dir / 'cache'}; rerun to resume"
        _failed(handle, "distill", f"{e}\n{cached}", 1)
    except (TaskLoadError, ValueError, TypeError) as e:
        _failed(handle, "distill", str(e))
    info = {k: getattr(summary, k) for k in ("model", "answers", "kept", "dropped")}
    _finish(handle, "distill", summary.files, ("train", "tasks"), info)
    out_console.print(
        f"kept {summary.kept} of {summary.answers} answers for {summary.tasks} tasks "
        f"({summary.requests} requests, {summary.cache_hits} cached) -> {summary.files['train']}"
    )
    if summary.dropped:
        out_console.print(_counts_table("dropped", summary.dropped))
