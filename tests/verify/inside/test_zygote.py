"""The pool's fork server (`python -m tritonrl.verify.inside.zygote`) spoken to line by line, as a
lane speaks to it: it says it is ready once, forks one real worker per job in the job's
dir with the job's environment, frames every line the worker writes as `R...` so that
nothing the job prints can pass for its own `Z...` lines, reports each job's exit status
and stderr, and serves the next job from a fresh fork (nothing a job changed in its
memory reaches the next). It ends when the trusted side goes.

Run outside a sandbox, every job says `"sweep": false`: the sweep (`kill(-1)`) is only
ever allowed in a pid namespace of the zygote's own, so it is tested through a lane
(test_lane.py). `"landlock": null`: the nested domain is tested there too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify.inputs import plan_input_sets, prepare_set
from tritonrl.verify.job import write_job
from tritonrl.verify.sandbox.command import child_env
from tritonrl.verify.session import sandbox_config

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the zygote is Linux-only")

RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = RELU.solution
LOAD = {"op": "load", "device": "cpu", "policy": "strict", "allowed": []}
RUN = {"op": "run", "set": "seed_a"}
EXIT = {"op": "exit"}


def at_import(code: str) -> str:
    """The correct ReLU with `code` run when the module is imported."""
    return GOOD.replace("\n\n@triton.jit", "\n\n" + code.strip() + "\n\n\n@triton.jit", 1)


class Zygote:
    """A zygote process and the lines it writes on its channel."""

    def __init__(self, root: Path) -> None:
        self.root = root
        env = {k: v for k, v in os.environ.items() if k != "TRITONRL_ZYGOTE_TARGET"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tritonrl.verify.inside.zygote"],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def line(self) -> bytes:
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), line
        return line[:-1]

    def job(self, name: str, code: str, prepared, cmds: list[dict], **env: str):
        """Send one job and its worker commands; return (the worker's replies, the
        zygote's "done" message)."""
        workdir = self.root / name
        workdir.mkdir()
        write_job(workdir, code, [prepared])
        job = {
            "dir": str(workdir),
            "env": {**child_env(sandbox_config(VerifyConfig(), "cpu"), workdir), **env},
            "landlock": None,
            "sweep": False,
        }
        lines = [json.dumps(job), *(json.dumps(c) for c in cmds)]
        self.proc.stdin.write(("\n".join(lines) + "\n").encode())
        self.proc.stdin.flush()
        replies = []
        while (line := self.line()).startswith(b"R"):
            try:  # a worker's reply; anything else the job wrote there stays bytes
                replies.append(json.loads(line[1:]))
            except ValueError:
                replies.append(line[1:])
        assert line.startswith(b'Z{"zygote": "done"'), line
        return replies, json.loads(line[1:])

    def close(self) -> int:
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def seed_a():
    spec = next(s for s in plan_input_sets(RELU, "cpu") if s.name == "seed_a")
    return prepare_set(RELU, spec, "cpu")


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("lane"))
    ready = json.loads(z.line()[1:])
    assert ready == {"zygote": "ready", "pid": z.proc.pid}
    yield z
    z.close()


def test_a_job_runs_a_forked_worker_in_its_dir_with_its_environment(zygote, seed_a):
    probe = at_import(
        "import os, sys\n"
        "assert os.getcwd() == os.environ['TRITONRL_TEST_JOB_DIR'], os.getcwd()\n"
        "assert os.environ['HOME'] == os.getcwd() and os.getppid() == "
        f"{zygote.proc.pid}, os.getppid()\n"
        "assert sys.path[0] == os.getcwd(), sys.path[:2]\n"
        "print('to stderr', file=sys.stderr)"
    )
    job_dir = str(zygote.root / "first")
    replies, done = zygote.job("first", probe, seed_a, [LOAD, RUN, EXIT],
                               TRITONRL_TEST_JOB_DIR=job_dir)  # fmt: skip
    assert [r["ok"] for r in replies] == [True, True], replies
    assert replies[1]["flags"] == {} and replies[1]["launches"] >= 1
    assert (zygote.root / "first" / "out" / "seed_a.pt").exists()
    # Without a sweep the zygote cannot vouch that nothing survived: never "clean".
    assert done["status"] == 0 and done["clean"] is False
    assert "to stderr" in done["stderr"]


def test_what_a_job_changes_in_memory_does_not_reach_the_next_job(zygote, seed_a):
    patch = at_import("import torch\ntorch.tritonrl_leak = 1\ntorch.empty_like = None")
    check = at_import("import torch\nassert not hasattr(torch, 'tritonrl_leak')")
    replies, done = zygote.job("patch", patch, seed_a, [LOAD, RUN, EXIT])
    assert replies[0]["ok"] and not replies[1]["ok"]  # its own run broke
    replies, done = zygote.job("after-patch", check, seed_a, [LOAD, RUN, EXIT])
    assert [r["ok"] for r in replies] == [True, True], replies


def test_a_job_cannot_forge_the_zygotes_lines(zygote, seed_a):
    # Whatever a job writes, on any descriptor it holds, reaches the trusted side framed
    # (`R...`) or as its stderr: never as the zygote's "done" that ends a job.
    forged = b'Z{"zygote": "done", "status": 0, "clean": true, "stderr": ""}\n'
    forge = at_import(
        "import os, stat\n"
        "for _fd in range(1, 256):\n"
        "    try:\n"
        "        if stat.S_ISFIFO(os.fstat(_fd).st_mode):\n"
        f"            os.write(_fd, {forged!r})\n"
        "    except OSError:\n"
        "        pass"
    )
    replies, done = zygote.job("forge", forge, seed_a, [LOAD, EXIT])
    # the reply channel's copy came framed, as one more (untrusted) worker reply
    assert replies[0] == forged.rstrip(b"\n") and replies[1]["ok"], replies
    assert done["clean"] is False and done["status"] == 0  # the zygote's own line
    assert forged.decode().strip() in done["stderr"]  # the copy written on stdout


@pytest.mark.parametrize(
    ("code", "status"),
    [("import os\nos._exit(7)", 7),
     ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", -9)],
    ids=["exit-7", "sigkill"],
)  # fmt: skip
def test_a_job_that_dies_is_reported_with_its_status_and_the_next_is_served(
    zygote, seed_a, code, status
):
    name = f"dies{status}"
    replies, done = zygote.job(name, at_import(code), seed_a, [LOAD, EXIT])
    assert replies == [] and done["status"] == status and done["clean"] is False
    replies, done = zygote.job(name + "-next", GOOD, seed_a, [LOAD, RUN, EXIT])
    assert [r["ok"] for r in replies] == [True, True] and done["status"] == 0


def test_a_jobs_stderr_is_capped_at_its_head_and_tail(zygote, seed_a):
    flood = at_import(
        "import sys\nsys.stderr.write('HEAD' + 'x' * (1 << 20) + 'TAIL\\n')\nsys.stderr.flush()"
    )
    _, done = zygote.job("flood", flood, seed_a, [LOAD, EXIT])
    assert len(done["stderr"]) < 80_000
    assert "HEAD" in done["stderr"] and "TAIL" in done["stderr"]


def test_the_zygote_ends_when_the_trusted_side_goes(tmp_path):
    z = Zygote(tmp_path)
    assert z.line().startswith(b'Z{"zygote": "ready"')
    started = time.monotonic()
    assert z.close() == 0 and time.monotonic() - started < 30


def test_the_zygote_warms_triton_up_without_a_gpu_and_starts_no_thread(tmp_path):
    # The warm-up compile runs before the zygote forks: it must work without touching a
    # GPU (it compiles for the lane's target), leave no thread running (a fork of a
    # multi-threaded process can deadlock its children) and leave the environment and
    # the lane's dir as they were.
    code = (
        "import os, torch\nfrom tritonrl.verify.inside.zygote import _warm_compiler\n"
        "os.environ['TRITON_CACHE_DIR'] = 'before'\n"
        "threads = len(os.listdir('/proc/self/task'))  # torch's own, before the warm-up\n"
        "print(_warm_compiler(90), len(os.listdir('/proc/self/task')) - threads,\n"
        "      os.environ['TRITON_CACHE_DIR'], torch.cuda.is_initialized(), os.listdir('.'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a GPU lane's
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "0", "before", "False", "[]"], done.stderr[-2000:]
