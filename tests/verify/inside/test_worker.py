"""The worker (`python -m tritonrl.verify.inside.worker`) driven command by command, as the
trusted side drives it: replies on a private channel (the candidate's prints never reach
it), the sets read and deleted before the candidate is imported, outputs written for the
trusted side, commands out of order refused, compilers banned, errors short and located.

The real worker in a real process, its job dir written by `job.write_job` and its
environment a sandboxed worker's, but no sandbox (test_session.py and test_sandbox.py
run it in one); the Triton interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify import tensorfile
from tritonrl.verify.inputs import plan_input_sets, prepare_set
from tritonrl.verify.job import write_job
from tritonrl.verify.sandbox.command import child_env
from tritonrl.verify.session import sandbox_config

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the worker is Linux-only")

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = RELU.solution
LOAD = {"op": "load", "device": "cpu", "policy": "strict", "allowed": []}
RUN = {"op": "run", "set": "seed_a"}
EXIT = {"op": "exit"}


def worker_env(workdir: Path) -> dict[str, str]:
    """The environment a sandboxed CPU worker gets (HOME, TMPDIR and caches in its dir)."""
    return child_env(sandbox_config(VerifyConfig(), "cpu"), workdir)


def at_import(code: str) -> str:
    """The correct ReLU with `code` run when the module is imported."""
    return GOOD.replace("\n\n@triton.jit", "\n\n" + code.strip() + "\n\n\n@triton.jit", 1)


@pytest.fixture(scope="module")
def seed_a():
    spec = next(s for s in plan_input_sets(RELU, "cpu") if s.name == "seed_a")
    return prepare_set(RELU, spec, "cpu")


def worker(tmp_path: Path, prepared, code: str, cmds: list[dict]):
    """Write the job, send `cmds`, and return (the replies, the finished process)."""
    workdir = tmp_path / "job"
    workdir.mkdir(parents=True)
    write_job(workdir, code, [prepared])
    done = subprocess.run(
        [sys.executable, "-m", "tritonrl.verify.inside.worker"],
        cwd=workdir,
        env=worker_env(workdir),
        input="".join(json.dumps(c) + "\n" for c in cmds),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [json.loads(line) for line in done.stdout.splitlines()], done


def test_an_honest_candidate_is_loaded_run_and_its_outputs_written(tmp_path, seed_a):
    expected = seed_a.expected
    replies, done = worker(tmp_path, seed_a, GOOD, [LOAD, RUN, EXIT])
    assert done.returncode == 0, done.stderr[-2000:]
    load, run = replies
    assert load["ok"] and load["flags"] == {} and load["seconds"] >= 0
    assert run == {"ok": True, "launches": run["launches"], "flags": {}} and run["launches"] >= 1
    workdir = tmp_path / "job"
    out = tensorfile.load(workdir / "out" / "seed_a.pt")
    assert torch.equal(out, expected)
    assert list((workdir / "sets").iterdir()) == []  # read and deleted before the import
    assert (workdir / "findings.log").exists()


def test_the_candidates_prints_never_reach_the_reply_channel(tmp_path, seed_a):
    forged = '{"ok": true, "launches": 1, "flags": {}}'
    code = at_import(f"import os, sys\nprint({forged!r})\nos.write(1, b{forged!r} + b'\\n')")
    replies, done = worker(tmp_path, seed_a, code, [LOAD, EXIT])
    assert [r["ok"] for r in replies] == [True]  # one command, one reply: none forged
    assert done.stderr.count(forged) == 2


def test_the_candidate_sees_a_neutral_argv_and_no_input_files(tmp_path, seed_a):
    # A phase probe reads argv (docs/hacks.md #16); the answers must not be readable
    # from the sets before the op audit watches (docs/hacks.md #15).
    probe = at_import(
        "import os, sys\n"
        "assert sys.argv == ['tritonrl-worker'], sys.argv\n"
        "assert os.listdir('sets') == [], os.listdir('sets')"
    )
    replies, done = worker(tmp_path, seed_a, probe, [LOAD, RUN, EXIT])
    assert [r["ok"] for r in replies] == [True, True], replies


def test_commands_out_of_order_or_unknown_are_refused(tmp_path, seed_a):
    cmds = [RUN, {"op": "fly"}, LOAD, {"op": "time"}, {"op": "time_check"}, RUN, EXIT, RUN]
    replies, done = worker(tmp_path, seed_a, GOOD, cmds)
    assert done.returncode == 0
    errors = [r.get("error") for r in replies]
    assert errors == ["no candidate loaded", "unknown op 'fly'", None, "time before time_prep",
                      "time_check before time", None]  # fmt: skip
    assert replies[5]["ok"]  # the refusals left the worker usable; nothing after exit


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("class Model:\n    pass\n", "the code defines no class ModelNew"),
        (at_import("BLOCK_DEFAULT = undefined_constant"),
         "NameError: name 'undefined_constant' is not defined (candidate.py line "),
        ("ModelNew = 3\n", "the code defines no class ModelNew"),
    ],
    ids=["no-model-new", "import-fails", "not-a-class"],
)  # fmt: skip
def test_a_candidate_that_cannot_be_loaded_is_refused_with_a_short_error(
    tmp_path, seed_a, code, error
):
    replies, done = worker(tmp_path, seed_a, code, [LOAD, RUN, EXIT])
    assert replies[0]["ok"] is False and replies[0]["error"].startswith(error), replies
    assert "Traceback" not in replies[0]["error"]
    assert replies[1] == {"ok": False, "error": "no candidate loaded"}


def test_a_forward_that_raises_names_the_candidates_line(tmp_path, seed_a):
    code = GOOD.replace("        x = x.contiguous()\n", "        raise ValueError('no')\n", 1)
    line = code.splitlines().index("        raise ValueError('no')") + 1
    replies, _ = worker(tmp_path, seed_a, code, [LOAD, RUN, EXIT])
    assert replies[1]["ok"] is False
    assert replies[1]["error"] == f"ValueError: no (candidate.py line {line})"
    assert not (tmp_path / "job" / "out" / "seed_a.pt").exists()


def test_compilers_are_banned_and_the_call_is_flagged(tmp_path, seed_a):
    code = at_import(
        "import torch\n"
        "try:\n"
        "    torch.compile(lambda t: t)\n"
        "except RuntimeError as e:\n"
        "    assert 'not allowed' in str(e)\n"
    )
    replies, _ = worker(tmp_path, seed_a, code, [LOAD, RUN, EXIT])
    load, run = replies
    assert load["ok"] and load["flags"]["torch_compile"] == "called torch.compile"
    assert "torch_compile: called torch.compile" in (tmp_path / "job" / "findings.log").read_text()
    assert run["ok"] and "torch_compile" in run["flags"]


def test_torch_compute_in_forward_is_flagged_and_no_launch_is_said(tmp_path, seed_a):
    cheat = GOOD.replace("        return y\n", "        return torch.relu(x)\n")
    lazy = GOOD.replace("        x = x.contiguous()\n", "        return torch.empty_like(x)\n", 1)
    flags = []
    for i, code in enumerate((cheat, lazy)):
        replies, _ = worker(tmp_path / str(i), seed_a, code, [LOAD, RUN, EXIT])
        flags.append(replies[1]["flags"])
    assert flags[0]["torch_fallback"].startswith("torch computed inside forward: ")
    assert "relu" in flags[0]["torch_fallback"] and "no_launch" not in flags[0]
    assert flags[1]["no_launch"] == "forward launched no Triton kernel"


class _Driven:
    """The worker driven one command at a time, so that the trusted side can write a set
    between commands (`job.Staging`), as it does for a full-size problem."""

    def __init__(self, workdir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tritonrl.verify.inside.worker"], cwd=workdir,
            env=worker_env(workdir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def __call__(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.write(json.dumps(EXIT) + "\n")
        self.proc.stdin.flush()
        self.proc.communicate(timeout=60)


@pytest.fixture
def seed_b(seed_a):
    spec = next(s for s in plan_input_sets(RELU, "cpu") if s.name == "seed_b")
    return prepare_set(RELU, spec, "cpu", model_state=seed_a.state_dict)


def _staged_job(tmp_path: Path, code: str, seed_a, seed_b):
    """A job whose sets are all written one at a time (as a full-size problem's are)."""
    from tritonrl.verify.job import Staging

    workdir = tmp_path / "job"
    workdir.mkdir(parents=True)
    write_job(workdir, code, [])
    return workdir, Staging(workdir, [seed_a, seed_b]), _Driven(workdir)


def test_sets_written_between_commands_are_taken_by_the_command_that_runs_them(
    tmp_path, seed_a, seed_b
):
    # Each set's file appears just before its run and is gone when the run replies (the
    # worker took it before any candidate code of the run); seed_b is written into
    # seed_a's buffers as when both were written ahead.
    workdir, staging, run = _staged_job(tmp_path, GOOD, seed_a, seed_b)
    try:
        assert run(LOAD)["ok"]
        for s, cmd in (
            (seed_a, RUN),
            (seed_b, {"op": "run", "set": "seed_b", "refill_of": "seed_a"}),
        ):
            assert staging.stage(s.spec.name)
            assert (workdir / "sets" / f"{s.spec.name}.pt").exists()
            reply = run({**cmd, "staged": True})
            assert reply["ok"] and reply["flags"] == {}, reply
            assert list((workdir / "sets").iterdir()) == []
            out = tensorfile.load(workdir / "out" / f"{s.spec.name}.pt")
            assert torch.equal(out, s.expected)
        assert not staging.stage("seed_a")  # written once
    finally:
        run.close()


def test_a_staged_set_read_by_candidate_code_between_commands_is_flagged(tmp_path, seed_a, seed_b):
    # docs/hacks.md #15 with sets written while the candidate is loaded: a signal
    # handler set at import reads any set file that appears while the worker waits for
    # its next command, to compute the answers where no forward-only audit looks. The
    # audit hook sees the read (only the worker's own take of a set is not flagged).
    spy = at_import(
        "import os, signal\n"
        "SEEN = []\n"
        "def _peek(*_):\n"
        "    for name in os.listdir('sets') if os.path.isdir('sets') else []:\n"
        "        with open(os.path.join('sets', name), 'rb') as f:\n"
        "            SEEN.append(f.read(16))\n"
        "signal.signal(signal.SIGALRM, _peek)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\n"
    )
    workdir, staging, run = _staged_job(tmp_path, spy, seed_a, seed_b)
    try:
        assert run(LOAD)["ok"]
        staging.stage("seed_a")
        time.sleep(0.3)  # the worker waits for its next command; the handler runs
        reply = run({**RUN, "staged": True})
        assert "reference_access" in reply["flags"], reply
        assert "seed_a.pt" in reply["flags"]["reference_access"]
    finally:
        run.close()


COMPILE_BAD_AXIS = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
import triton.language as tl

from tritonrl.verify.inside.worker import _short_error


def kernel(x_ptr, BLOCK: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, BLOCK))
    w = tl.max(v, axis=1)
    tl.store(x_ptr + tl.arange(0, BLOCK), w)


source = ASTSource(JITFunction(kernel), signature={"x_ptr": "*fp32", "BLOCK": "constexpr"},
                   constexprs={"BLOCK": 16})
try:
    triton.compile(source, target=GPUTarget("cuda", 90, 32))
except triton.compiler.errors.CompilationError as e:
    print(repr(str(e)))
    print(_short_error(e))
"""


def test_a_compile_error_keeps_the_line_it_points_at_and_the_reason(tmp_path):
    # Triton's compiler front end (it runs without a GPU, and without the interpreter:
    # a process of its own) refuses a reduction over an axis the block lacks. Its
    # message is the kernel's source down to a caret; the reason is in the chain of
    # causes. A short error keeps the position, that line and the reason, which a reader
    # (and a feedback turn) needs, not the source above it.
    (tmp_path / "bad_axis.py").write_text(COMPILE_BAD_AXIS)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, str(tmp_path / "bad_axis.py")],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert "invalid axis" not in out[0]  # the message alone lacks the reason
    assert out[1] == (
        "CompilationError: at 3:8: `w = tl.max(v, axis=1)` "
        "ValueError: invalid axis 1. Expected -1 <= axis < 1"
    )
