"""Static checks, ways out of the process the verifier watches: native code, processes,
threads, file and network io, and an early exit that forges a verdict.

Each snippet is a small candidate (a real kernel, a `ModelNew`) with the cheat dropped
into one place; the comment above each group gives its docs/hacks.md category.
"""

from __future__ import annotations

import pytest
from static_cases import FAMILIES, candidate, flags

# (id, expected flag, candidate source)
HOSTILE: list[tuple[str, str, str]] = [
    # native code
    ("ctypes", "ctypes", candidate("", prelude="import ctypes")),
    ("ctypes-from", "ctypes", candidate("", prelude="from ctypes import CDLL")),
    (
        "load-inline",
        "ctypes",
        candidate("", prelude="from torch.utils.cpp_extension import load_inline"),
    ),
    ("cffi", "ctypes", candidate("", prelude="import cffi")),
    ("triton-compile", "ctypes", candidate('k = triton.compile("k.ptx")')),
    # 23/24: processes
    ("subprocess", "subprocess", candidate('subprocess.run(["ls"])', prelude="import subprocess")),
    ("os-system", "subprocess", candidate('os.system("ls")', prelude="import os")),
    ("os-popen", "subprocess", candidate('os.popen("ls")', prelude="import os")),
    ("os-exec", "subprocess", candidate('os.execv("/bin/ls", [])', prelude="import os")),
    ("os-spawn", "subprocess", candidate('os.spawnl(0, "/bin/ls")', prelude="import os")),
    ("os-fork", "subprocess", candidate("pid = os.fork()", prelude="import os")),
    ("os-system-alias", "subprocess", candidate('s("ls")', prelude="from os import system as s")),
    ("os-getattr", "subprocess", candidate('getattr(os, "system")("ls")', prelude="import os")),
    ("pty", "subprocess", candidate("", prelude="import pty")),
    ("multiprocessing", "subprocess", candidate("", prelude="import multiprocessing as mp")),
    ("torch-mp", "subprocess", candidate("", prelude="import torch.multiprocessing")),
    ("pip", "subprocess", candidate("", prelude="import pip")),
    ("signal", "subprocess", candidate("", prelude="import signal")),
    # 10: threads
    (
        "thread",
        "threading",
        candidate(
            "threading.Thread(target=launch, args=(x, y)).start()", prelude="import threading"
        ),
    ),
    (
        "thread-from",
        "threading",
        candidate("Thread(target=print).start()", prelude="from threading import Thread"),
    ),
    ("_thread", "threading", candidate("", prelude="import _thread")),
    (
        "futures",
        "threading",
        candidate("", prelude="from concurrent.futures import ThreadPoolExecutor"),
    ),
    ("asyncio", "threading", candidate("", prelude="import asyncio")),
    ("jit-fork", "threading", candidate("fut = torch.jit.fork(launch, x, y)")),
    # 23: io
    ("open", "io", candidate('open("/tmp/x", "w").write("1")')),
    ("pathlib", "io", candidate('Path("x").write_text("1")', prelude="from pathlib import Path")),
    ("socket", "io", candidate("", prelude="import socket")),
    ("urllib", "io", candidate("", prelude="import urllib.request")),
    ("requests", "io", candidate("", prelude="import requests")),
    ("torch-save", "io", candidate('torch.save(x, "x.pt")')),
    ("shutil", "io", candidate("", prelude="import shutil")),
    ("os-remove", "io", candidate('os.remove("x")', prelude="import os")),
    # 14: early exit
    ("sys-exit", "forged_verdict", candidate("sys.exit(0)", prelude="import sys")),
    ("os-exit", "forged_verdict", candidate("os._exit(0)", prelude="import os")),
    ("exit", "forged_verdict", candidate("exit(0)")),
    ("raise-systemexit", "forged_verdict", candidate("raise SystemExit(0)")),
    ("atexit", "forged_verdict", candidate("", prelude="import atexit")),
]


@pytest.mark.parametrize(
    ("flag", "source"), [(f, s) for _, f, s in HOSTILE], ids=[i for i, _, _ in HOSTILE]
)
def test_hostile_snippet_is_flagged(flag: str, source: str) -> None:
    found = flags(source)
    assert flag in found, f"expected {flag}, got {found}"


def test_every_flag_of_the_family_has_a_hostile_snippet() -> None:
    assert {flag for _, flag, _ in HOSTILE} == FAMILIES["escapes"]
