"""How every `tritonrl` command that runs a stage gets its config: one function for all.

    tritonrl verify TASK KERNEL --config qwen7b-1gpu --verify.timeout_s 30
    tritonrl tasks check builtin:level1 --verify.device cpu
    tritonrl prepare --source builtin --out data --data.validation_fraction 0.2

`--config FILE|NAME` is a YAML file or the name of one shipped in configs/ (default
tiny-cpu); every `--section.key VALUE` (or `--section.key=VALUE`) overrides one field,
anywhere on the line. A command registers with `context_settings=OVERRIDES`, takes
`ctx: typer.Context` and `config: str | None = CONFIG`, and calls `command_config`.

A command's short flags (`--device`, `--policy`, `--val-fraction`, `--max-samples`) are
shortcuts: each names one field and default to None, so the config is the one default;
given, a shortcut is the override of its field, and beside that override it is refused.

Click hands an override it does not know to the command's positional parameters (a
variadic SOURCE... takes them all); `command_config` takes them back out and returns the
real positional arguments. A bad file, key, value or option clash prints one line that
names what to fix and exits 2.

`command_errors` is how a command ends on an error: one line, `error: ...` and exit 2
for what the user can fix (a bad config, a missing run), `X failed: Type: message` and
exit 1 for anything else a stage raised.

What it does NOT do: commands that read no config field (`tasks list`, `status`) take no
`--config`; a run's manifest records the config of the stage that writes it (`sft`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tritonrl.config import Config
from tritonrl.config_loader import load_config, override_config, split_overrides

log = logging.getLogger(__name__)

# Checks of a command's config beyond tritonrl.config's own, which may need more than it
# imports (the verifier's op names, torch's namespaces); the CLI (tritonrl.cli) adds them.
CONFIG_CHECKS: list[Callable[[Config], None]] = []

OVERRIDES = {"allow_extra_args": True, "ignore_unknown_options": True}
CONFIG = typer.Option(
    None,
    "--config",
    metavar="FILE|NAME",
    help="YAML file or configs/ name (default tiny-cpu); --section.key VALUE overrides a field.",
)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    _err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(2)


def command_config(
    ctx: typer.Context,
    path: str | None,
    stage: str,
    shortcuts: Mapping[str, tuple[str, Any]] | None = None,
    positional: Sequence[str | None] = (),
    max_args: int | None = 0,
    base: tuple[str, dict] | None = None,
) -> tuple[Config, list[str]]:
    """(the resolved, checked config, the positional arguments) of the command `stage`.

    `shortcuts` maps a flag to (the field it sets, its value or None when not given),
    e.g. `{"--device": ("verify.device", device)}`; `positional` are the values click gave
    the command's positional parameters, in order (None for one not filled), of which it
    takes at most `max_args` (None: any number). `base` is (its name, `{section: {key:
    value}}`): the config the overrides apply to when no --config is given (`rl` takes the
    one its run recorded), in place of the default file."""
    tokens = [str(p) for p in positional if p is not None] + list(ctx.args)
    args, overrides = split_overrides(tokens)
    if max_args is not None and len(args) > max_args:
        _fail(f"unexpected argument {args[max_args]!r} (overrides are --section.key VALUE)")
    given = {t[2:].partition("=")[0] for t in overrides if t.startswith("--")}
    for flag, (name, value) in (shortcuts or {}).items():
        if value is None:
            continue
        if name in given:
            _fail(f"{flag} is short for --{name}; give one of them, not both")
        overrides += [f"--{name}", str(value)]
    try:
        if path is None and base is not None:
            config = override_config(base[1], overrides, base[0], stage=stage)
        else:
            config = load_config(path, overrides, stage=stage)
        for check in CONFIG_CHECKS:
            check(config)
        return config, args
    except ValueError as e:
        _fail(str(e))


@contextlib.contextmanager
def command_errors(
    usage: tuple[type[Exception], ...] = (ValueError,), failed: str | None = None
) -> Iterator[None]:
    """A command's errors as its exit: a `usage` error (a bad config, a missing run, a
    store that cannot be used) prints `error: <message>` and exits 2; with `failed` (the
    stage's name, e.g. "SFT"), any other Exception prints `<failed> failed: Type: message`
    (the traceback at debug level) and exits 1. Without `failed` it is raised as it is,
    and so is a BaseException (`Interrupted`, KeyboardInterrupt) always."""
    try:
        yield
    except typer.Exit:
        raise
    except usage as e:
        _err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    except Exception as e:
        if failed is None:
            raise
        log.debug("%s failed", failed, exc_info=True)
        _err.print(f"[red]{failed} failed:[/red] {type(e).__name__}: {escape(str(e))}")
        raise typer.Exit(1) from None
