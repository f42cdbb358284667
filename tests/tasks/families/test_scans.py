"""The scans family: cumsum, cumprod, reverse and masked cumsum, along the last and a
strided dim, pass the solution check; a sample passes the verifier."""

import pytest

from tritonrl.tasks.families import scans

SIGNATURES = [f"scans:{op}:{where}" for op in scans.OPS for where in ("last", "inner")]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_solution_check(signature, solution_passes):
    solution_passes("scans", lambda sig: sig == signature)


@pytest.mark.parametrize(
    "signature",
    ["scans:masked_cumsum:last", pytest.param("scans:reverse_cumsum:last", marks=pytest.mark.slow)],
)
def test_a_sample_passes_the_verifier(signature, verifier_passes):
    verifier_passes("scans", lambda sig: sig == signature)


@pytest.mark.slow
@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_signature_passes_the_verifier(signature, verifier_passes):
    verifier_passes("scans", lambda sig: sig == signature)


COMPILE_FOR_SM90 = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

failed = []
for name, path in json.load(open(sys.argv[1])).items():
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = next(v for v in vars(module).values() if hasattr(v, "arg_names"))
    sig = {a: "*fp32" if a.endswith("_ptr") else "constexpr" if a.startswith("BLOCK") else "i32"
           for a in kernel.arg_names}
    if "m_ptr" in sig:
        sig["m_ptr"] = "*i1"
    for bo, br in [(1, 2048), (16, 128), (128, 16)]:
        try:
            blocks = {"BLOCK_O": bo, "BLOCK_R": br}
            source = ASTSource(kernel, signature=sig, constexprs=blocks)
            triton.compile(source, target=GPUTarget("cuda", 90, 32))
        except Exception as e:
            failed.append(f"{name} {bo}x{br}: {str(e)[-120:]}")
print(json.dumps(failed))
"""


def test_every_signature_compiles_for_an_sm90_gpu(tmp_path):
    # Triton's GPU back end (through PTX) runs without a GPU: every kind of scan, at
    # tiles from one long line to many short ones, compiles for sm_90 with the installed
    # Triton, in a process of its own without the interpreter. (Triton 3.6's back end
    # refused a scan and a sum of the same loaded tile; the solutions avoid that.)
    import json
    import os
    import subprocess
    import sys

    from tritonrl.tasks import families

    paths = {}
    for task in families.draw(40, 0, "all", ["scans"], False):
        path = tmp_path / f"{task.name}.py"
        if task.name not in paths:
            path.write_text(task.solution)
            paths[task.name] = str(path)
    assert len(paths) == len(SIGNATURES)
    (tmp_path / "paths.json").write_text(json.dumps(paths))
    (tmp_path / "compile.py").write_text(COMPILE_FOR_SM90)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, str(tmp_path / "compile.py"), str(tmp_path / "paths.json")],
        capture_output=True, text=True, env=env, timeout=600, check=True,
    ).stdout  # fmt: skip
    assert json.loads(out.strip().splitlines()[-1]) == []
