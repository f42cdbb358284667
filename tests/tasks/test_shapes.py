"""Running tasks with their size constants scaled, without editing the file."""

import resource
from pathlib import Path

import pytest
import torch

from tritonrl.tasks import load_source
from tritonrl.tasks.shapes import (
    DEFAULT_BUDGETS,
    ShapeError,
    build_module,
    instantiate,
    is_scalable,
    plan_shapes,
    size_constants,
)

KB = Path(__file__).parent / "fixtures" / "kernelbench_like"

SOURCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, features)

    def forward(self, x):
        return self.norm(x)

batch_size = 4096
features = 64
height, width = 512, 256
num_groups = 16
W2 = width * 2
kernel_size = 3
shape: tuple = (batch_size, 7)

def get_inputs():
    return [torch.randn(batch_size, features, height, width)]

def get_init_inputs():
    return [features, num_groups]
"""


def test_size_constants_include_expressions_tuples_and_unpacking():
    consts = size_constants(SOURCE)
    assert consts["batch_size"] == 4096
    assert consts["height"] == 512 and consts["width"] == 256
    assert consts["kernel_size"] == 3
    assert "W2" not in consts  # computed from another name: follows it
    assert "shape" not in consts
    assert size_constants("N = 2048 * 2\nM = 1 << 10\nt = (8, 16)\n") == {
        "N": 4096,
        "M": 1024,
        "t": (8, 16),
    }


def test_structural_constants_are_never_scaled():
    assert not is_scalable("kernel_size", 3)
    assert not is_scalable("num_groups", 16)
    assert not is_scalable("num_heads", 32)
    assert not is_scalable("reduce_dim", 1)
    assert not is_scalable("dim", 1)  # too small to be a size
    assert is_scalable("dim", 16384)
    assert is_scalable("K", 4096)
    assert is_scalable("input_shape", (32768,))


def test_build_module_replaces_constants_without_touching_the_source():
    module = build_module(SOURCE, {"batch_size": 2, "height": 8, "width": 4})
    assert (module.batch_size, module.height, module.width, module.W2) == (2, 8, 4, 8)
    assert "batch_size = 4096" in SOURCE
    with pytest.raises(ShapeError, match="no module-level size constant named"):
        build_module(SOURCE, {"nope": 3})


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("mode", ["tiny", "small", "odd"])
def test_huge_problems_are_planned_without_allocating_them(mode):
    # 4096 x 393216 floats would be 6 GiB; the plan must be made from shapes alone.
    before = _peak_rss_mb()
    task = load_source(str(KB / "KernelBench" / "level1" / "1_Huge_Softmax.py")).tasks[0]
    inst = instantiate(task, mode)
    assert inst.footprint() <= 1.1 * DEFAULT_BUDGETS[mode]
    x = inst.inputs(seed=0)[0]
    assert x.numel() < 400_000
    assert torch.allclose(inst.model()(x).sum(dim=1), torch.ones(x.shape[0]))
    assert _peak_rss_mb() - before < 500


def test_odd_mode_makes_sizes_odd_and_respects_divisibility():
    plan = plan_shapes(SOURCE, "odd")
    assert plan["batch_size"] % 2 == 1
    assert plan["height"] % 2 == 1 and plan["width"] % 2 == 1
    # features must stay a multiple of num_groups for GroupNorm: it is kept even.
    assert plan.get("features", 64) % 16 == 0
    inst = instantiate(SOURCE, "odd")
    out = inst.model(0)(*inst.inputs(0))
    assert out.shape[2:] == (plan["height"], plan["width"])


def test_odd_sizes_differ_from_the_small_ones():
    small, odd = plan_shapes(SOURCE, "small"), plan_shapes(SOURCE, "odd")
    assert small["batch_size"] != odd["batch_size"]


def test_groups_that_block_halving_leave_the_other_sizes_shrinking():
    task = load_source(str(KB / "KernelBench" / "level2" / "3_Conv2d_GroupNorm_Scale.py")).tasks[0]
    inst = instantiate(task, "tiny")
    assert inst.overrides["out_channels"] == 16  # GroupNorm(16, ...) forbids 8
    assert inst.overrides["height"] < 256 and inst.overrides["batch_size"] < 128
    assert inst.footprint() <= DEFAULT_BUDGETS["tiny"]


def test_every_fixture_problem_runs_in_every_mode():
    for task in load_source(str(KB)).tasks:
        for mode in ("tiny", "small", "odd"):
            inst = instantiate(task, mode)
            with torch.no_grad():
                out = inst.model(0)(*inst.inputs(0))
            assert isinstance(out, torch.Tensor), (task.id, mode)


def test_full_mode_and_small_tasks_are_unchanged():
    tiny_source = SOURCE.replace("4096", "2").replace("512, 256", "8, 8")
    assert plan_shapes(tiny_source, "small") == {}
    assert plan_shapes(SOURCE, "full") == {}
    with pytest.raises(ValueError, match="unknown shape mode"):
        plan_shapes(SOURCE, "huge")


def test_full_mode_with_a_budget_shrinks_only_the_tasks_larger_than_it():
    # 4096 x 64 x 512 x 256 floats: 128 GiB written; a budget of 2^24 elements must bring
    # it under that without allocating anything, and leave a small task as written
    before = _peak_rss_mb()
    plan = plan_shapes(SOURCE, "full", budget=1 << 24)
    assert plan and set(plan) <= {"batch_size", "features", "height", "width"}
    inst = instantiate(SOURCE, "full", budget=1 << 24)
    assert 1 << 22 < inst.footprint() <= 1 << 24
    assert _peak_rss_mb() - before < 500
    assert plan_shapes(SOURCE, "full", budget=1 << 40) == {}
    small = SOURCE.replace("4096", "2").replace("512, 256", "8, 8")
    assert plan_shapes(small, "full", budget=1 << 24) == {}


def test_seeds_make_inputs_and_parameters_reproducible():
    inst = instantiate(SOURCE, "tiny")
    a, b = inst.inputs(seed=3)[0], inst.inputs(seed=3)[0]
    assert torch.equal(a, b)
    assert not torch.equal(a, inst.inputs(seed=4)[0])


TIED = """
import torch
import torch.nn as nn

class Model(nn.Module):
    # the output's width (2 * width) must equal out_channels for the LayerNorm: the two
    # sizes are tied only at the written values, and halving them together breaks that
    # once width reaches the smallest size that is scaled
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose3d(in_channels, out_channels, 4, stride=2, padding=1)
        self.norm = nn.LayerNorm(out_channels)

    def forward(self, x):
        return self.norm(self.up(x))

batch_size = 32
in_channels = 32
out_channels = 64
depth, height, width = 16, 32, 32

def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]

def get_init_inputs():
    return [in_channels, out_channels]
"""


@pytest.mark.parametrize("mode", ["tiny", "small", "odd"])
def test_sizes_tied_only_at_the_written_values_are_shrunk_to_sizes_the_reference_runs(mode):
    # Halving every size together reached width 8 (the floor) beside out_channels 8: the
    # plan was kept because its footprint could be measured, then the reference refused
    # it; tiny and small fell back to the full size and odd kept the refused plan, so the
    # reference itself failed its odd input set (KernelBench's
    # 34_ConvTranspose3d_LayerNorm_GELU_Scaling on an H100).
    inst = instantiate(TIED, mode)
    assert inst.forward_ok(), inst.overrides
    assert inst.overrides, "the written sizes were kept"
    with torch.no_grad():
        out = inst.model(0)(*inst.inputs(0))
    assert out.shape[-1] == inst.overrides.get("out_channels", 64) < 64
