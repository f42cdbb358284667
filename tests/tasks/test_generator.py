"""The procedural task generator: determinism, shapes, and every kind of generated task
checked against its reference under the Triton interpreter."""

import hashlib
import random
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from tritonrl.tasks.generator import (
    BINARY,
    COLS,
    REDUCTIONS,
    ROWS,
    UNARY,
    Y_SHAPES,
    Program,
    Step,
    draw_program,
    generate_task,
    generate_tasks,
    is_degenerate,
    natural_level,
    simulate,
)
from tritonrl.tasks.shapes import build_module
from tritonrl.verify.solution_check import check_task


def _first_seed(level: int, wanted) -> int:
    """The first seed whose program at `level` satisfies `wanted`."""
    for seed in range(5000):
        if wanted(draw_program(seed, level)):
            return seed
    raise AssertionError("no seed gives the wanted program")


def test_same_seed_same_task():
    a, b = generate_task(7), generate_task(7)
    assert (a.source, a.solution, a.id, a.name, a.level) == (
        b.source,
        b.solution,
        b.id,
        b.name,
        b.level,
    )


def test_same_seed_same_source_in_another_process():
    # Hash randomisation differs between processes; the generator must not depend on it.
    code = (
        "import hashlib; from tritonrl.tasks.generator import generate_task; "
        "print(hashlib.sha256(generate_task(11).source.encode()).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    )
    assert out.stdout.strip() == hashlib.sha256(generate_task(11).source.encode()).hexdigest()


def test_different_seeds_give_different_tasks():
    sources = {generate_task(s).source for s in range(60)}
    assert len(sources) == 60
    names = {generate_task(s).name for s in range(60)}
    assert len(names) > 20


def test_ids_names_and_levels():
    task = generate_task(5)
    assert task.id == "generated:s5" and task.origin == "generated:5"
    assert task.level == natural_level(5) and task.solution
    other = 3 - task.level
    forced = generate_task(5, other)
    assert forced.level == other and forced.id == f"generated:s5:l{other}"
    assert generate_task(5, task.level).id == task.id  # the natural level names one source
    assert {generate_task(s).level for s in range(40)} == {1, 2}


def test_level_1_is_one_op_and_level_2_a_chain():
    for seed in range(200):
        assert draw_program(seed, 1).n_ops == 1
        p = draw_program(seed, 2)
        assert p.n_ops >= 2
        assert p.name.count("_") == p.n_ops - 1


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="level 1 or 2"):
        generate_task(0, level=3)


def test_generate_tasks_are_distinct_and_at_the_level_asked():
    tasks = generate_tasks(30, seed=100, level=2)
    assert len(tasks) == 30 and len({t.id for t in tasks}) == 30
    assert len({t.source for t in tasks}) == 30
    assert all(t.level == 2 for t in tasks)
    assert [t.id for t in generate_tasks(3, seed=100, level=2)] == [t.id for t in tasks[:3]]
    mixed = generate_tasks(20)
    assert {t.level for t in mixed} == {1, 2}


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of elements of `b` that the check would accept for `a`."""
    return ((a - b).abs() <= 1e-4 + 1e-4 * a.abs()).float().mean().item()


def test_sizes_are_small_and_outputs_not_degenerate():
    for seed in range(150):
        task = generate_task(seed)
        module = build_module(task.source, where=task.id)
        assert ROWS[0] <= module.batch_size <= ROWS[1] and COLS[0] <= module.dim <= COLS[1]
        torch.manual_seed(seed)
        inputs = module.get_inputs()
        assert sum(x.numel() for x in inputs) < 2**18
        out = module.Model()(*inputs)
        assert torch.isfinite(out).all(), task.name
        # A kernel returning one constant, or ignoring x, must not pass the check.
        assert _close(out, out.flatten().median().expand_as(out)) < 0.9, task.name
        other_x = module.Model()(torch.randn_like(inputs[0]), *inputs[1:])
        assert _close(out, other_x) < 0.9, task.name


def test_degenerate_programs_are_recognised():
    rng = random.Random(0)
    clamp_max = Program((Step("clamp", (-1.0, 0.5)),), "max", None, False, 32, 256)
    assert is_degenerate(clamp_max, rng)  # every row's max is the clamp's 0.5
    ignores_x = Program((Step("maximum", "y"), Step("minimum", "y")), None, "row", False, 32, 256)
    assert is_degenerate(ignores_x, rng)  # min(max(x, y), y) == y
    fine = Program((Step("mul", "y"), Step("sigmoid")), "sum", "col", False, 32, 256)
    assert not is_degenerate(fine, rng)


def test_simulation_matches_the_reference():
    for seed in range(30):
        program = draw_program(seed, 2)
        module = build_module(generate_task(seed, 2).source)
        torch.manual_seed(seed)
        inputs = module.get_inputs()
        y = inputs[1].squeeze(-1).tolist() if program.y_shape else None
        expected = module.Model()(*inputs).flatten()
        got = torch.tensor(simulate(program, inputs[0].tolist(), y), dtype=torch.float32)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_solution_is_one_masked_kernel_sized_from_the_inputs():
    for seed in range(20):
        solution = generate_task(seed).solution
        assert solution.count("@triton.jit") == 1
        assert "class ModelNew" in solution and "n_rows, n_cols = x.shape" in solution
        assert all("mask=" in line for line in solution.splitlines() if "tl.load(" in line)
        assert all("mask=" in line for line in solution.splitlines() if "tl.store(" in line)


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("seed", range(12))
def test_generated_task_passes_check(seed, level):
    task = generate_task(seed, level)
    result = check_task(task)
    assert result.ok, f"{task.id} {task.name}: {result.error}\n{result.runs}"
    assert len(result.runs) == 3 and "odd" in result.runs[-1]


def _kinds_needed() -> list[tuple[int, str]]:
    """(level, description) of every op, reduction and broadcast the generator makes."""
    kinds = [(1, f"op:{op}") for op in [*UNARY, *BINARY]]
    kinds += [(1, f"reduce:{r}") for r in REDUCTIONS]
    kinds += [(2, f"y:{y}") for y in Y_SHAPES]
    kinds += [(2, f"y+reduce:{y}") for y in Y_SHAPES]
    kinds += [(2, "plain"), (2, "reduce")]
    return kinds


def _matches(program, kind: str) -> bool:
    what, _, arg = kind.partition(":")
    if what == "op":
        return any(s.op == arg for s in program.steps)
    if what == "reduce":
        return program.reduce == (arg or program.reduce) and program.reduce is not None
    if what == "y":
        return program.y_shape == arg and program.reduce is None
    if what == "y+reduce":
        return program.y_shape == arg and program.reduce is not None
    return program.y_shape is None and program.reduce is None  # plain


@pytest.mark.parametrize("level,kind", _kinds_needed())
def test_every_kind_of_task_passes_check(level, kind):
    seed = _first_seed(level, lambda p: _matches(p, kind))
    task = generate_task(seed, level)
    result = check_task(task)
    assert result.ok, f"{kind} {task.id} {task.name}: {result.error}"


def _nonzero_at_zero(seed: int) -> bool:
    """Whether the task maps all-zero inputs (what masked lanes load) to non-zero."""
    module = build_module(generate_task(seed, 2).source)
    zeros = [torch.zeros_like(x) for x in module.get_inputs()]
    return bool(module.Model()(*zeros).abs().min() > 1e-3)


def test_the_check_catches_a_reduction_over_masked_lanes():
    seed = next(s for s in range(500) if draw_program(s, 2).reduce == "sum" and _nonzero_at_zero(s))
    task = generate_task(seed, 2)
    assert check_task(task).ok
    # Summing the masked lanes too adds f(0) for each of them: the check must fail it.
    broken = replace(task, solution=task.solution.replace("tl.where(mask, v, 0.0)", "v"))
    assert broken.solution != task.solution
    result = check_task(broken)
    assert not result.ok and "differ" in result.error
