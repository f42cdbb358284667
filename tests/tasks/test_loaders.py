"""Loading tasks from files, KernelBench-style directories and the builtin suite."""

from pathlib import Path

import pytest

from tritonrl.tasks import TaskLoadError, load_builtin, load_source, load_tasks
from tritonrl.tasks.loaders import load_file, solution_path

FIXTURES = Path(__file__).parent / "fixtures"
KB = FIXTURES / "kernelbench_like"


def test_kernelbench_checkout_loads_every_problem():
    report = load_source(str(KB))
    assert report.errors == []
    ids = [t.id for t in report.tasks]
    # Numeric order inside a level (10 after 2), levels in order.
    assert ids == [
        "level1/1_Huge_Softmax",
        "level1/2_Square_Matmul",
        "level1/10_Sum_Over_Dim",
        "level2/3_Conv2d_GroupNorm_Scale",
        "level3/1_Deep_MLP",
    ]
    assert [t.level for t in report.tasks] == [1, 1, 1, 2, 3]
    assert report.tasks[2].problem_id == 10 and report.tasks[2].name == "Sum_Over_Dim"


def test_the_inner_kernelbench_folder_and_one_level_folder_also_load():
    assert len(load_source(str(KB / "KernelBench")).tasks) == 5
    level1 = load_source(str(KB / "KernelBench" / "level1"))
    assert [t.level for t in level1.tasks] == [1, 1, 1]


def test_bad_files_are_reported_and_the_rest_load():
    report = load_source(str(FIXTURES / "bad_tasks"))
    assert [t.name for t in report.tasks] == ["Good_Tanh"]
    reasons = {Path(e.where).name: e.reason for e in report.errors}
    assert set(reasons) == {"2_Syntax_Error.py", "3_No_Model.py", "4_No_Inputs.py", "5_Not_Utf8.py"}
    assert "syntax error at line 4" in reasons["2_Syntax_Error.py"]
    assert "missing class Model" in reasons["3_No_Model.py"]
    assert "missing get_inputs()" in reasons["4_No_Inputs.py"]
    assert "UTF-8" in reasons["5_Not_Utf8.py"]


def test_one_file_and_its_errors():
    task = load_file(KB / "KernelBench" / "level2" / "3_Conv2d_GroupNorm_Scale.py")
    assert task.level == 2 and task.problem_id == 3
    with pytest.raises(TaskLoadError, match="missing class Model"):
        load_file(FIXTURES / "bad_tasks" / "level1" / "3_No_Model.py")
    with pytest.raises(TaskLoadError, match="no such file or directory"):
        load_source("does/not/exist.py")


def test_a_directory_without_levels_is_a_clear_error(tmp_path):
    with pytest.raises(TaskLoadError, match="no level1/"):
        load_source(str(tmp_path))


def test_builtin_suite_has_both_levels_with_solutions():
    level1, level2 = load_builtin("level1").tasks, load_builtin("level2").tasks
    assert len(level1) >= 20 and len(level2) >= 20
    assert all(t.level == 1 for t in level1) and all(t.level == 2 for t in level2)
    assert all(t.solution and "class ModelNew" in t.solution for t in level1 + level2)
    # Builtin origins never carry a path of the machine the package is installed on.
    assert all(t.origin.startswith("builtin:") for t in level1 + level2)
    assert len(load_builtin("all").tasks) == len(level1) + len(level2)
    assert len({t.id for t in level1 + level2}) == len(level1) + len(level2)


def test_one_builtin_task_by_id_and_unknown_ids():
    task = load_builtin("all").tasks[0]
    assert [t.id for t in load_source(task.id).tasks] == [task.id]
    with pytest.raises(TaskLoadError, match="no such builtin task"):
        load_source("builtin:level9")


def test_several_sources_at_once():
    report = load_tasks(["builtin:level1", str(KB)])
    assert len(report.tasks) == len(load_builtin("level1").tasks) + 5


def _user_tasks(root: Path, relative: str) -> Path:
    """The builtin ReLU task and its solution laid out under `root` as a user would:
    the task at `relative`, its solution in `solutions/` beside the task's folder."""
    relu = load_builtin("level1/1_ReLU").tasks[0]
    task = root / relative
    task.parent.mkdir(parents=True, exist_ok=True)
    task.write_text(relu.source)
    solution_path(task).parent.mkdir(parents=True, exist_ok=True)
    solution_path(task).write_text(relu.solution)
    return task


def test_a_solutions_folder_beside_the_tasks_gives_their_solutions(tmp_path):
    _user_tasks(tmp_path / "suite", "level1/1_ReLU.py")
    (tmp_path / "suite" / "level1" / "2_Other.py").write_text(
        load_builtin("level1").tasks[1].source
    )
    single = _user_tasks(tmp_path / "flat", "1_ReLU.py")
    assert (tmp_path / "suite" / "solutions" / "level1" / "1_ReLU.py").is_file()
    assert (tmp_path / "flat" / "solutions" / "1_ReLU.py").is_file()
    suite = load_source(str(tmp_path / "suite")).tasks
    assert [(t.id, "class ModelNew" in (t.solution or "")) for t in suite] == [
        ("level1/1_ReLU", True),
        ("level1/2_Other", False),
    ]
    assert "class ModelNew" in load_source(str(single)).tasks[0].solution
    in_level = load_source(str(tmp_path / "suite" / "level1" / "1_ReLU.py")).tasks[0]
    assert in_level.solution == suite[0].solution


def test_a_syntax_error_is_the_only_message_no_level_guess_is_logged(tmp_path, caplog):
    broken = tmp_path / "7_Broken.py"  # outside a level folder: its level would be guessed
    broken.write_text((FIXTURES / "bad_tasks" / "level1" / "2_Syntax_Error.py").read_text())
    with caplog.at_level("DEBUG"), pytest.raises(TaskLoadError, match="syntax error at line 4"):
        load_source(str(broken))
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
