"""One task source grammar for every command: `load_sources` reads the loaders' specs,
`gen:N[:SEED]`, a run's held-out (`run:`) and training (`train:`) tasks and prepare's
`tasks.jsonl`; `tasks list` and `export-verl` take them too, and a bad one is one line."""

import pytest

from cli_process import tritonrl
from tritonrl.data.sources import load_sources
from tritonrl.tasks import TaskLoadError
from tritonrl.tasks.generator import generate_tasks


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    run = tmp_path_factory.mktemp("sources") / "run"
    r = tritonrl("prepare", "--source", "builtin", "--run", str(run))
    assert r.returncode == 0, r.stderr
    return run


def test_every_spec_form_loads_here(prepared):
    gen = load_sources("gen:3:7").tasks
    assert [t.source for t in gen] == [t.source for t in generate_tasks(3, seed=7)]
    held = load_sources(f"run:{prepared}").tasks
    train = load_sources(f"train:{prepared}").tasks
    listed = load_sources(str(prepared / "prepare" / "tasks.jsonl")).tasks
    assert held and train and not {t.id for t in held} & {t.id for t in train}
    assert {t.id for t in held} | {t.id for t in train} <= {t.id for t in listed}
    both = load_sources(["builtin:level1/3_Tanh", "gen:3:7"]).tasks
    assert [t.id for t in both] == ["builtin:level1/3_Tanh", *(t.id for t in gen)]


def test_commands_take_them_and_a_bad_spec_is_one_line(prepared, tmp_path):
    r = tritonrl("tasks", "list", "gen:2:0", f"run:{prepared}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 2 + len(load_sources(f"run:{prepared}").tasks)
    with pytest.raises(TaskLoadError, match="not a run directory"):
        load_sources(f"run:{tmp_path}")
    verl = ["export-verl", "--tasks", "nosuch", "--out", str(tmp_path / "v")]
    for command in (["tasks", "list", "nosuch"], verl):
        r = tritonrl(*command)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "nosuch: no such file or directory" in r.stderr
        assert "fam:[FAMILY:]N[:SEED]" in r.stderr and "run:RUN" in r.stderr  # nothing eaten
    assert not (tmp_path / "v").exists()
