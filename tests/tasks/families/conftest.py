"""Fixtures of the task-family tests: the first seed whose program has a wanted feature,
a family task through the real verifier (sandboxed worker, every input set, the static
and run-time cheating checks) on the CPU under the Triton interpreter, and the faster
in-process solution check for covering every kind of program."""

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.data.prompts import PARTIAL_TORCH_OPS
from tritonrl.tasks import families
from tritonrl.verify.funnel import verify
from tritonrl.verify.solution_check import check_task

SEARCH = 3000  # seeds searched for a wanted program


def _first_seed(family: str, wanted) -> int:
    for seed in range(SEARCH):
        if wanted(families.draw_one(family, seed, small=True).signature):
            return seed
    raise AssertionError(f"no {family} seed below {SEARCH} gives the wanted program")


def _config(family: str) -> VerifyConfig:
    if families.policy(family) == "partial":
        ops = list(PARTIAL_TORCH_OPS)
        return VerifyConfig(device="cpu", policy="partial", allowed_torch_ops=ops)
    return VerifyConfig(device="cpu")


@pytest.fixture
def first_seed():
    """`first_seed(family, wanted)`: the first seed whose signature satisfies `wanted`."""
    return _first_seed


@pytest.fixture
def verifier_passes():
    """`verifier_passes(family, wanted)`: the small task of the first seed whose signature
    satisfies `wanted` (or of the seed `wanted`) passes the real verifier: correct, no
    flag, every input set run (tiny, two secret seeds, shifted values, odd sizes, and the
    dtypes it lists). Returns the verdict."""

    def check(family: str, wanted) -> None:
        seed = wanted if isinstance(wanted, int) else _first_seed(family, wanted)
        task = families.family_task(family, seed, small=True)
        r = verify(task, task.solution, _config(family))
        sig = families.draw_one(family, seed, small=True).signature
        assert r.correct and not r.flags, f"{task.id} ({sig}): {r.error} {r.flags}"
        names = {s.name for s in r.input_sets}
        assert {"tiny", "seed_a", "seed_b", "shifted", "odd"} <= names, names
        return r

    return check


@pytest.fixture
def solution_passes():
    """`solution_passes(family, wanted)`: the same task passes the in-process solution
    check (two seeds and odd sizes, the verifier's tolerances; no sandbox): fast enough
    to cover every kind of program a family draws."""

    def check(family: str, wanted) -> None:
        seed = _first_seed(family, wanted)
        task = families.family_task(family, seed, small=True)
        r = check_task(task)
        sig = families.draw_one(family, seed, small=True).signature
        assert r.ok, f"{task.id} ({sig}): {r.error}\n{r.runs}"
        assert len(r.runs) == 3 and "odd" in r.runs[-1]

    return check
