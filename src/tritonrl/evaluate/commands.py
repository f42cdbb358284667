"""`tritonrl eval`: a model's kernels measured by the verifier, and evaluations compared.

    tritonrl eval --model runs/demo --tasks run:runs/demo builtin:all --samples 4 --out evals/rl
    tritonrl eval --model openai:gpt-4o@https://api.openai.com/v1 --tasks builtin:level2 \
        --samples 2 --out evals/gpt4o
    tritonrl eval --compare evals/base evals/sft evals/rl [--json]

`--config` and `--section.key value` overrides as for every stage (the verifier's
`verify.*`, sampling's `rl.temperature` and `rl.max_completion_length`). An eval into a
folder that holds part of the same evaluation continues it; one that is finished says so.
Exit 0 on success, 2 for bad input, 1 when the evaluation fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonrl.cli_config import CONFIG, OVERRIDES, command_config

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
COLUMNS = ("n", "valid", "compiled", "correct", "fast_1", "fast_2", "geomean_speedup", "flagged")


def _cell(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def compare(dirs: list[Path], as_json: bool) -> None:
    """Several evaluations' overall metrics side by side."""
    rows = {}
    for d in dirs:
        path = Path(d) / "summary.json"
        if not path.is_file():
            err.print(f"[red]error:[/red] {escape(str(d))}: no summary.json (not a finished eval)")
            raise typer.Exit(2)
        summary = json.loads(path.read_text())
        rows[str(d)] = {"model": summary["model"], **summary["metrics"]["overall"]}
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    passes = sorted({k for r in rows.values() for k in r if k.startswith("pass@")},
                    key=lambda k: int(k[5:]))  # fmt: skip
    table = Table(title="evaluations side by side", title_justify="left")
    for column in ("eval", "model", *COLUMNS, *passes):
        table.add_column(column)
    for d, r in rows.items():
        table.add_row(d, r["model"], *(_cell(r.get(c)) for c in (*COLUMNS, *passes)))
    out.print(table)


def eval_command(
    ctx: typer.Context,
    model: str | None = typer.Option(
        None, "--model", help="Model dir, adapter, .gguf, run, or openai:MODEL@URL."
    ),
    tasks: list[str] = typer.Option(
        [], "--tasks", help="Task sources: builtin:..., a KernelBench dir, gen:N[:SEED], run:RUN."
    ),
    samples: int = typer.Option(1, "--samples", min=1, help="Answers per task (pass@k up to k)."),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Folder for samples.jsonl and summary.json."
    ),
    levels: str | None = typer.Option(None, "--levels", help="Only these levels, e.g. 1,2."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    device: str = typer.Option(
        "auto", "--device", help="Where a local model generates: auto, cpu, cuda."
    ),
    compare_dirs: list[Path] = typer.Option(
        [], "--compare", help="Finished eval folders to put side by side."
    ),
    as_json: bool = typer.Option(False, "--json", help="With --compare: JSON."),
    config: str | None = CONFIG,
) -> None:
    """Evaluate a model's kernels with the verifier (or compare evaluations)."""
    if compare_dirs:
        compare(compare_dirs + [Path(a) for a in ctx.args], as_json)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tritonrl.evaluate.runner import eval_tasks, evaluate, open_model

    cfg, rest = command_config(ctx, config, "verify", max_args=None)
    tasks = tasks + rest  # --tasks A B: click gives the first, the rest are positional
    if model is None or not tasks or out_dir is None:
        err.print("[red]error:[/red] give --model, --tasks and --out (or --compare DIR...)")
        raise typer.Exit(2)
    try:
        wanted = [int(x) for x in levels.split(",")] if levels else None
        task_list = eval_tasks(tasks, wanted, limit)
        import torch

        where = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        lm = open_model(model, where)
    except (ValueError, OSError) as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    summary_path = out_dir / "summary.json"
    if summary_path.is_file():
        old = json.loads(summary_path.read_text())
        if (old["model"], old["tasks"], old["samples"]) != (lm.name, len(task_list), samples):
            what = f"{old['model']} ({old['tasks']} tasks x {old['samples']})"
            err.print(f"[red]error:[/red] {out_dir} holds an evaluation of {what}: choose "
                      "another --out")  # fmt: skip
            raise typer.Exit(2)
    with Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), console=err) as bar:
        job = bar.add_task("eval", total=len(task_list) * samples)
        summary = evaluate(lm, task_list, samples, out_dir, cfg,
                           progress=lambda d, t: bar.update(job, completed=d, total=t))  # fmt: skip
    o = summary["metrics"]["overall"]
    out.print(
        f"eval of {lm.name}: {summary['tasks']} tasks x {samples}: correct {o['correct']:.3f}, "
        f"compiled {o['compiled']:.3f}, fast_1 {_cell(o['fast_1'])}, pass@1 "
        f"{_cell(o.get('pass@1'))}; {o['flagged']} flagged; summary in {summary_path}",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add `eval` to the `tritonrl` app."""
    app.command("eval", context_settings=OVERRIDES)(eval_command)
