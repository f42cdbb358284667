"""`tritonrl status RUN [--json]`: the stages of a run, read from its manifest.

    tritonrl status runs/demo           a table: stage, status, step, artifacts, error
    tritonrl status runs/demo --json    {"stages": {name: {"status", "step", ...}},
                                         "resumed_from": null}

`resumed_from` (in both forms) is the checkpoint the run last resumed from, as the stage
that resumed records it in its info (`resumed_from_checkpoint`): one value, shown twice.

`register(app)` adds the command to the `tritonrl` typer app. It only reads the manifest:
it never changes a run. Exit 0 on success, 2 when RUN is not a run directory.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonrl.runs.manifest import Run, RunError

_STYLE = {
    "pending": "dim",
    "running": "yellow",
    "done": "green",
    "failed": "red",
    "interrupted": "magenta",
}


def _table(run: Run) -> Table:
    table = Table(title=str(run.path), title_justify="left")
    for column in ("stage", "status", "step", "artifacts", "error"):
        table.add_column(column, overflow="fold")
    for name, record in run.stages.items():
        status = record["status"]
        artifacts = ", ".join(f"{k}={v}" for k, v in record["artifacts"].items())
        table.add_row(
            name,
            f"[{_STYLE.get(status, '')}]{status}[/]",
            str(record["step"]),
            artifacts or "-",
            escape(record.get("error") or ""),
        )
    return table


def status(
    run_dir: str = typer.Argument(..., metavar="RUN", help="The run directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the stages as one JSON object."),
) -> None:
    """Print the stages of a run (status, step, artifacts) from its manifest."""
    try:
        run = Run.open(run_dir)
    except RunError as e:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[red]error:[/red] {escape(str(e))}"
        )
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(run.status_dict()))
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print(_table(run))
    console.print(f"resumed from: {run.resumed_from() or 'none'}", markup=False)


def register(app: typer.Typer) -> None:
    """Add `status` to the `tritonrl` app."""
    app.command("status")(status)
