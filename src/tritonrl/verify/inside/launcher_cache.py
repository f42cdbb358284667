"""What a CUDA pool job's worker does with the trusted launcher store, and the store's
format, which both sides read: the key and path of a module, the signature check, the
request file's name and limits.

`install(store, requests)` runs in the worker before the candidate is imported: Triton's
CUDA driver then loads its C modules (the driver utilities, each signature's launcher)
from the store when they are there; on a miss the job builds as before, into its own
cache, and the launcher's signature is appended to `requests` for the next jobs. The
store itself, which builds the modules in trusted code, is `verify.pool.launchers`.

What it does NOT do: write to the store, build anything for other jobs, or accept C
source, a module or a path from the job.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import platform
import re
import sys
import sysconfig
from pathlib import Path
from typing import Any

LAUNCHER, UTILS = "__triton_launcher", "cuda_utils"
REQUESTS = "launcher_requests.jsonl"  # in the job dir, written by the (untrusted) job
MAX_REQUEST_BYTES = 16 << 10
MAX_REQUESTS_PER_JOB = 4
MAX_SIGNATURE = 64  # type names in one signature, tuples flattened
# Triton's type names: pointer prefix, const marker, then letters and digits (i32, fp16,
# fp8e4nv, ...). Nothing else can reach the builder, so no C can be injected through it.
_TYPE = re.compile(r"\*?k?[a-z][a-z0-9]{0,11}")


def store_key(name: str, src: str) -> str:
    """The store's key of a module: its name and C source, this Triton, this platform."""
    import triton

    salt = "\0".join([name, triton.__version__, platform.machine(), sys.implementation.cache_tag])
    return hashlib.sha256(f"{salt}\0{src}".encode()).hexdigest()


def module_path(store: str | Path, name: str, src: str) -> Path:
    return Path(store) / store_key(name, src) / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"


def check_signature(obj: Any, _depth: int = 0) -> tuple | None:
    """A signature (a list of type names, lists for tuples) as the tuple the builder
    accepts, or None when anything in it is not a plain Triton type name."""
    if not isinstance(obj, list) or _depth > 2:
        return None
    out: list = []
    for item in obj:
        if isinstance(item, str) and len(item) <= 13 and _TYPE.fullmatch(item):
            out.append(item)
        elif isinstance(item, list):
            inner = check_signature(item, _depth + 1)
            if inner is None:
                return None
            out.append(inner)
        else:
            return None
    return tuple(out) if _count(out) <= MAX_SIGNATURE else None


def _count(sig) -> int:
    return sum(_count(x) if isinstance(x, (list, tuple)) else 1 for x in sig)


def listed(sig) -> list:
    """A checked signature as the lists a request line holds."""
    return [listed(x) if isinstance(x, tuple) else x for x in sig]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(store: str, requests: str) -> bool:
    """Make this process's Triton CUDA driver load its C modules from `store` when they
    are there, and append the signature of each launcher it had to build to `requests`.
    False (and nothing changed) where this Triton has no such build step."""
    try:
        from triton.backends.nvidia import driver as nv
    except Exception:  # noqa: BLE001 - no CUDA backend: nothing to share
        return False
    signatures: dict[str, tuple] = {}
    patched = False

    def look(name: str, src: str):
        path = module_path(store, name, src)
        if path.is_file():
            with contextlib.suppress(ImportError, OSError):
                return _load(name, path)
        return None

    if callable(getattr(nv, "make_launcher", None)):
        make = nv.make_launcher

        def make_launcher(constants, signature, *rest):
            src = make(constants, signature, *rest)
            with contextlib.suppress(Exception):
                if not any(rest):  # no tensor-descriptor metadata
                    sig = listed(tuple(signature.values()))
                    if check_signature(sig) is not None:
                        signatures[src] = sig
            return src

        nv.make_launcher = make_launcher
        patched = True
    if callable(getattr(nv, "compile_module_from_src", None)):
        build_src = nv.compile_module_from_src

        def compile_module_from_src(src, name, *args, **kwargs):
            module = look(name, src)
            if module is not None:
                return module
            sig = signatures.pop(src, None)
            if sig is not None and name == LAUNCHER:
                with contextlib.suppress(OSError), open(requests, "a") as f:
                    f.write(json.dumps({"launcher": sig}) + "\n")
            return build_src(src, name, *args, **kwargs)

        nv.compile_module_from_src = compile_module_from_src
        patched = True
    if callable(getattr(nv, "compile_module_from_file", None)):  # newer Triton's utilities
        build_file = nv.compile_module_from_file

        def compile_module_from_file(src_path, name, *args, **kwargs):
            with contextlib.suppress(OSError):
                module = look(name, Path(src_path).read_text())
                if module is not None:
                    return module
            return build_file(src_path, name, *args, **kwargs)

        nv.compile_module_from_file = compile_module_from_file
        patched = True
    return patched
