"""The worker's findings log: written as findings happen, read back defensively, and what
it changes in verdicts when the worker crashes (real sandboxed workers, no mocks).

On a GPU a host round-trip on a CUDA tensor (`.numpy()`, DLPack, a ctypes read of
`data_ptr()`) raises or segfaults right after the guard recorded it; on the CPU the same
shapes are made with a forward that raises, or kills itself with SIGSEGV.
"""

from __future__ import annotations

import os

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.reward import compute_reward
from tritonrl.tasks import load_builtin
from tritonrl.verify import verify
from tritonrl.verify.findings import (
    FINDINGS_NAME,
    MAX_LINE,
    READ_CAP,
    FindingsLog,
    read_findings,
)

RELU = load_builtin("level1/1_ReLU").tasks[0]
RUNTIME = VerifyConfig(static_checks=False)  # the run-time layer alone

# ----- the log and its reader ------------------------------------------------------------


def test_each_finding_is_one_line_written_once_and_read_back(tmp_path) -> None:
    log = FindingsLog(tmp_path / FINDINGS_NAME)
    log.write("ctypes: native code or raw memory access (ctypes.string_at)")
    log.write("ctypes: native code or raw memory access (ctypes.string_at)")
    log.write("torch_fallback: torch computed\ninside forward: host::numpy")
    log.write_flags({"introspection": "gc.get_objects"})
    lines = (tmp_path / FINDINGS_NAME).read_text().splitlines()
    assert len(lines) == 3
    assert lines[1] == "torch_fallback: torch computed inside forward: host::numpy"
    assert read_findings(tmp_path) == {
        "ctypes": "native code or raw memory access (ctypes.string_at)",
        "torch_fallback": "torch computed inside forward: host::numpy",
        "introspection": "gc.get_objects",
    }


def test_the_reader_keeps_only_known_flags_from_garbage(tmp_path) -> None:
    (tmp_path / FINDINGS_NAME).write_bytes(
        b"\xff\xfe\x00garbage\n"
        b"correct: yes\n"  # not a cheat flag: a candidate cannot write itself a pass
        b"reward: 1.0\n"
        b"ctypes:no space after the colon\n"
        b"no_launch: " + b"x" * 5000 + b"\n"
        b"sandbox_violation: write outside the work dir: /etc/passwd\n"
    )
    found = read_findings(tmp_path)
    assert set(found) == {"no_launch", "sandbox_violation"}
    assert len(found["no_launch"]) <= MAX_LINE


def test_the_reader_reads_both_ends_of_a_padded_file(tmp_path) -> None:
    with open(tmp_path / FINDINGS_NAME, "wb") as f:
        f.write(b"introspection: gc.get_objects\n")
        f.write(b"z" * (10 * READ_CAP))  # padding meant to push later findings out of reach
        f.write(b"\nctypes: ctypes.string_at\n")
    assert set(read_findings(tmp_path)) == {"introspection", "ctypes"}


@pytest.mark.parametrize("kind", ["missing", "symlink", "fifo", "directory"])
def test_the_reader_never_follows_links_nor_blocks(tmp_path, kind: str) -> None:
    elsewhere = tmp_path / "elsewhere.log"
    elsewhere.write_text("ctypes: ctypes.string_at\n")
    work = tmp_path / "work"
    work.mkdir()
    target = work / FINDINGS_NAME
    if kind == "symlink":
        target.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(target)  # opening it for reading would block without O_NONBLOCK
    elif kind == "directory":
        target.mkdir()
    assert read_findings(work) == {}


# ----- verdicts of workers that fail -------------------------------------------------------


def _relu_with(*statements: str) -> str:
    """The task's honest solution with `statements` run at the start of forward."""
    marker = "        x = x.contiguous()\n"
    assert marker in RELU.solution
    body = "".join(f"        {line}\n" for line in statements)
    return "import ctypes, os, signal\n" + RELU.solution.replace(marker, body + marker, 1)


def test_a_host_roundtrip_before_forward_raises_is_flagged() -> None:
    """The CUDA `.numpy()` shape: the round-trip is recorded, then forward raises."""
    code = _relu_with("host = x.numpy()", "raise RuntimeError(f'cannot convert {host.shape}')")
    r = verify(RELU, code, RUNTIME)
    assert r.compiled and not r.correct
    assert "torch_fallback" in r.flags, (r.flags, r.notes)
    assert "no_launch" not in r.flags  # it raised before its first launch: no finding
    assert compute_reward(r) == 0.0
    assert r.input_sets[0].name == "tiny" and not r.input_sets[0].ok


def test_a_forward_that_raises_without_a_finding_is_only_wrong() -> None:
    r = verify(RELU, _relu_with("raise RuntimeError('no luck')"), RUNTIME)
    assert r.flags == [] and not r.correct and compute_reward(r) == pytest.approx(0.3)


def test_a_ctypes_read_then_a_segfault_is_still_flagged() -> None:
    """The CUDA ctypes shape: a raw read of `data_ptr()`, then the process dies before
    any reply; the finding comes back through the findings log."""
    code = _relu_with("ctypes.string_at(x.data_ptr(), 16)", "os.kill(os.getpid(), signal.SIGSEGV)")
    r = verify(RELU, code, RUNTIME)
    assert "ctypes" in r.flags, (r.flags, r.error)
    assert "torch_fallback" in r.flags  # the raw read is a host round-trip in forward
    assert "killed" in r.error and "SIGSEGV" in r.error, r.error
    assert any("findings log" in n for n in r.notes)
    assert not r.correct and compute_reward(r) == 0.0
    assert [(o.name, o.ok) for o in r.input_sets] == [("tiny", False)]


@pytest.mark.parametrize("wipe", ["truncate", "unlink"])
def test_wiping_the_findings_log_then_crashing_is_never_correct(wipe: str) -> None:
    """The candidate can erase its findings; then it gets the verdict of a crash."""
    erase = {
        "truncate": f"open({FINDINGS_NAME!r}, 'w').close()",
        "unlink": f"os.unlink({FINDINGS_NAME!r})",
    }[wipe]
    # os.abort raises no audit event: nothing is logged after the wipe
    code = _relu_with("ctypes.string_at(x.data_ptr(), 16)", erase, "os.abort()")
    r = verify(RELU, code, RUNTIME)
    assert not r.correct and r.stage == "correctness" and "SIGABRT" in r.error, r.error
    # The flag is gone with the log: the verdict of a compiled kernel that crashed.
    assert "ctypes" not in r.flags and compute_reward(r) == pytest.approx(0.3), (r.flags, r.notes)
