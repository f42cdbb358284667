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
