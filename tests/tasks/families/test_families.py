"""The family registry: tasks are deterministic in (family, seed), the train and
held-out splits share no signature, the families give thousands of distinct tasks, task
specs load through `load_tasks`, and a broken solution is caught (so the solution checks
of the family tests can fail)."""

import hashlib
import subprocess
import sys
from dataclasses import replace

import pytest

from tritonrl.tasks import TaskLoadError, families, load_tasks
from tritonrl.tasks.families import FAMILIES, draw, draw_one, family_task, is_heldout
from tritonrl.tasks.normalize import PROGRAM, normal_form
from tritonrl.verify.solution_check import check_task


@pytest.mark.parametrize("family", list(FAMILIES))
def test_same_family_and_seed_same_task(family):
    a, b = family_task(family, 5), family_task(family, 5)
    assert (a.id, a.level, a.name, a.source, a.solution) == (
        b.id,
        b.level,
        b.name,
        b.source,
        b.solution,
    )
    assert a.id == f"fam:{family}:5"
    assert family_task(family, 5, small=True).id == f"fam:{family}:5:small"


def test_same_task_in_another_process():
    # Hash randomisation differs between processes; the families must not depend on it.
    code = (
        "import hashlib; from tritonrl.tasks.families import FAMILIES, family_task; "
        "print(hashlib.sha256(''.join(family_task(f, 3).source + family_task(f, 3).solution "
        "for f in FAMILIES).encode()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = "".join(family_task(f, 3).source + family_task(f, 3).solution for f in FAMILIES)
    assert out.stdout.strip() == hashlib.sha256(here.encode()).hexdigest()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_small_sizes_change_the_sizes_not_the_program(family):
    for seed in range(10):
        big, small = draw_one(family, seed), draw_one(family, seed, small=True)
        assert (big.signature, big.solution, big.level) == (
            small.signature,
            small.solution,
            small.level,
        )
    assert any(draw_one(family, s).source != draw_one(family, s, True).source for s in range(10))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_train_and_heldout_share_no_signature(family):
    train = draw(40, seed=0, split="train", families=[family], small=True)
    heldout = draw(8, seed=0, split="heldout", families=[family], small=True)
    train_sigs = {families.signature(t.id) for t in train}
    held_sigs = {families.signature(t.id) for t in heldout}
    assert train_sigs and held_sigs and not train_sigs & held_sigs
    assert not any(is_heldout(s) for s in train_sigs) and all(is_heldout(s) for s in held_sigs)
    # A task's id names one source whichever split asked for it.
    everything = {t.id: t.source for t in draw(60, seed=0, split="all", families=[family])}
    for t in draw(5, seed=0, split="heldout", families=[family]):
        assert everything.get(t.id, t.source) == t.source


@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_training_program_is_a_heldout_program(family):
    """The split is by program, not only by signature: an option that is only a constant
    of the reference (a dim, a padding) must not put one program on both sides."""
    sides: dict[str, set[bool]] = {}
    for seed in range(200):
        d = draw_one(family, seed, small=True)
        key = normal_form(d.source).key(PROGRAM)
        sides.setdefault(key, set()).add(is_heldout(d.signature))
    assert {True} in sides.values() and {False} in sides.values(), family
    assert [k for k, v in sides.items() if len(v) == 2] == []


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_documents_its_heldout_signatures(family):
    module = FAMILIES[family]
    assert "Held out" in module.__doc__ and "Signature" in module.__doc__
    assert module.POLICY in ("strict", "partial")


def test_thousands_of_distinct_tasks():
    tasks = draw(3000, seed=0, split="all")
    assert len({t.source for t in tasks}) == 3000 and len({t.id for t in tasks}) == 3000
    by_family = {f: sum(t.id.startswith(f"fam:{f}:") for t in tasks) for f in FAMILIES}
    assert min(by_family.values()) >= 3000 // len(FAMILIES) - 1, by_family
    assert all(t.solution and "class ModelNew" in t.solution for t in tasks)


def test_task_specs_load_through_load_tasks():
    tasks = load_tasks(["fam:matmul:3:0:heldout", "fam:4:2:small"]).tasks
    assert [t.id.split(":")[1] for t in tasks[:3]] == ["matmul"] * 3
    assert all(is_heldout(families.signature(t.id)) for t in tasks[:3])
    assert [t.id for t in tasks[3:]] == [f"fam:{f}:2:small" for f in list(FAMILIES)[:4]]
    assert [t.id for t in load_tasks("fam:norms:2").tasks] == [
        t.id for t in draw(2, 0, "all", ["norms"])
    ]


@pytest.mark.parametrize(
    "spec", ["fam:", "fam:nope:3", "fam:3:x", "fam:matmul:1:2:3", "fam:3:0:test"]
)
def test_a_bad_spec_names_the_format(spec):
    with pytest.raises(TaskLoadError, match=r"fam:\[FAMILY:\]N"):
        load_tasks(spec)


def test_bad_arguments_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="split must be one of"):
        draw(2, split="test")
    with pytest.raises(ValueError, match="unknown task family 'nope'; the families are"):
        draw(2, families=["nope"])


def test_a_broken_solution_is_caught():
    # The family tests' checks can fail: a solution that drops the epilogue's last op does.
    seed = next(s for s in range(200) if draw_one("fused", s, True).signature.endswith("relu"))
    task = family_task("fused", seed, small=True)
    broken = replace(task, solution=task.solution.replace("v = tl.maximum(v, 0.0)", ""))
    assert broken.solution != task.solution
    assert check_task(task).ok and not check_task(broken).ok


@pytest.mark.parametrize("family", list(FAMILIES))
def test_forward_sizes_its_launches_without_triton_helper_calls(family):
    # `triton.cdiv` and `triton.next_power_of_2` cost more to call than the integer
    # expressions that replace them, on every forward the reward times.
    for seed in range(40):
        forward = family_task(family, seed).solution.split("class ModelNew")[1]
        assert "triton.cdiv(" not in forward and "triton.next_power_of_2(" not in forward
