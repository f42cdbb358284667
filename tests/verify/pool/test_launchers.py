"""The shared store of Triton's C modules: what a job may ask for, and the worker's hook.

On the CPU: signature checks, the bounded reading of a job's (untrusted) request file,
and the worker-side hook loading a real gcc-built extension module from the store
instead of building it. The real launchers on a GPU: tests/verify/test_pool.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import threading

import pytest

from tritonrl.verify.pool import launchers
from tritonrl.verify.pool.launchers import LauncherStore, check_signature, module_path

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
        ["i32"] * (launchers.MAX_SIGNATURE + 1),
        [None],
    ):
        assert check_signature(bad) is None, bad


def _wait_stats(store: LauncherStore) -> dict:
    store.wait()
    return dict(store.stats)


def test_store_reads_a_jobs_requests_bounded(tmp_path):
    store = LauncherStore(tmp_path / "store")
    job = tmp_path / "job"
    job.mkdir()
    lines = [
        json.dumps({"launcher": ["*fp32", "*fp32", "i32", "constexpr"]}),
        json.dumps({"launcher": ["*fp32", "*fp32", "i32", "constexpr"]}),  # a repeat
        "not json",
        json.dumps({"launcher": ["*fp32; rm -rf /"]}),
        json.dumps({"launcher": ["*bf16", "i64"]}),  # the 5th line: over the cap
    ]
    (job / launchers.REQUESTS).write_text("\n".join(lines) + "\n")
    try:
        store.take(job)
        stats = _wait_stats(store)
        assert stats["requested"] == 1  # the repeat taken once, the 5th line not read
        assert stats["refused"] == 2
        # The builder really ran: on this machine (no libcuda) it fails, and says so.
        assert stats["built"] + stats["failed"] == 1
        store.take(job)  # the same job again: nothing new is queued
        assert _wait_stats(store)["requested"] == 1
    finally:
        store.close()


def test_store_ignores_links_and_fifos(tmp_path):
    store = LauncherStore(tmp_path / "store")
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"launcher": ["i32"]}) + "\n")
    linked, fifo = tmp_path / "linked", tmp_path / "fifo"
    linked.mkdir()
    fifo.mkdir()
    (linked / launchers.REQUESTS).symlink_to(secret)
    os.mkfifo(fifo / launchers.REQUESTS)  # a blocking open would hang the lane's thread
    try:
        done = threading.Event()
        worker = threading.Thread(
            target=lambda: (store.take(linked), store.take(fifo), done.set()), daemon=True
        )  # fmt: skip
        worker.start()
        assert done.wait(10), "reading a job's FIFO blocked the trusted side"
        assert _wait_stats(store)["requested"] == 0
    finally:
        store.close()


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
    assert launchers.install(str(store), str(tmp_path / launchers.REQUESTS))

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
    assert not (tmp_path / launchers.REQUESTS).exists()  # only launchers are requested
