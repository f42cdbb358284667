"""Fixtures of the model tests: the CLI app of the training commands (`tiny-model` and
`convert-gguf` are registered there)."""

import pytest
import typer


@pytest.fixture(scope="session")
def train_app() -> typer.Typer:
    """A typer app with the training commands (tiny-model, convert-gguf, ...) registered."""
    from tritonrl.train.commands import register

    app = typer.Typer()

    @app.callback()
    def main():
        pass

    register(app)
    return app
