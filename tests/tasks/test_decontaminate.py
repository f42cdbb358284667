"""Decontamination: training tasks matched against a KernelBench-layout folder of tasks
written here (an exact copy, a renamed copy, a near copy, a different program), against
the held-out builtin tasks, and the builtin suite against itself; and the command
`tritonrl tasks decontaminate`."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tritonrl.config import DECONTAMINATE_FORMS
from tritonrl.data.kernelbook import prepare
from tritonrl.tasks import Task, TaskLoadError, load_builtin
from tritonrl.tasks.commands import register
from tritonrl.tasks.decontaminate import (
    FORMS,
    Decontaminator,
    checker,
    describe,
    drop_matches,
    find_matches,
    load_specs,
)
from tritonrl.tasks.loaders import HELDOUT_BUILTIN

# A benchmark problem (ours, in KernelBench's layout and format).
BENCH = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Scales the input, then a softmax over the last dimension."""
    def __init__(self, factor):
        super(Model, self).__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns softmax(factor * x)."""
        return torch.softmax(x * self.factor, dim=-1)

batch_size = 4096
dim = 16384
factor = 2.0

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return [factor]
'''
OTHER_BENCH = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.tanh(a) + b

def get_inputs():
    return [torch.rand(64, 64), torch.rand(64, 64)]

def get_init_inputs():
    return []
"""
# The benchmark problem renamed, resized and stripped of its docstrings: the same program.
RENAMED = """import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.t = temperature

    def forward(self, logits):
        scaled = logits * self.t
        return torch.softmax(scaled, dim=-1)


rows, cols, temperature = 8, 32, 0.5


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [temperature]
"""
# The same ops over another axis: only forward-equal.
NEAR = RENAMED.replace("dim=-1", "dim=0")
# A different program: must match nothing.
DIFFERENT = RENAMED.replace("torch.softmax(scaled, dim=-1)", "torch.sigmoid(scaled).sum(dim=-1)")


def _kernelbench(root: Path) -> Path:
    (root / "level1").mkdir(parents=True)
    (root / "level1" / "1_Scaled_Softmax.py").write_text(BENCH)
    (root / "level2").mkdir()
    (root / "level2" / "1_Tanh_Add.py").write_text(OTHER_BENCH)
    return root


def _task(task_id: str, source: str) -> Task:
    return Task(id=task_id, level=1, name=task_id, source=source, origin=f"test:{task_id}")


@pytest.fixture
def bench(tmp_path) -> list[Task]:
    return load_specs([str(_kernelbench(tmp_path / "KernelBench"))]).tasks


TRAIN = [
    _task("copy", BENCH),
    _task("renamed", RENAMED),
    _task("near", NEAR),
    _task("different", DIFFERENT),
]


def test_copies_match_in_the_program_form_near_copies_in_the_forward_form(bench):
    assert [t.id for t in bench] == ["level1/1_Scaled_Softmax", "level2/1_Tanh_Add"]
    found = {(m.task, m.against, m.form) for m in find_matches(TRAIN, bench)}
    assert found == {
        ("copy", "level1/1_Scaled_Softmax", "program"),
        ("renamed", "level1/1_Scaled_Softmax", "program"),
        ("near", "level1/1_Scaled_Softmax", "forward"),
    }
    strict = {(m.task, m.form) for m in find_matches(TRAIN, bench, form="program")}
    assert strict == {("copy", "program"), ("renamed", "program")}


def test_drop_matches_keeps_the_rest_in_order_and_says_which(bench):
    kept, matches = drop_matches(TRAIN, bench)
    assert [t.id for t in kept] == ["different"]
    m = matches[0]
    assert (m.task_origin, m.against_origin) == ("test:copy", str(bench[0].origin))
    assert m.to_dict()["form"] == "program"
    text = describe(matches, most=2)
    assert text.startswith("3 task(s): copy = level1/1_Scaled_Softmax (program)")
    assert text.endswith("and 1 more")


def test_a_task_matching_several_is_reported_once_per_task_it_matches(bench):
    twice = [*bench, _task("bench_again", BENCH.replace("factor", "alpha"))]
    found = Decontaminator(twice).matches(_task("copy", BENCH))
    assert [(m.against, m.form) for m in found] == [
        ("level1/1_Scaled_Softmax", "program"),
        ("bench_again", "program"),
    ]


def test_the_drop_line_names_each_task_once_in_order(bench):
    """A task equal to two bench tasks, and a task given twice, were each listed twice
    (one entry per match) while the count said one task."""
    twice = [*bench, _task("bench_again", BENCH.replace("factor", "alpha"))]
    copy = _task("copy", BENCH)
    kept, matches = drop_matches([copy, _task("renamed", RENAMED), copy, *TRAIN[2:]], twice)
    text = describe(matches)
    entries = text.removeprefix("3 task(s): ").split("; ")
    assert [e.split(" = ")[0] for e in entries] == ["copy", "renamed", "near"]
    assert entries[0] == "copy = level1/1_Scaled_Softmax (program), bench_again (program)"
    assert [t.id for t in kept] == ["different"]
    assert describe(matches, most=1, per_task=1) == (
        "3 task(s): copy = level1/1_Scaled_Softmax (program) and 1 more; and 2 more"
    )


def test_the_config_knows_the_forms():
    assert DECONTAMINATE_FORMS == FORMS


def test_generator_specs_read_as_everywhere_and_bad_specs_name_the_setting():
    assert [t.id for t in load_specs(["gen:2:5"]).tasks] == [
        t.id for t in load_specs(["gen:3:5"]).tasks[:2]
    ]
    # gen:N is seed 1, as `eval --tasks gen:N` and `tasks list gen:N` read it
    assert [t.source for t in load_specs(["gen:3"]).tasks] == [
        t.source for t in load_specs(["gen:3:1"]).tasks
    ]
    for bad in ("gen:3:x", "gen:3:1:2", "gen:"):
        with pytest.raises(TaskLoadError, match=r"gen:N\[:SEED\]"):
            load_specs([bad])
    with pytest.raises(ValueError, match=r"data.decontaminate_against: .*no-such-dir"):
        checker(["no-such-dir"], setting="data.decontaminate_against")
    assert checker([]) is None
    with pytest.raises(ValueError, match="form must be one of program, forward"):
        find_matches(TRAIN, TRAIN, form="tokens")


def test_the_heldout_builtin_tasks_are_a_spec_and_the_rest_copy_none_of_them():
    held = load_builtin("heldout").tasks
    assert [t.id for t in held] == [f"builtin:{i}" for i in HELDOUT_BUILTIN]
    rest = [t for t in load_builtin("all").tasks if t.id not in {h.id for h in held}]
    assert find_matches(rest, held) == []
    # each held-out task matches itself: training on builtin:all would train on them
    assert {m.task for m in find_matches(held, held, form="program")} == {t.id for t in held}


def test_the_builtin_suite_collides_with_itself_only_where_it_should():
    # No two builtin tasks are one program. Forward-equal: the matmuls whose problems
    # differ only in their shapes (square, rectangular, matrix-vector) and the two
    # transposed ones (which operand is transposed is an argument, not an op).
    tasks = load_builtin("all").tasks
    pairs = {(m.task, m.against, m.form) for m in find_matches(tasks, tasks) if m.task != m.against}
    assert {form for *_, form in pairs} == {"forward"}
    groups = {frozenset({a, b}) for a, b, _ in pairs}
    names = ("22_Matmul_Square", "23_Matmul_Rectangular", "27_Matrix_Vector")
    square, rect, mv = (f"builtin:level1/{n}" for n in names)
    t_a, t_b = "builtin:level1/24_Matmul_Transposed_A", "builtin:level1/25_Matmul_Transposed_B"
    assert groups == {frozenset(p) for p in ((square, rect), (square, mv), (rect, mv), (t_a, t_b))}


# --------------------------------------------------------------------------- the command


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def _write(folder: Path, tasks: list[Task]) -> Path:
    """`tasks` as a KernelBench-layout folder: `level1/<n>_<id>.py`."""
    (folder / "level1").mkdir(parents=True)
    for n, t in enumerate(tasks, 1):
        (folder / "level1" / f"{n}_{t.id}.py").write_text(t.source)
    return folder


def test_the_command_reports_each_match_and_exits_1(tmp_path):
    kb = str(_kernelbench(tmp_path / "KernelBench"))
    train = str(_write(tmp_path / "train", TRAIN))
    runner = CliRunner()
    r = runner.invoke(_app(), ["tasks", "decontaminate", train, "--against", kb, "--json"])
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    assert (report["train"], report["against"], report["form"]) == (4, 2, "forward")
    assert report["tasks"] == ["level1/1_copy", "level1/2_renamed", "level1/3_near"]
    assert report["matched"] == 3
    assert [(m["task"], m["against"], m["form"]) for m in report["matches"]] == [
        ("level1/1_copy", "level1/1_Scaled_Softmax", "program"),
        ("level1/2_renamed", "level1/1_Scaled_Softmax", "program"),
        ("level1/3_near", "level1/1_Scaled_Softmax", "forward"),
    ]
    assert report["matches"][0]["against_origin"].endswith("level1/1_Scaled_Softmax.py")

    r = runner.invoke(_app(), ["tasks", "decontaminate", train, "--against", kb,
                               "--form", "program"])  # fmt: skip
    assert r.exit_code == 1
    assert "level1/2_renamed\tlevel1/1_Scaled_Softmax\tprogram" in r.stdout
    assert "near" not in r.stdout
    assert "2 of 4 training tasks equal one of 2 tasks (form program)" in r.stdout

    # the tasks.jsonl that prepare writes (the held-out builtin tasks dropped by default)
    out = tmp_path / "prepared"
    prepare("builtin", out, max_samples=40, decontaminate_against=["builtin:heldout"])
    r = runner.invoke(_app(), ["tasks", "decontaminate", str(out / "tasks.jsonl"),
                               "--against", "builtin:heldout", "--json"])  # fmt: skip
    assert r.exit_code == 0 and json.loads(r.stdout)["train"] == 40, r.output
    r = runner.invoke(_app(), ["tasks", "decontaminate", str(out / "tasks.jsonl"),
                               "--against", kb, "--against", "builtin:level1"])  # fmt: skip
    assert r.exit_code == 1 and "builtin:level1/3_Tanh\tbuiltin:level1/3_Tanh\tprogram" in r.stdout


def test_the_command_exits_0_when_nothing_matches_and_2_for_bad_usage(tmp_path):
    kb = str(_kernelbench(tmp_path / "KernelBench"))
    clean = str(_write(tmp_path / "clean", [_task("different", DIFFERENT)]))
    runner = CliRunner()
    r = runner.invoke(_app(), ["tasks", "decontaminate", clean, "--against", kb, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["matches"] == []
    r = runner.invoke(_app(), ["tasks", "decontaminate", "builtin:level2", "gen:5:0",
                               "--against", "builtin:heldout"])  # fmt: skip
    assert r.exit_code == 1 and "builtin:level2/1_Gemm_Bias_ReLU" in r.stdout
    for args, message in (
        ([clean], "give --against SOURCE"),
        ([clean, "--against", kb, "--form", "tokens"], "--form must be one of program, forward"),
        ([clean, "--against", "gen:4:x"], "gen:N[:SEED]"),
        ([clean, "--against", str(tmp_path / "nowhere")], "no such file or directory"),
        ([str(tmp_path / "no.jsonl"), "--against", kb], "run `tritonrl prepare`"),
    ):
        r = runner.invoke(_app(), ["tasks", "decontaminate", *args])
        assert r.exit_code == 2 and message in r.output, (args, r.output)
