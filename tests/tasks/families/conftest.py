"""Fixtures of the task-family tests: the first seed whose program has a wanted feature,
a family task through the real verifier (sandboxed worker, every input set, the static
and run-time cheating checks) on the CPU under the Triton interpreter, and the faster
in-process solution check for covering every kind of program."""

import pytest

from tritonrl.config import PARTIAL_TORCH_OPS, VerifyConfig
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


COMPILE_FOR_SM90 = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

FLOATS = {"delta", "scale"}  # the float scalars the families' kernels take
failed = []
for path, tiles, types in json.load(open(sys.argv[1])):
    spec = importlib.util.spec_from_file_location("solution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernels = [v for k, v in vars(module).items() if k.endswith("_kernel")]
    for kernel in kernels:
        wanted = {kernel.arg_names[i] for i in kernel.constexprs}
        fitting = [t for t in tiles if wanted <= set(t)]
        if not fitting:
            failed.append(f"{path} {kernel.__name__}: no tile gives {sorted(wanted)}")
        for tile in fitting:
            const = {k: v for k, v in tile.items() if k in wanted}
            options = {"num_warps": tile["num_warps"]} if "num_warps" in tile else {}
            sig = {a: "*fp32" if a.endswith("_ptr") else "constexpr" if a in const
                   else "fp32" if a in FLOATS else "i32" for a in kernel.arg_names}
            sig.update({a: t for a, t in types.items() if a in sig})
            try:
                source = ASTSource(kernel, signature=sig, constexprs=const)
                triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
            except Exception as e:
                failed.append(f"{path} {kernel.__name__} {tile}: {str(e)[-160:]}")
print(json.dumps(failed))
"""


@pytest.fixture
def compiles_for_sm90(tmp_path):
    """`compiles_for_sm90(solutions)`: each (solution source, [constexpr values, ...])
    compiles (pointers as fp32 unless `types` names another type, `delta` and `scale`
    as floats, other scalars as int32), every `*_kernel` of it at every set of constexprs
    that gives all of its own (and `num_warps`, if the set names it), for sm_90 with
    the installed Triton's GPU back end (which runs without a GPU), in a process of its
    own without the interpreter. Returns the failures."""
    import json
    import os
    import subprocess
    import sys

    def check(solutions: list[tuple[str, list[dict]]], types: dict | None = None) -> list[str]:
        jobs = []
        for n, (solution, tiles) in enumerate(solutions):
            path = tmp_path / f"solution_{n}.py"
            path.write_text(solution)
            jobs.append((str(path), tiles, types or {}))
        (tmp_path / "jobs.json").write_text(json.dumps(jobs))
        (tmp_path / "compile.py").write_text(COMPILE_FOR_SM90)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        out = subprocess.run(
            [sys.executable, str(tmp_path / "compile.py"), str(tmp_path / "jobs.json")],
            capture_output=True, text=True, env=env, timeout=600, check=True,
        ).stdout  # fmt: skip
        return json.loads(out.strip().splitlines()[-1])

    return check
