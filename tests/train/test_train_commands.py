"""`tritonrl rl --help` (`tritonrl.train.commands`): what a resumed RL may change."""


def test_rl_help_names_every_section_and_key_a_resumed_rl_may_change():
    import re

    from typer.testing import CliRunner

    from tritonrl.cli import app
    from tritonrl.train.rl import RL_FREE_KEYS, RL_SECTIONS

    r = CliRunner().invoke(app, ["rl", "--help"], terminal_width=400)
    text = re.sub(r"[\s│]+", " ", r.output)  # the help box's wrapping and borders
    for section in RL_SECTIONS:
        assert f" {section}" in text, section
    for section, keys in RL_FREE_KEYS.items():
        for key in keys:
            assert f"{section}.{key}" in text, key
