"""The Task model: validation of KernelBench-format references, file names."""

import pytest

from tritonrl.tasks.task import (
    Task,
    TaskLoadError,
    parse_file_name,
    validate_reference,
)

GOOD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.relu()

n = 16

def get_inputs():
    return [torch.randn(n)]
"""


def test_valid_reference_builds_a_task():
    task = Task(id="t", level=1, name="Relu", source=GOOD, origin="mem")
    assert task.solution is None
    assert validate_reference(GOOD, "mem").body  # returns the parsed module


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        (GOOD.replace("class Model", "class Net"), "class Model"),
        (GOOD.replace("def get_inputs", "def make_inputs"), "get_inputs()"),
        ("import torch\n", "class Model and get_inputs()"),
    ],
)
def test_missing_pieces_are_named(source, missing):
    with pytest.raises(TaskLoadError) as e:
        Task(id="t", level=1, name="x", source=source, origin="some/file.py")
    assert "some/file.py" in str(e.value)
    assert f"missing {missing}" in str(e.value)


def test_syntax_error_names_file_and_line():
    with pytest.raises(TaskLoadError, match=r"bad\.py: syntax error at line 2"):
        validate_reference("x = 1\nclass Model(:\n", "bad.py")


def test_null_bytes_are_a_load_error_not_a_crash():
    with pytest.raises(TaskLoadError, match="bad.py"):
        validate_reference("x = 1\x00\n", "bad.py")


def test_file_names():
    assert parse_file_name("12_Gemm_ReLU.py") == (12, "Gemm_ReLU")
    assert parse_file_name("softmax.py") == (None, "softmax")
