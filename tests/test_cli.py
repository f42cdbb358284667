"""The `tritonrl` command itself (`tritonrl.cli`): its version, and every stage command
wired with `--config` and overrides. Each package's commands are tested beside it
(tests/tasks/test_tasks_commands.py, tests/verify/test_verify_commands.py, ...)."""

from cli_process import tritonrl


def test_version():
    import tritonrl as package

    r = tritonrl("--version")
    assert r.returncode == 0 and r.stdout == f"tritonrl {package.__version__}\n"


def test_every_stage_command_takes_config_and_overrides():
    from typer.testing import CliRunner

    from tritonrl.cli import app

    for command in (["verify"], ["tasks", "check"], ["prepare"], ["distill"],
                    ["tiny-model"], ["sft"], ["serve"], ["export-verl"]):  # fmt: skip
        r = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
        assert r.exit_code == 0 and "--config" in r.output and "FILE|NAME" in r.output, command


def _commands(command, path):
    """(path, click command) of `command` and every command below it."""
    yield path, command
    if hasattr(command, "commands"):  # a group
        for name, sub in command.commands.items():
            yield from _commands(sub, [*path, name])


def test_no_help_text_has_a_bracket_that_rich_would_eat():
    """Help is Rich markup: an unescaped `[word]` (an extra's name, `tritonrl[ray]`) is read
    as a style tag and vanishes from `--help`."""
    import re

    import typer

    from tritonrl.cli import app

    commands = _commands
    eaten = [(" ".join(path), text)
             for path, command in commands(typer.main.get_command(app), [])
             for text in [command.help or "", *(getattr(p, "help", None) or ""
                                                for p in command.params)]
             if re.search(r"(?<!\\)\[[a-z][a-z_-]*\]", text)]  # fmt: skip
    assert not eaten, eaten
    assert len(list(commands(typer.main.get_command(app), []))) > 20  # every command seen


def _prose_blocks(output: str) -> list[list[str]]:
    """The prose of a rendered `--help`, as blocks of the lines it was wrapped into: each
    paragraph of the description, and each cell of an Arguments/Options/Commands panel
    of more than one line (a row's help column starts where its next lines do). Lines
    that are only typer's own `[default: 0]` or `[required]`, which it sets on a line of
    their own on purpose, are left out."""
    blocks: list[list[str]] = []
    row: list[str] = []  # a panel row's lines, between its borders
    paragraph: list[str] = []

    def end_row():
        if len(row) > 1:
            column = len(row[1]) - len(row[1].lstrip())
            blocks.append([line[column:].strip() for line in row])
        row.clear()

    for line in output.splitlines():
        if line.startswith("│"):
            content = line[1:].removesuffix("│").rstrip()
            if len(content) - len(content.lstrip()) < 8:  # a new row: its name first
                end_row()
            row.append(content)
            continue
        end_row()
        text = line.strip()
        if text and not line.startswith(("╭", "╰")) and not text.startswith("Usage:"):
            paragraph.append(text)
        elif paragraph:
            blocks.append(paragraph)
            paragraph = []
    return [[ln for ln in b if not (ln.startswith("[") and ln.endswith("]"))] for b in blocks]


def _broken_early(block: list[str]) -> list[tuple[str, str]]:
    """(line, next line) of `block` where the line ends although the next one's first
    word would have fit on it: the renderer wraps greedily, so only a hard line break in
    the help text ends a line there. The longest line of the block stands for the wrap
    width (it is at most that), so a line reported is certainly broken early."""
    longest = max((len(line) for line in block), default=0)
    return [(a, b) for a, b in zip(block, block[1:], strict=False)
            if b and len(a) + 1 + len(b.split()[0]) <= longest]  # fmt: skip


def test_help_is_wrapped_paragraphs_with_no_fragment_left_by_a_hard_break():
    """Docstrings and option strings are wrapped for the source; `--help` must rewrap
    them to the terminal. Typer's rich help kept their line breaks, so at 80 columns a
    source line longer than the terminal left its last word alone ("VALUE", "a task",
    "run.store,") before the next source line. Every command, at several widths."""
    import typer
    from typer.testing import CliRunner

    from tritonrl.cli import app

    broken, seen = [], 0
    for path, _ in _commands(typer.main.get_command(app), []):
        for width in (80, 100, 120):
            r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
            assert r.exit_code == 0, (path, r.output)
            blocks = _prose_blocks(r.output)
            seen += sum(len(b) > 1 for b in blocks)
            broken += [(" ".join(path), width, pair) for b in blocks for pair in _broken_early(b)]
    assert not broken, broken
    assert seen > 50  # the check saw wrapped prose, in the description and in panels
    assert _broken_early(["Without --config the run's recorded config is the base; every",
                          "VALUE", "overrides one field"])  # fmt: skip


def test_log_lines_name_their_rank_in_a_launch_of_several_processes():
    import logging

    from tritonrl.cli import log_format

    record = logging.LogRecord("tritonrl.train.rl", logging.INFO, "", 0, "step", None, None)
    line = logging.Formatter(log_format({"WORLD_SIZE": "2", "RANK": "1"})).format(record)
    assert line == "INFO [rank 1] tritonrl.train.rl: step"
    for alone in ({}, {"WORLD_SIZE": "1", "RANK": "0"}):
        assert logging.Formatter(log_format(alone)).format(record) == "INFO tritonrl.train.rl: step"
