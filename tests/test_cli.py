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


def test_no_help_text_has_a_bracket_that_rich_would_eat():
    """Help is Rich markup: an unescaped `[word]` (an extra's name, `tritonrl[ray]`) is read
    as a style tag and vanishes from `--help`."""
    import re

    import typer

    from tritonrl.cli import app

    def commands(command, path):
        yield path, command
        if hasattr(command, "commands"):  # a group
            for name, sub in command.commands.items():
                yield from commands(sub, [*path, name])

    eaten = [(" ".join(path), text)
             for path, command in commands(typer.main.get_command(app), [])
             for text in [command.help or "", *(getattr(p, "help", None) or ""
                                                for p in command.params)]
             if re.search(r"(?<!\\)\[[a-z][a-z_-]*\]", text)]  # fmt: skip
    assert not eaten, eaten
    assert len(list(commands(typer.main.get_command(app), []))) > 20  # every command seen
