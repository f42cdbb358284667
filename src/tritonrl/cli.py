"""The `tritonrl` command: one sub-command per stage.

    tritonrl tasks list|check ...              the tasks a source holds, their solutions
                                               checked (tritonrl.tasks.commands)
    tritonrl verify TASK KERNEL | --batch ...  candidates through the verifier
                                               (tritonrl.verify.commands)
    tritonrl --version                         the installed version

Every command comes from its package: tasks and verify (above), prepare/distill (data),
tiny-model, convert-gguf, sft, rl (train), eval (evaluate), pipeline and report, status,
resume and runs list (runs), bucket create (runs/bucket.py). This module holds the app,
its global options (--verbose, --version) and the registrations, in the order `--help`
lists them.

Every stage command takes `--config FILE|NAME` and `--section.KEY VALUE` overrides
(`tritonrl.cli_config`). Library code logs; the commands own all terminal output.
"""

from __future__ import annotations

import logging

import typer

from tritonrl import __version__
from tritonrl.data.commands import register as register_data
from tritonrl.evaluate.commands import register as register_eval
from tritonrl.pipeline import continue_pipeline
from tritonrl.pipeline import register as register_pipeline
from tritonrl.runs.bucket import register as register_bucket
from tritonrl.runs.commands import register as register_runs
from tritonrl.tasks.commands import register as register_tasks
from tritonrl.train.commands import register as register_train
from tritonrl.verify.commands import register as register_verify

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__.split("\n")[0])


def _print_version(value: bool) -> None:
    if value:
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


register_tasks(app)
register_verify(app)
register_data(app)
register_train(app)
register_runs(app, continue_pipeline)
register_bucket(app)
register_eval(app)
register_pipeline(app)

if __name__ == "__main__":
    app()
