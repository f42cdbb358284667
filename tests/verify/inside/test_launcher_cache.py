"""The worker's side of the launcher store, on the CPU: the signature check (the only
thing of a job's that reaches the trusted builder) and the hook that loads a real
gcc-built extension module from the store instead of building it.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig

import pytest

from tritonrl.verify.inside import launcher_cache
from tritonrl.verify.inside.launcher_cache import check_signature, module_path

nv = pytest.importorskip("triton.backends.nvidia.driver")


def test_signatures_take_only_triton_type_names():
    assert check_signature(["*fp32", "*fp32", "i32", "constexpr"]) == (
        "*fp32", "*fp32", "i32", "constexpr",
    )  # fmt: skip
    assert check_signature(["*kfp16", ["i64", "fp32"], "u1"]) == ("*kfp16", ("i64", "fp32"), "u1")
    for bad in (
        ['*fp32); system("x"', "i32"],  # C through a type name
        ["fp32 ", "i32"],
        ["*FP32"],
        [1, "i32"],
        "i32",  # not a list
        [[[["i32"]]]],  # nested too deep
        ["i32"] * (launcher_cache.MAX_SIGNATURE + 1),
        [None],
    ):
        assert check_signature(bad) is None, bad


_EXT = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, methods};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&mod); }
"""


def _gcc(src_file, out) -> None:
    include = sysconfig.get_paths()["include"]
    cmd = ["gcc", "-shared", "-fPIC", "-O0", f"-I{include}", str(src_file), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)


def test_worker_hook_loads_modules_from_the_store(tmp_path, monkeypatch):
    """The hook finds a module built into the store under its source's key and loads
    it instead of building; a source the store lacks is built by Triton as before."""
    for name in ("make_launcher", "compile_module_from_src", "compile_module_from_file"):
        if hasattr(nv, name):  # restored after the test: install() patches the module
            monkeypatch.setattr(nv, name, getattr(nv, name))
    build_name = (
        "compile_module_from_src" if hasattr(nv, "compile_module_from_src")
        else "compile_module_from_file"
    )  # fmt: skip
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    store = tmp_path / "store"
    name = "tritonrl_probe"
    stored, other = _EXT % (42, name, name), _EXT % (7, name, name)
    target = module_path(store, name, stored)
    target.parent.mkdir(parents=True)
    (tmp_path / "stored.c").write_text(stored)
    _gcc(tmp_path / "stored.c", target)
    assert launcher_cache.install(str(store), str(tmp_path / launcher_cache.REQUESTS))

    def build(src: str):
        if build_name == "compile_module_from_src":
            return nv.compile_module_from_src(src, name, [], [], [])
        path = tmp_path / f"{abs(hash(src))}.c"
        path.write_text(src)
        return nv.compile_module_from_file(str(path), name, [], [], [])

    hit = build(stored)
    assert hit.answer() == 42 and os.path.samefile(hit.__file__, target)
    miss = build(other)  # not in the store: Triton's own build, in its own cache
    assert miss.answer() == 7
    assert str(store) not in os.path.realpath(miss.__file__)
    assert not (tmp_path / launcher_cache.REQUESTS).exists()  # only launchers are requested
