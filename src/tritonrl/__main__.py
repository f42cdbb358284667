"""`python -m tritonrl` is the `tritonrl` command."""

from tritonrl.cli import app

app()
