"""Every AST conversion tritonrl makes holds `AST_LOCK` (CPython 3.11's are not
thread-safe): while another thread holds it, none of them can run."""

import threading

import pytest

from tritonrl.astlock import AST_LOCK
from tritonrl.data.convert import code_key
from tritonrl.extract.common import parse
from tritonrl.tasks import load_builtin
from tritonrl.tasks.difficulty import analyze
from tritonrl.tasks.shapes import build_module
from tritonrl.tasks.task import parse_source
from tritonrl.verify.inputs import _declared_dtypes
from tritonrl.verify.static import static_check

TASK = load_builtin("level1/1_ReLU").tasks[0]


@pytest.mark.parametrize(
    "convert",
    [
        lambda: parse("x = 1\n"),
        lambda: parse_source("x = 1\n", "<t>"),
        lambda: analyze(TASK.source),
        lambda: build_module(TASK.source),
        lambda: _declared_dtypes(TASK),
        lambda: static_check("x = 1\n"),
        lambda: code_key("x = 1\n"),
    ],
    ids=["extract.parse", "task.parse_source", "difficulty.analyze", "shapes.build_module",
         "inputs._declared_dtypes", "static.static_check", "convert.code_key"],
)  # fmt: skip
def test_a_conversion_waits_while_the_lock_is_held(convert):
    done = threading.Event()

    def run():
        convert()
        done.set()

    with AST_LOCK:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert not done.wait(0.5), "converted an AST without the lock"
    assert done.wait(30), "never ran once the lock was free"
    t.join()
