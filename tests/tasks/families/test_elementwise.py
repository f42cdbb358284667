"""The element-wise family: the generator's programs with their own solutions, at the
generator's sizes for the interpreter and larger ones for the GPU."""

import pytest

from tritonrl.tasks.families import draw_one, family_task
from tritonrl.tasks.gen_source import flat_solution_source
from tritonrl.tasks.generator import draw_program, generate_task, natural_level

FEATURES = ["y:full", "y:row", "y:col", "reduce:sum", "reduce:mean", "reduce:max", "plain"]


def _wanted(feature: str):
    what, _, arg = feature.partition(":")
    if what == "y":
        return lambda sig: sig.split(":")[2] == arg
    if what == "reduce":
        return lambda sig: sig.split(":")[3] == arg
    return lambda sig: sig.split(":")[2:] == ["none", "none"]


@pytest.mark.parametrize("feature", FEATURES)
def test_every_broadcast_and_reduction_passes_the_solution_check(feature, solution_passes):
    solution_passes("elementwise", _wanted(feature))


@pytest.mark.parametrize(
    "feature", ["y:row", "y:full", pytest.param("reduce:sum", marks=pytest.mark.slow)]
)
def test_a_sample_passes_the_verifier(feature, verifier_passes):
    verifier_passes("elementwise", _wanted(feature))


def test_the_small_task_is_the_generators_task_with_a_flat_kernel_where_one_fits():
    flat = 0
    for seed in range(12):
        small, generated = family_task("elementwise", seed, small=True), generate_task(seed)
        program = draw_program(seed, natural_level(seed))
        assert small.source == generated.source
        if program.reduce or program.y_shape not in (None, "full"):
            assert small.solution == generated.solution
        else:
            flat += 1
            assert small.solution == flat_solution_source(program) != generated.solution
    assert flat


def test_a_flat_kernel_refuses_a_reduction_or_a_broadcast():
    program = next(
        p for seed in range(100)
        if (p := draw_program(seed, natural_level(seed))).reduce or p.y_shape in ("row", "col")
    )  # fmt: skip
    with pytest.raises(ValueError, match="use solution_source"):
        flat_solution_source(program)


def test_every_kind_compiles_for_an_sm90_gpu(compiles_for_sm90):
    # One solution of each kind: flat with and without y, the 2-D tiles with a
    # broadcast, and a reduction, at the blocks forward picks.
    solutions = []
    for feature in ["y:full", "plain", "y:row", "y:col", "reduce:sum", "reduce:max"]:
        seed = next(
            s for s in range(3000) if _wanted(feature)(draw_one("elementwise", s).signature)
        )
        tiles = [{"BLOCK": 4096}, {"BLOCK_R": 4, "BLOCK_C": 1024}, {"BLOCK_R": 8, "BLOCK_C": 512}]
        solutions.append((family_task("elementwise", seed).solution, tiles))
    assert compiles_for_sm90(solutions) == []


def test_gpu_sizes_grow_the_rows_and_keep_a_reductions_columns():
    for seed in range(30):
        program = draw_program(seed, natural_level(seed))
        source = family_task("elementwise", seed).source
        assert f"batch_size = {program.rows}\n" not in source
        if program.reduce:
            assert f"dim = {program.cols}\n" in source
        small = draw_one("elementwise", seed, small=True)
        assert draw_one("elementwise", seed).signature == small.signature
