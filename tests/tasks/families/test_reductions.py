"""The reductions family: every op along every dim (and keepdim), in both styles, passes
the solution check; a sample passes the verifier; arg reductions return int64 indices."""

import pytest
import torch

from tritonrl.tasks.families import draw_one, family_task, reductions
from tritonrl.tasks.runtime import import_source

FEATURES = [
    *(f"{op}:dim{d}{s}" for op in reductions.OPS for d in range(3) for s in ("", ":moved")),
    "keepdim",
    "keepdim:moved",
]


def _wanted(feature: str):
    """Signatures with `feature`: an op and a dim (`argmax:dim1`), or keepdim, in the
    strided style unless the feature ends with `:moved`."""
    moved = feature.endswith(":moved")
    feature = feature.removesuffix(":moved")

    def wanted(sig: str) -> bool:
        if sig.endswith(":moved") != moved:
            return False
        sig = sig.removesuffix(":moved")
        if feature == "keepdim":
            return sig.endswith(":keepdim")
        return sig.startswith(f"reductions:{feature}")

    return wanted


@pytest.mark.parametrize("feature", FEATURES)
def test_every_op_and_dim_passes_the_solution_check(feature, solution_passes):
    solution_passes("reductions", _wanted(feature))


@pytest.mark.parametrize(
    "feature", ["argmax:dim1", "sum:dim1:moved", pytest.param("prod:dim2", marks=pytest.mark.slow)]
)
def test_a_sample_passes_the_verifier(feature, verifier_passes):
    verifier_passes("reductions", _wanted(feature))


@pytest.mark.slow
@pytest.mark.parametrize("feature", FEATURES)
def test_every_op_and_dim_passes_the_verifier(feature, verifier_passes):
    verifier_passes("reductions", _wanted(feature))


@pytest.mark.parametrize(
    "feature",
    ["argmax:dim0", "argmin:dim1", "argmax:dim2", "argmin:dim2", "argmax:dim1:moved",
     "argmin:dim2:moved"],
)  # fmt: skip
def test_arg_reductions_write_int64_and_the_first_index_of_a_tie(feature, first_seed, tmp_path):
    # Three values only: every line holds ties, across the lanes of a tile and, where the
    # line is longer than a chunk, within one lane.
    task = family_task("reductions", first_seed("reductions", _wanted(feature)))
    dim = int(feature.removesuffix(":moved")[-1])
    solution = import_source(task.solution, f"solution_{feature.replace(':', '_')}", tmp_path)
    shape = {0: (300, 2, 3), 1: (2, 300, 40), 2: (2, 3, 2100)}[dim]
    x = torch.randint(0, 3, shape).float()
    got = solution.ModelNew(dim)(x)
    want = getattr(torch, feature.split(":")[0])(x, dim=dim)
    assert got.dtype == torch.int64 and torch.equal(got, want)


def test_every_op_compiles_for_an_sm90_gpu(compiles_for_sm90):
    # Both tilings (whole rows of the last dim; lines across a strided one), wide and
    # narrow, at the block sizes forward picks; the moved style's rows, at both styles.
    tiles = [{"BLOCK_O": o, "BLOCK_R": r, "LAST": last}
             for o, r, last in [(2, 1024, True), (16, 128, True), (256, 16, False),
                                (32, 128, False)]]  # fmt: skip
    solutions = []
    for op in reductions.OPS:
        for style in ("", ":moved"):
            task = family_task("reductions", _first_seed_of(f"{op}:dim0{style}"))
            solutions.append((task.solution, tiles))
    assert compiles_for_sm90(solutions) == []


def _first_seed_of(feature: str) -> int:
    return next(s for s in range(3000) if _wanted(feature)(draw_one("reductions", s).signature))


def test_products_stay_finite_on_the_shifted_input_set(tmp_path):
    # The verifier's shifted set makes every factor about 1.2 in size: along 752 of them
    # the reference's product overflowed, and a correct kernel, overflowing in its own
    # order, was failed. At the task's own (KernelBench-like) sizes, every prod program.
    from tritonrl.verify.inputs import _shift

    prod = "reductions:prod"
    seeds = [s for s in range(400) if draw_one("reductions", s).signature.startswith(prod)]
    assert len(seeds) >= 20
    torch.manual_seed(0)
    for seed in seeds:
        task = family_task("reductions", seed)
        ref = import_source(task.source, f"prod_{seed}", tmp_path)
        x = _shift(ref.get_inputs()[0])
        out = ref.Model(*ref.get_init_inputs())(x)
        assert torch.isfinite(out).all(), f"fam:reductions:{seed}: {tuple(x.shape)}"
