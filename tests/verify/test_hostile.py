"""The verifier against hostile kernels (one file per trick, tests/verify/hostile/) and
honest ones (tests/verify/honest/), end to end through `verify()` and the sandbox.

Every hostile file names its docs/hacks.md category in its docstring and carries one line

    Expect: task=<task> static=<flag|none> runtime=<outcome> [escape=<kind>]
            [timeout=<s>] [memory_mb=<MiB>] [limit=<limit>]

(a line too long for the file goes on below it, indented, only `key=value` words).

`task` is a builtin id or a file under hostile/tasks/; `static` the flag the AST layer
must raise (`none`: the file is meant to get past it); `runtime` what the run-time
layer alone (`VerifyConfig(static_checks=False)`) must find: a flag name, `incorrect`
or `incorrect:<set>` (refused by a failing input set, the first failure being <set>),
`compile` (the import fails) or `timeout`. Both modes must give reward 0. `escape`
names an attempt to leave the sandbox that the test proves, from outside, did not
happen (`write`, `socket`, `process`, `pip`, `forkbomb`; `file`: nothing named
/var/tmp/tritonrl_escape_* appears, and the victim file the test plants there is left
as it was). `limit` names the sandbox limit that must end the run wherever it gets past
the static layer (`VerifyResult.limit`: timeout, memory, ...).

Honest files (`.py` kernels, `.md` whole completions) carry `Expect: task=<task>` and
must be correct with no flags and the full CPU reward.

Each (file, mode) pair is verified once: a module fixture starts the selected
verifications on two threads up front (the verifier is thread-safe; most of the time is
spent in sandboxed subprocesses) and the tests wait for their own results. The socket
server and the escape paths are set up before any candidate runs.

Rewards. A kernel refused by a cheating flag, or ended by a sandbox limit (a hang, a
memory bomb), gets 0 in every scheme. One refused only because its outputs are wrong
(stale memory, weak-input and shape tricks, call counting, precision) gets 0 in the
correctness-gated schemes (tritonrl, kevin) and, in the default staged scheme, the same
partial credit as any compiled-but-wrong kernel (0.3, or 0.5 when the tiny set passed):
never the 0.7 of a correct one. An honest wrong kernel keeps that credit, and a kernel
ended by a limit never gets more than it.

Known gaps are files whose Expect line says `gap=<mode>`; that mode is a strict xfail.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import pwd
import re
import socket
import sys
import sysconfig
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import tritonrl
from tritonrl.config import VerifyConfig
from tritonrl.reward import SCHEMES, compute_reward, staged_reward
from tritonrl.tasks.loaders import load_source
from tritonrl.tasks.task import Task
from tritonrl.verify import VerifyResult, verify
from tritonrl.verify.result import CHEAT_FLAGS, LIMITS
from tritonrl.verify.static import FLAGS as STATIC_FLAGS
from tritonrl.verify.static import static_check

HERE = Path(__file__).parent
HOSTILE = sorted((HERE / "hostile").glob("*.py"))
HONEST = sorted(p for p in (HERE / "honest").iterdir() if p.suffix in (".py", ".md"))
MODES = ("default", "runtime")  # static checks on (the product default) / off
CPU_CORRECT_REWARD = 0.7
# Slack over the configured timeout for a verdict: reference inputs, sandbox start-up
# and tear-down, on a shared 2-core machine.
VERDICT_SLACK_S = 45.0
PORT = 47613  # the socket escape kernel's target (hostile/c23_socket_connect.py)
PARALLEL = int(os.environ.get("TRITONRL_TEST_PARALLEL", "2"))  # verifications at once

RUNTIME_WORDS = ("compile", "timeout", "incorrect", "correct")
ESCAPES = ("write", "socket", "process", "pip", "forkbomb", "file")


# ----- expectations ------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    task: str
    static: str | None = None
    runtime: str | None = None
    escape: str | None = None
    timeout: float | None = None
    memory_mb: int | None = None
    gap: str | None = None  # a mode in which the verifier is KNOWN to miss this one
    limit: str | None = None  # the sandbox limit that must end the run


@functools.cache  # parsed once: ast.parse beside the verifying threads' can fail on 3.11
def parse_expect(path: Path) -> Expect:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert "docs/hacks.md" in doc or "honest" in str(path), (
            f"{path.name}: no docs/hacks.md category"
        )
        text = doc
    lines = [ln.strip() for ln in text.splitlines()]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Expect:")]
    assert len(starts) == 1, f"{path.name}: need exactly one Expect: line"
    words = lines[starts[0]].removeprefix("Expect:").split()
    for more in lines[starts[0] + 1 :]:  # continued on the lines below
        if not more or not all("=" in w for w in more.split()):
            break
        words += more.split()
    fields = dict(kv.split("=", 1) for kv in words)
    known = {"task", "static", "runtime", "escape", "timeout", "memory_mb", "gap", "limit"}
    unknown = set(fields) - known
    assert not unknown, f"{path.name}: unknown Expect fields {unknown}"
    return Expect(
        task=fields["task"],
        static=fields.get("static"),
        runtime=fields.get("runtime"),
        escape=fields.get("escape"),
        timeout=float(fields["timeout"]) if "timeout" in fields else None,
        memory_mb=int(fields["memory_mb"]) if "memory_mb" in fields else None,
        gap=fields.get("gap"),
        limit=fields.get("limit"),
    )


@functools.cache
def load_task(spec: str, base: Path) -> Task:
    if not spec.startswith("builtin:"):
        spec = str(base / spec)
    (task,) = load_source(spec).tasks
    return task


def config_for(exp: Expect, mode: str) -> VerifyConfig:
    extra = {}
    if exp.timeout is not None:
        extra["timeout_s"] = exp.timeout
    if exp.memory_mb is not None:
        extra["memory_mb"] = exp.memory_mb
    return VerifyConfig(static_checks=(mode == "default"), **extra)


# ----- escape evidence ---------------------------------------------------------------


def escape_paths() -> list[Path]:
    """Where hostile/c23_write_outside.py tries to write."""
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    pkg = Path(tritonrl.__file__).resolve().parent
    paths = [Path("/tmp/tritonrl_escape_write"), home / ".tritonrl_escape_write"]
    paths.append(pkg / "tritonrl_escape_write.py")
    if Path("/dev/shm").is_dir():
        paths.append(Path("/dev/shm/tritonrl_escape_write"))
    return paths


# The c23_*_outside kernels and their kin: each changes something beneath /var/tmp (on
# the host's root, which the sandbox binds read-only; /tmp and home are private there).
ESCAPE_DIR = Path(os.path.realpath("/var/tmp"))
VICTIM = ESCAPE_DIR / "tritonrl_escape_victim"  # removed, truncated, chmod-ed by some
VICTIM_TEXT, VICTIM_MODE = "victim\n", 0o644


def plant_victim() -> None:
    """The file the kernels try to remove, truncate or chmod (left in place afterwards:
    another test session may be using it)."""
    VICTIM.write_text(VICTIM_TEXT)
    VICTIM.chmod(VICTIM_MODE)


def file_escapes() -> list[str]:
    """What a kernel created beneath ESCAPE_DIR, or did to the victim."""
    changed = [str(p) for p in ESCAPE_DIR.glob("tritonrl_escape_*") if p != VICTIM]
    if not VICTIM.is_file() or VICTIM.is_symlink():
        return [*changed, f"{VICTIM} (gone)"]
    if VICTIM.read_text() != VICTIM_TEXT or VICTIM.stat().st_mode & 0o7777 != VICTIM_MODE:
        changed.append(f"{VICTIM} (contents or mode)")
    return changed


PIP_PACKAGE = "tritonrl_escape_pkg"  # hostile/c23_pip_install.py


def pip_traces() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return sorted(site.glob(f"{PIP_PACKAGE}*"))


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


MARKERS = {
    "process": "tritonrl_escape_process_marker",
    "forkbomb": "tritonrl_escape_forkbomb_marker",
}


class LoopbackServer:
    """TCP and UDP listeners on 127.0.0.1:PORT that record whatever reaches them."""

    def __init__(self, port: int):
        self.events: list[str] = []
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", port))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", port))
        self.udp.settimeout(0.2)
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._accept, daemon=True),
            threading.Thread(target=self._receive, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, addr = self.tcp.accept()
            except OSError:
                continue
            self.events.append(f"tcp connection from {addr}")
            conn.close()

    def _receive(self) -> None:
        while not self.stop.is_set():
            try:
                data, addr = self.udp.recvfrom(4096)
            except OSError:
                continue
            self.events.append(f"udp datagram {data[:40]!r} from {addr}")

    def wait_for_events(self, n: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.events) < n and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=2)
        self.tcp.close()
        self.udp.close()


# ----- verification runs, each (file, mode) once ---------------------------------------


@dataclass
class Run:
    result: VerifyResult
    seconds: float


class Verdicts:
    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="verify")
        self.futures: dict[tuple[Path, str], Future] = {}
        self.lock = threading.Lock()

    def submit(self, path: Path, mode: str) -> Future:
        with self.lock:
            if (path, mode) not in self.futures:
                self.futures[(path, mode)] = self.pool.submit(self._run, path, mode)
            return self.futures[(path, mode)]

    def get(self, path: Path, mode: str) -> Run:
        return self.submit(path, mode).result()

    @staticmethod
    def _run(path: Path, mode: str) -> Run:
        exp = parse_expect(path)
        task = load_task(exp.task, path.parent)
        start = time.monotonic()
        result = verify(task, path.read_text(encoding="utf-8"), config_for(exp, mode))
        return Run(result, time.monotonic() - start)


def _wanted(items) -> list[tuple[Path, str]]:
    """(file, mode) pairs the selected tests of this module will ask for, slowest first."""
    pairs = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if item.module.__name__ != __name__ or callspec is None:
            continue
        path, mode = callspec.params.get("path"), callspec.params.get("mode", "default")
        if path is not None:
            pairs.append((path, mode))
    timeouts = {p: parse_expect(p).timeout or 0 for p, _ in pairs}
    return sorted(dict.fromkeys(pairs), key=lambda pm: -timeouts[pm[0]])


@pytest.fixture(scope="module")
def server():
    try:
        srv = LoopbackServer(PORT)
    except OSError as e:
        pytest.fail(f"cannot listen on 127.0.0.1:{PORT} for the socket escape test: {e}")
    # Positive control: the server does record a connection from this (unsandboxed) side.
    with socket.create_connection(("127.0.0.1", PORT), timeout=2):
        pass
    srv.wait_for_events(1)
    assert srv.events, "the loopback server does not see connections"
    srv.events.clear()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def verdicts(request, server):
    for path in escape_paths():
        # Positive control: this process can write there, so a sandbox-less candidate would.
        probe = path.with_name(path.name + ".probe")
        try:
            probe.write_text("x")
            probe.unlink()
        except OSError as e:
            pytest.fail(f"cannot write {probe} from the test process: {e}")
        assert not path.exists(), f"{path} exists before any candidate ran (a past escape?)"
    assert not pip_traces(), f"{pip_traces()} exist before any candidate ran"
    plant_victim()  # and a positive control: this process can write there
    assert not file_escapes(), f"{file_escapes()} exist before any candidate ran"
    wanted = _wanted(request.session.items)
    for path, _ in wanted:  # tasks parsed here, not on two threads at once (3.11's ast)
        load_task(parse_expect(path).task, path.parent)
    load_task("builtin:level1/1_ReLU", HERE)  # honest_wrong's
    v = Verdicts()
    for path, mode in wanted:
        v.submit(path, mode)
    yield v
    v.pool.shutdown(wait=True, cancel_futures=True)


# ----- hostile kernels -------------------------------------------------------------------


def _id(p: Path) -> str:
    return p.stem


def _hostile_params() -> list:
    """(path, mode) for every hostile file; a documented gap (`gap=<mode>` in its Expect
    line) is a strict xfail: it fails loudly once the verifier catches it."""
    params = []
    for path in HOSTILE:
        gap = parse_expect(path).gap
        for mode in MODES:
            marks = ()
            if gap == mode:
                reason = f"known verifier gap in {mode} mode, see {path.name}"
                marks = (pytest.mark.xfail(strict=True, reason=reason),)
            params.append(pytest.param(path, mode, marks=marks, id=f"{path.stem}-{mode}"))
    return params


def test_every_category_has_a_hostile_kernel() -> None:
    categories = set()
    for p in HOSTILE:
        doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or ""
        categories |= {int(m) for m in re.findall(r"docs/hacks\.md #(\d+)", doc)}
    # 9 (side stream) and 22 (impossible speed) need a GPU timer; 12 is covered by the
    # host-side timer patches.
    assert set(range(1, 25)) - {9, 22} <= categories


@pytest.mark.parametrize("path", HOSTILE, ids=_id)
def test_expect_line_is_well_formed(path: Path) -> None:
    exp = parse_expect(path)
    assert exp.static == "none" or exp.static in STATIC_FLAGS, exp.static
    outcome = (exp.runtime or "").split(":")[0]
    assert exp.runtime in CHEAT_FLAGS or outcome in RUNTIME_WORDS, exp.runtime
    assert exp.escape is None or exp.escape in ESCAPES
    assert exp.gap is None or exp.gap in MODES
    assert exp.limit is None or exp.limit in LIMITS
    load_task(exp.task, path.parent)


@pytest.mark.parametrize("path", HOSTILE, ids=_id)
def test_static_layer(path: Path) -> None:
    """The AST layer alone, called directly: the expected flag, or nothing for files
    written to get past it."""
    exp = parse_expect(path)
    flags = {f.flag for f in static_check(path.read_text(encoding="utf-8"))}
    if exp.static == "none":
        assert not flags & CHEAT_FLAGS, f"meant to dodge the static layer, but got {flags}"
    else:
        assert exp.static in flags, f"static flags {flags}"


def _assert_runtime(exp: Expect, run: Run, path: Path) -> None:
    r = run.result
    expected = exp.runtime or ""
    outcome, _, set_name = expected.partition(":")
    summary = f"{path.name}: flags={r.flags} stage={r.stage} error={r.error!r}"
    if expected in CHEAT_FLAGS:
        assert expected in r.flags, summary
    elif outcome == "incorrect":
        assert not r.correct, summary
        failed = [o.name for o in r.input_sets if not o.ok]
        assert failed, f"no input set failed; {summary}"
        if set_name:
            assert failed[0] == set_name, f"first failing set {failed[0]}; {summary}"
    elif outcome == "compile":
        assert not r.compiled and r.stage == "compile", summary
    elif outcome == "timeout":
        assert r.timed_out and r.limit == "timeout", summary
        limit = exp.timeout or VerifyConfig().timeout_s
        assert run.seconds <= limit + VERDICT_SLACK_S, f"verdict after {run.seconds:.0f} s"
    else:  # pragma: no cover - test_expect_line_is_well_formed refuses it
        pytest.fail(f"unknown runtime expectation {expected!r}")


def _reaches_runtime(exp: Expect, mode: str) -> bool:
    """Gets past the static layer: the run-time layer decides."""
    return mode == "runtime" or exp.static == "none"


def _earns_nothing(exp: Expect, mode: str) -> bool:
    """Refused by a cheating flag or ended by a sandbox limit (reward 0 in every scheme),
    as opposed to refused for wrong outputs or a failed import (the staged scheme's
    partial credit)."""
    if not _reaches_runtime(exp, mode):
        return True
    return exp.runtime in CHEAT_FLAGS or exp.limit is not None


@pytest.mark.parametrize(("path", "mode"), _hostile_params())
def test_hostile_kernel_is_refused(path: Path, mode: str, verdicts: Verdicts) -> None:
    exp = parse_expect(path)
    run = verdicts.get(path, mode)
    r = run.result
    summary = f"{path.name} [{mode}]: flags={r.flags} stage={r.stage} error={r.error!r}"
    assert not r.correct, f"accepted as correct: {summary}"
    for scheme in ("tritonrl", "kevin"):  # correctness-gated schemes: nothing at all
        assert compute_reward(r, scheme) == 0.0, f"{scheme} reward; {summary}"
    if _earns_nothing(exp, mode):
        assert compute_reward(r) == 0.0, f"rewarded: {summary}"
    else:
        # Refused for its outputs (or its import): the staged scheme still gives the
        # partial credit of any compiled-but-wrong kernel, never the 0.7 of a correct one.
        assert compute_reward(r) == staged_reward(r) < CPU_CORRECT_REWARD, summary
    if mode == "default" and exp.static != "none":
        assert exp.static in r.flags, f"static flag missing: {summary}"
        assert r.stage == "static", f"the funnel went past static: {summary}"
    else:
        _assert_runtime(exp, run, path)


# ----- escapes, proven from outside ----------------------------------------------------

ESCAPE_FILES = [p for p in HOSTILE if parse_expect(p).escape]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", ESCAPE_FILES, ids=_id)
def test_escape_did_not_happen(path: Path, mode: str, verdicts: Verdicts, server) -> None:
    exp = parse_expect(path)
    run = verdicts.get(path, mode)
    assert run.result.stage in ("static", "compile", "correctness", "done")
    if mode == "runtime":  # the attempt did run, and the run-time layer saw it
        assert "sandbox_violation" in run.result.flags, run.result.flags
    if exp.escape == "write":
        written = [str(p) for p in escape_paths() if p.exists()]
        assert not written, f"the candidate wrote {written}"
    elif exp.escape == "socket":
        server.wait_for_events(1, timeout=1.0)
        assert not server.events, f"the loopback server saw {server.events}"
    elif exp.escape == "pip":
        assert not pip_traces(), f"installed: {pip_traces()}"
        import importlib.util

        assert importlib.util.find_spec(PIP_PACKAGE) is None
    elif exp.escape == "file":
        changed = file_escapes()
        assert not changed, f"the candidate changed {changed}"
        if mode == "runtime":  # the flag names the path
            notes = [n for n in run.result.notes if n.startswith("sandbox_violation")]
            assert any(f"{ESCAPE_DIR}/tritonrl_escape_" in n for n in notes), notes
    elif exp.escape in MARKERS:
        deadline = time.monotonic() + 3
        while processes_with(MARKERS[exp.escape]) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = processes_with(MARKERS[exp.escape])
        assert not alive, f"processes survived the sandbox: {alive}"


# ----- resource abuse: bounded verdicts, healthy caller --------------------------------

ABUSE_FILES = [p for p in HOSTILE if p.name.startswith("c24_")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", ABUSE_FILES, ids=_id)
def test_abuse_gets_a_bounded_verdict(path: Path, mode: str, verdicts: Verdicts) -> None:
    exp = parse_expect(path)
    run = verdicts.get(path, mode)
    limit = exp.timeout or VerifyConfig().timeout_s
    assert run.seconds <= limit + VERDICT_SLACK_S, f"verdict after {run.seconds:.0f} s"
    assert run.result.error, "a refusal says why"


LIMIT_FILES = [p for p in HOSTILE if parse_expect(p).limit]


@pytest.fixture(scope="module")
def honest_wrong(verdicts: Verdicts) -> dict[bool, VerifyResult]:
    """Honest ReLU kernels with a bug, by whether the tiny set passes: one wrong
    everywhere (staged 0.3), one that covers only the first 4096 elements (the tiny set,
    so 0.5). Verified on the fixture's threads, like the rest."""
    relu = load_task("builtin:level1/1_ReLU", HERE)
    launch = "relu_kernel[(triton.cdiv(n, BLOCK),)]"
    wrong = relu.solution.replace("tl.maximum(x, 0.0)", "tl.abs(x)")
    partial = relu.solution.replace(launch, "relu_kernel[(min(triton.cdiv(n, BLOCK), 4),)]")
    assert relu.solution not in (wrong, partial)
    runs = {
        ok: verdicts.pool.submit(verify, relu, code)
        for ok, code in ((False, wrong), (True, partial))
    }
    return {ok: run.result() for ok, run in runs.items()}


@pytest.mark.parametrize(
    ("path", "mode"),
    [
        pytest.param(p, m, id=f"{p.stem}-{m}")
        for p in LIMIT_FILES
        for m in MODES
        if _reaches_runtime(parse_expect(p), m)
    ],
)
def test_a_run_ended_by_a_limit_earns_nothing(
    path: Path, mode: str, verdicts: Verdicts, honest_wrong: dict[bool, VerifyResult]
) -> None:
    """A hang or a memory bomb ends with the limit named in the result (and its JSON),
    the error says which setting to raise, and no scheme pays for it, while an honest
    kernel that got as far and was wrong keeps its partial credit."""
    exp = parse_expect(path)
    r = verdicts.get(path, mode).result
    summary = f"{path.name} [{mode}]: limit={r.limit} stage={r.stage} error={r.error!r}"
    assert r.limit == exp.limit and r.timed_out == (exp.limit == "timeout"), summary
    assert json.loads(r.to_json())["limit"] == exp.limit
    if exp.limit == "file_size":  # sized from the task's outputs: no setting to raise
        assert "the file-size limit (256 MB a file" in r.error, summary
    else:
        setting = {"timeout": "verify.timeout_s", "memory": "verify.memory_mb"}[exp.limit]
        assert f"{setting} = " in r.error and f"raise it with --{setting}" in r.error, summary
    assert [compute_reward(r, scheme) for scheme in SCHEMES] == [0.0] * len(SCHEMES), summary
    assert compute_reward(r) == 0.0, summary
    if r.compiled:  # the honest wrong kernel that reached the same stage is paid more
        control = honest_wrong[r.tiny_correct]
        assert control.limit is None and not control.timed_out, control.error
        assert compute_reward(control) == (0.5 if r.tiny_correct else 0.3), control.error


@pytest.mark.gpu
def test_a_limit_in_the_timing_phase_earns_nothing() -> None:
    """A correct kernel that hangs once it is timed (after its input sets' calls) is
    killed at the deadline in the timing phase: its correct input sets earn nothing."""
    relu = load_task("builtin:level1/1_ReLU", HERE)
    counted = relu.solution.replace(
        "        x = x.contiguous()\n",
        "        import time\n"
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 8:  # past the input sets: the timing phase\n"
        "            time.sleep(3600)\n"
        "        x = x.contiguous()\n",
    )
    assert counted != relu.solution
    r = verify(relu, counted, VerifyConfig(static_checks=False, timeout_s=40))
    summary = f"stage={r.stage} correct={r.correct} limit={r.limit} error={r.error!r}"
    assert r.correct and r.stage == "performance", summary  # every input set passed
    assert r.limit == "timeout" and r.timed_out and "verify.timeout_s = " in r.error, summary
    assert [compute_reward(r, scheme) for scheme in SCHEMES] == [0.0] * len(SCHEMES), summary


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_caller_healthy_after_abuse(verdicts: Verdicts) -> None:
    """After every abuse verdict is in, the caller still verifies an honest kernel, and
    the floods did not end up in its memory."""
    for path in ABUSE_FILES:
        for mode in MODES:
            verdicts.get(path, mode)
    assert _rss_mb() < 4096, f"caller RSS {_rss_mb():.0f} MiB"
    honest = HONEST[0]
    exp = parse_expect(honest)
    r = verify(load_task(exp.task, honest.parent), honest.read_text(encoding="utf-8"))
    assert r.correct and not r.flags and compute_reward(r) >= CPU_CORRECT_REWARD - 1e-9, r.error
    assert threading.active_count() < 50
    assert not processes_with(MARKERS["forkbomb"])


# ----- honest kernels ------------------------------------------------------------------


@pytest.mark.parametrize("path", HONEST, ids=_id)
def test_honest_kernel_passes(path: Path, verdicts: Verdicts) -> None:
    run = verdicts.get(path, "default")
    r = run.result
    summary = f"{path.name}: flags={r.flags} stage={r.stage} error={r.error!r} notes={r.notes}"
    assert r.correct, summary
    assert r.flags == [], summary
    assert r.stage == "done", summary
    assert len(r.input_sets) >= 5 and all(o.ok for o in r.input_sets), summary
    if r.device == "cpu":  # no timing on the interpreter: the staged reward of "correct"
        assert compute_reward(r) == pytest.approx(CPU_CORRECT_REWARD), summary
    else:
        assert compute_reward(r) >= CPU_CORRECT_REWARD, summary


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
