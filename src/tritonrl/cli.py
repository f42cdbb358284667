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

Help is written as docstrings and option strings wrapped for the source; `reflow` joins
each paragraph's lines, for every command, group and parameter of the app (`Reflowed`),
so `--help` wraps it to the terminal: typer's rich help keeps a hard line break, which
left fragments ("VALUE", "a task") on lines of their own.
"""

from __future__ import annotations

import inspect
import logging
import os
import re

import click
import typer
from typer.core import TyperGroup

from tritonrl import __version__
from tritonrl.cli_config import CONFIG_CHECKS
from tritonrl.config import PARTIAL_TORCH_OPS
from tritonrl.data.commands import register as register_data
from tritonrl.evaluate.commands import register as register_eval
from tritonrl.pipeline import continue_pipeline
from tritonrl.pipeline import register as register_pipeline
from tritonrl.runs.bucket import register as register_bucket
from tritonrl.runs.commands import register as register_runs
from tritonrl.tasks.commands import register as register_tasks
from tritonrl.train.commands import register as register_train
from tritonrl.train.rl.data import fresh_families
from tritonrl.verify.commands import register as register_verify
from tritonrl.verify.static.op_names import check_allowed_ops


def check_named_ops(config) -> None:
    """The ops a user names in `verify.allowed_torch_ops` beyond the default list are ops
    the checker can match (`op_names.check_allowed_ops`, which reads torch's names)."""
    check_allowed_ops([op for op in config.verify.allowed_torch_ops if op not in PARTIAL_TORCH_OPS])


def check_fresh_families(config) -> None:
    """The task families `rl.fresh_source families:NAMES` names exist."""
    if config.rl.fresh_source.startswith("families"):
        fresh_families(config.rl.fresh_source)


CONFIG_CHECKS += [check_named_ops, check_fresh_families]


def reflow(text: str | None) -> str | None:
    """Help `text` with each paragraph's lines joined by single spaces: paragraphs stay
    apart, a paragraph marked with click's `\\b` stays as written, and so does what
    follows `\\f`."""
    if not text:
        return text
    body, cut, hidden = inspect.cleandoc(text).partition("\f")
    paragraphs = [p if p.startswith("\b") else " ".join(p.split())
                  for p in re.split(r"\n\s*\n", body.strip())]  # fmt: skip
    return "\n\n".join(paragraphs) + cut + hidden


def _reflow_all(command: click.Command) -> None:
    command.help = reflow(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = reflow(param.help)
    for sub in getattr(command, "commands", {}).values():  # a group's commands
        _reflow_all(sub)


class Reflowed(TyperGroup):
    """The `tritonrl` group: every command's, group's and parameter's help `reflow`ed
    once it is built (typer builds the sub-commands first, so they are all here)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _reflow_all(self)


app = typer.Typer(
    cls=Reflowed, no_args_is_help=True, add_completion=False, help=__doc__.split("\n")[0]
)


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
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format=log_format(os.environ))  # fmt: skip


def log_format(env) -> str:
    """The log lines' format: in one of several processes of a launch (`accelerate
    launch`, `torchrun`: WORLD_SIZE above 1), each line names its rank."""
    many = env.get("WORLD_SIZE", "1").strip() not in ("", "0", "1")
    rank = f" [rank {env.get('RANK', '?')}]" if many else ""
    return f"%(levelname)s{rank} %(name)s: %(message)s"


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
