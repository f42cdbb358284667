"""The normal forms of a reference: what counts as the same program, and as the same
forward op sequence. The references are written here."""

import pytest

from tritonrl.tasks import TaskLoadError, load_builtin
from tritonrl.tasks.normalize import FORWARD, PROGRAM, normal_form

BASE = '''"""Linear, scaled, softmax over the features."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = softmax(scale * (x @ W^T + b), dim=1)."""

    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)  # the GEMM
        y = y * self.scale
        return torch.softmax(y, dim=1)


batch_size = 32
in_features = 64
out_features = 48
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
'''

# The same program: other names everywhere, other sizes, no docstrings, comments, other
# import spellings, the old super() call, the input drawn into a local, the definitions
# in another order, keyword arguments reordered, torch.rand for torch.randn.
RENAMED = """
from torch import nn
import torch as T
def get_init_inputs():
    return [IN, OUT, ALPHA]

def get_inputs():
    inp = T.rand(B, IN)
    return [inp]

class Model(nn.Module):
    def forward(me, inp):
        h = me.fc(inp)
        h = h * me.alpha
        return T.softmax(h, dim=1)

    def __init__(me, n_in: int, n_out: int, alpha: float):
        super(Model, me).__init__()
        me.fc = nn.Linear(n_in, n_out)
        me.alpha = alpha
        pass

ALPHA = 2.0
OUT = 4096
IN = 1024 * 2
B = 8
"""


def _form(source: str):
    return normal_form(source, "test")


def test_a_copy_with_other_names_sizes_docstrings_and_order_is_the_same_program():
    base = _form(BASE)
    assert _form(BASE) == base  # deterministic
    assert _form(RENAMED).program == base.program, _form(RENAMED).text + "\n---\n" + base.text
    assert _form(RENAMED).forward == base.forward
    assert base.ops == ("linear", "mul", "softmax")


@pytest.mark.parametrize(
    "old, new",
    [
        ("dim=1)", "dim=0)"),  # another axis
        ("y = y * self.scale", "y = y + self.scale"),  # another op
        ("torch.softmax(y", "torch.log_softmax(y"),
        ("torch.randn(batch_size, in_features)", "torch.randint(0, 9, (batch_size, in_features))"),
        ("[torch.randn(batch_size, in_features)]", "[torch.randn(batch_size, in_features).abs()]"),
        # one size twice is not two sizes: a square problem is not a rectangular one
        ("return [in_features, out_features, scale]", "return [in_features, in_features, scale]"),
        # a default of __init__ stays (get_init_inputs may leave the argument out)
        ("out_features, scale):", "out_features, scale=1.0):"),
        ("return [in_features, out_features, scale]", "return [in_features, in_features, scale]"),
    ],
)
def test_a_change_to_the_computation_or_its_inputs_is_another_program(old, new):
    assert old in BASE
    changed = _form(BASE.replace(old, new))
    assert changed.program != _form(BASE).program


def test_the_forward_form_sees_only_the_op_sequence():
    base = _form(BASE)
    other_axis = _form(BASE.replace("dim=1)", "dim=0)"))
    assert other_axis.program != base.program and other_axis.forward == base.forward
    other_op = _form(BASE.replace("torch.softmax(y", "torch.log_softmax(y"))
    assert other_op.forward != base.forward
    assert other_op.key(FORWARD) == other_op.forward and other_op.key(PROGRAM) == other_op.program
    with pytest.raises(ValueError, match="form must be one of program, forward"):
        base.key("tokens")


def _forward(body: str, init: str = "pass") -> tuple[str, ...]:
    source = f"""
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x, w):
        {body}

def get_inputs():
    return [torch.randn(4, 4), torch.randn(4, 4)]
"""
    return _form(source).ops


def test_spellings_of_one_op_are_one_op_in_the_forward_form():
    relu = ("relu",)
    assert _forward("return torch.relu(x)") == relu
    assert _forward("return F.relu(x)") == relu
    assert _forward("return torch.nn.functional.relu(x)") == relu
    assert _forward("return x.relu_()") == relu
    assert _forward("return self.act(x)", "self.act = nn.ReLU()") == relu
    assert _forward("return x @ w") == _forward("return torch.mm(x, w)") == ("matmul",)
    assert _forward("return torch.matmul(x.T, w)") == ("t", "matmul")
    assert _forward("return torch.matmul(x.t(), w)") == ("t", "matmul")
    assert _forward("return x + w") == _forward("return torch.add(x, w)") == ("add",)
    # evaluation order: arguments before the call
    assert _forward("return torch.sigmoid(x * 2.0).sum(dim=1)") == ("mul", "sigmoid", "sum")
    assert _forward("return torch.relu(x)") != _forward("return torch.sigmoid(x)")


def test_a_forward_that_evaluates_no_op_has_no_forward_key():
    empty = normal_form(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x\n\ndef get_inputs():\n    return [torch.randn(2)]\n"
    )
    assert empty.ops == () and empty.forward is None and empty.key(FORWARD) is None


def test_the_normalised_text_shows_what_was_compared():
    text = _form(BASE).text
    assert "self.a0 = torch.nn.Linear(v0, v1)" in text
    assert "return torch.softmax(self.a0(v0) * self.a1, dim=1)" in text  # locals inlined
    assert "return [S0, S1, S2]" in text and "return [torch.randn(S3, S0)]" in text
    assert "batch_size" not in text and "GEMM" not in text and '"""' not in text


def test_a_source_that_does_not_parse_is_a_task_load_error_naming_it():
    with pytest.raises(TaskLoadError, match=r"broken\.py: syntax error"):
        normal_form("class Model(:\n", "broken.py")


def test_every_builtin_task_has_both_forms_and_distinct_programs():
    tasks = load_builtin("all").tasks
    forms = {t.id: normal_form(t.source, t.id) for t in tasks}
    assert all(f.forward is not None for f in forms.values())
    assert len({f.program for f in forms.values()}) == len(tasks)


HELPER = """
import torch

def _scale(t, k):
    out = [t * k for _ in range(2)]
    return out[0] + (lambda u: u)(out[1])

class Model(torch.nn.Module):
    def forward(self, x):
        total = 0
        for part in x.chunk(2):
            total = total + _scale(part, 3)
        return total

size = 16

def get_inputs():
    return [torch.randn(size, size)]
"""


def test_helpers_loops_comprehensions_and_lambdas_are_renamed_consistently():
    renamed = HELPER
    for old, new in (("out", "res"), ("part", "piece"), ("total", "acc"), ("size", "n"),
                     ("[t ", "[tt "), ("(t, k)", "(tt, k)"), ("u: u", "w: w")):  # fmt: skip
        renamed = renamed.replace(old, new)
    assert renamed != HELPER
    assert _form(renamed).program == _form(HELPER).program
    other_helper = HELPER.replace("range(2)", "range(3)")
    assert _form(other_helper).program != _form(HELPER).program
    assert _form(HELPER).ops == ("chunk", "_scale", "add")
    # a value read twice is not inlined (and the body is left as it was)
    assert "v2 = [v0 * v1 for v3 in range(2)]" in _form(HELPER).text
