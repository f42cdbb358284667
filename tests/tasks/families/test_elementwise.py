"""The element-wise family: the generator's programs with their own solutions, at the
generator's sizes for the interpreter and larger ones for the GPU."""

import pytest

from tritonrl.tasks.families import draw_one, family_task
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


@pytest.mark.parametrize("feature", ["y:row", pytest.param("reduce:sum", marks=pytest.mark.slow)])
def test_a_sample_passes_the_verifier(feature, verifier_passes):
    verifier_passes("elementwise", _wanted(feature))


def test_the_small_task_is_the_generators_task():
    for seed in range(5):
        small, generated = family_task("elementwise", seed, small=True), generate_task(seed)
        assert (small.source, small.solution) == (generated.source, generated.solution)


def test_gpu_sizes_grow_the_rows_and_keep_a_reductions_columns():
    for seed in range(30):
        program = draw_program(seed, natural_level(seed))
        source = family_task("elementwise", seed).source
        assert f"batch_size = {program.rows}\n" not in source
        if program.reduce:
            assert f"dim = {program.cols}\n" in source
        small = draw_one("elementwise", seed, small=True)
        assert draw_one("elementwise", seed).signature == small.signature
