"""Reference solutions against their references (Triton interpreter on the CPU)."""

import torch

from tritonrl.tasks import Task, load_builtin
from tritonrl.verify.compare import compare_outputs
from tritonrl.verify.solution_check import check_task

RELU = load_builtin("level1/1_ReLU").tasks[0]


def test_builtin_solution_passes_on_every_input_set():
    result = check_task(RELU)
    assert result.ok, result.error
    assert len(result.runs) == 3 and all(r.endswith(": ok") for r in result.runs)
    assert "odd" in result.runs[-1]


def _with_solution(task: Task, solution: str) -> Task:
    return Task(task.id, task.level, task.name, task.source, task.origin, solution=solution)


def test_a_wrong_solution_fails_with_the_reason():
    wrong = RELU.solution.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
    result = check_task(_with_solution(RELU, wrong))
    assert not result.ok
    assert "elements differ" in result.error


def test_a_shape_specialised_solution_fails_on_odd_sizes():
    # Hard-codes the 64 x 1024 test shape: right there, wrong at odd sizes.
    specialised = RELU.solution.replace("n = x.numel()", "n = 64 * 1024")
    assert specialised != RELU.solution
    result = check_task(_with_solution(RELU, specialised))
    assert not result.ok
    assert result.runs[0].endswith(": ok") and "odd" in result.runs[-1]


def test_a_crashing_solution_is_a_failure_not_an_exception():
    result = check_task(_with_solution(RELU, "import torch\nclass ModelNew:\n    pass\n"))
    assert not result.ok and "ModelNew" in result.error


def test_compare_outputs_reasons():
    x = torch.randn(4, 5)
    assert compare_outputs(x, x.clone()) is None
    assert "shape" in compare_outputs(x, x[:2])
    assert "dtype" in compare_outputs(x, x.double())
    assert "expected 2 outputs" in compare_outputs((x, x), x)
    assert "NaN" in compare_outputs(x, torch.full_like(x, float("nan")))
    assert "elements differ" in compare_outputs(x, x + 1e-3)
    assert compare_outputs(x, x + 1e-6) is None

    class Lazy(torch.Tensor):
        pass

    assert "torch.Tensor" in compare_outputs(x, x.as_subclass(Lazy))
