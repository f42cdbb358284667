"""The `tritonrl` command as a user runs it, for the tests of each package's commands:
a real subprocess (`python -m tritonrl`), its real exit code and output."""

import subprocess
import sys


def tritonrl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonrl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
