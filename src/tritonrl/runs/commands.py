"""`tritonrl status RUN [--json]`: the stages of a run, read from its manifest; and the
store commands `tritonrl resume --store URL [--run-dir DIR]` (`runs/resume.py`) and
`tritonrl runs list --store URL`.

    tritonrl status runs/demo           a table: stage, status, step, artifacts (the last
                                        checkpoint of each stage among them), error; then
                                        where it resumed, its store and last sync
    tritonrl status runs/demo --json    {"stages": {name: {"status", "step", ...}},
                                         "resumed_from": null | {"stage", "step",
                                         "checkpoint", "store"?}, "store": null | {"url",
                                         "last_sync", "last_error"}}

A stage is pending only while work on it is still to do (the pipeline plans it); one
never started that nothing plans is "not run" (`manifest.shown_stages`, which `runs
list`, `report` and `resume` read too). `resumed_from` (in both forms) is where the run
last resumed, as the stage that resumed records it in its info
(`resumed_from_checkpoint`): one value, shown twice.

`register(app, continue_pipeline)` adds the commands to the `tritonrl` typer app.
`status` and `runs list` only read: they never change a run. Exit 0 on success, 2 when
RUN is not a run directory or a store cannot be used (the message names the URL and the
credential variables); `resume` exits with the code of the stage it continued.
"""

from __future__ import annotations

import json
import logging

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonrl.runs.manifest import NOT_RUN, Run, RunError, shown_stages
from tritonrl.runs.resume import LAYOUT, ContinuePipeline, continue_run, list_store, restore
from tritonrl.runs.store import StoreError

_STYLE = {
    "pending": "cyan",
    NOT_RUN: "dim",
    "running": "yellow",
    "done": "green",
    "failed": "red",
    "interrupted": "magenta",
}


def _table(run: Run) -> Table:
    table = Table(title=str(run.path), title_justify="left")
    # the artifacts' column as wide as its longest line (up to 60): the error column,
    # prose, wraps between words first
    longest = max((len(f"{k}={v}") for r in run.stages.values()
                   for k, v in r["artifacts"].items()), default=1)  # fmt: skip
    for column in ("stage", "status", "step", "artifacts", "error"):
        width = min(longest, 60) if column == "artifacts" else None
        table.add_column(column, overflow="fold", min_width=width)
    for name, record in shown_stages(run.data).items():
        status = record["status"]
        shown = f"[{_STYLE.get(status, '')}]{status}[/]"
        error = escape(record.get("error") or "")
        if run.orphaned(name):
            shown = "[yellow]running? (its process is gone)[/]"
            error = (f"process {record['owner']['pid']} ended without a word (killed?); "
                     "run the same command to go on from the last checkpoint")  # fmt: skip
        # one a line: a narrow terminal wraps between them, never inside a path
        artifacts = "\n".join(f"{k}={v}" for k, v in record["artifacts"].items())
        table.add_row(name, shown, str(record["step"]), artifacts or "-", error)
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
    data = run.status_dict()
    for line in _summary(data):
        console.print(line, markup=False)


def _summary(data: dict) -> list[str]:
    """The lines under the table: where the run resumed, its store and last sync."""
    resumed = data["resumed_from"]
    lines = ["resumed from: none"]
    if resumed:
        where = f" (restored from {resumed['store']})" if resumed.get("store") else ""
        checkpoint = resumed["checkpoint"] or "no checkpoint (the stage started over)"
        lines = [f"resumed from: {resumed['stage']} step {resumed['step']}, "
                 f"{checkpoint}{where}"]  # fmt: skip
    store = data.get("store")
    if not store:
        lines.append("store: none (this run is kept only here; set run.store to sync it)")
        return lines
    last = store.get("last_sync")
    synced = "never" if not last else f"{last.get('at')} ({last.get('files', 0)} files up)"
    lines.append(f"store: {store['url']}; last sync: {synced}")
    if store.get("last_error"):
        error = store["last_error"]
        lines.append(f"store: last error: {error.get('at')}: {error.get('error')}")
    return lines


def _error(message: str, code: int = 2) -> typer.Exit:
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[red]error:[/red] {escape(message)}"
    )
    return typer.Exit(code)


def _resume(continue_pipeline: ContinuePipeline):
    """The `resume` command, which goes on with a pipeline's run through
    `continue_pipeline` (the pipeline's: runs sit below it)."""

    def resume(
        store: str = typer.Option(..., "--store", help="The run's URL in its store, or a "
                                  "store that holds one run (s3://bucket/runs/demo)."),
        run_dir: str | None = typer.Option(None, "--run-dir", help="Where to restore it "
                                           "(default: runs/<run name>)."),
    ) -> None:  # fmt: skip
        """Fetch a run from its object store and continue it where it stopped."""
        logging.getLogger("tritonrl").setLevel(logging.INFO)
        console = Console(highlight=False, soft_wrap=True)
        try:
            run, skipped = restore(store, run_dir)
            for name, why in skipped:
                console.print(f"skipped checkpoint {name}: {why}", markup=False)
            say = lambda m: console.print(m, markup=False)  # noqa: E731 - one line a message
            code = continue_run(run, continue_pipeline, say=say)
        except (StoreError, RunError, ValueError) as e:
            raise _error(str(e)) from None
        if code:
            raise typer.Exit(code)

    return resume


def runs_list(
    store: str = typer.Option(..., "--store", help="The store URL (s3://bucket/prefix)."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
) -> None:
    """The runs in an object store, with their stages."""
    try:
        found = list_store(store)
    except (StoreError, ValueError) as e:
        raise _error(str(e)) from None
    if as_json:
        typer.echo(json.dumps(found))
        return
    table = Table(title=store, title_justify="left")
    for column in ("run", "updated", "stages", "url"):
        table.add_column(column, overflow="fold")
    for item in found:
        stages = ", ".join(
            f"{name} {rec.get('status')}" + (f"@{rec['step']}" if rec.get("step") else "")
            for name, rec in (item.get("stages") or {}).items()
        )
        table.add_row(item["name"], str(item.get("updated_at") or ""), stages, item["url"])
    console = Console(highlight=False, soft_wrap=True)
    if found:
        console.print(table)
    else:
        console.print(f"no runs in {store} (it and one level below). {LAYOUT}")


def register(app: typer.Typer, continue_pipeline: ContinuePipeline) -> None:
    """Add `status`, `resume` and `runs list` to the `tritonrl` app; `continue_pipeline`
    (`tritonrl.pipeline.continue_pipeline`) goes on with a run the pipeline drove."""
    app.command("status")(status)
    app.command("resume")(_resume(continue_pipeline))
    runs = typer.Typer(help="Runs kept in an object store.", no_args_is_help=True)
    runs.command("list")(runs_list)
    app.add_typer(runs, name="runs")
