"""The sandbox against hostile children (docs/hacks.md #23 and #24), for real: no mocks.

Each hostile child is a small Python script run through `run_sandboxed` with this
interpreter. Processes inside the sandbox live in their own pid namespace, so the pids
they can see (and write to pid files) are not host pids: survivors are looked for on the
host by a unique token in their command line, and by a heartbeat file that stops
growing once they are dead.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from tritonrl.verify.sandbox import (
    REQUIRED,
    SandboxConfig,
    SandboxRun,
    SandboxUnavailable,
    probe,
    run_sandboxed,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

# "full": bwrap + Landlock + cgroup; "no-bwrap": the fallback (unshare + Landlock).
MODES = {
    "full": {},
    "no-bwrap": {"strict": False, "disable": frozenset({"bwrap"})},
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def run_script(
    workdir: Path, code: str, *, stdin: bytes | None = None, **config: object
) -> SandboxRun:
    script = workdir / "child.py"
    script.write_text(textwrap.dedent(code))
    config.setdefault("timeout_s", 20.0)
    return run_sandboxed([sys.executable, str(script)], workdir, SandboxConfig(**config), stdin)


def host_processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token` (this test process excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(entry.name))
    return found


_EARLIER: set[str] = set()


@pytest.fixture(autouse=True)
def _earlier_children() -> None:
    """Children this process had before the test (a session's S3 server) are not its own."""
    _EARLIER.clear()
    _EARLIER.update(line.split()[0] for line in my_children())


def my_children() -> list[str]:
    """Lines 'pid state' of this process's children (zombies included), except those
    it had before the test began."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(os.getpid()) and entry.name not in _EARLIER:
            children.append(f"{entry.name} {fields.get('State', '?').strip()}")
    return children


# --------------------------------------------------------------------------------------
# Mechanisms and policy
# --------------------------------------------------------------------------------------


def test_probe_reports_mechanisms() -> None:
    info = probe()
    for key in ("bwrap", "landlock", "landlock_abi", "netns", "pidns", "rlimits", "nproc"):
        assert key in info
    # This machine (and CI, a machine of the same kind) has everything: the rest of this
    # file relies on it, so say so plainly if not.
    assert info["bwrap"], info["bwrap_error"]
    assert info["landlock"] and int(info["landlock_abi"]) >= 1
    assert info["netns"] and info["pidns"] and info["nproc"]
    assert info["memory_cgroup"], "no writable cgroup with the memory controller"
    assert probe() == info  # cached


def test_cgroup_probes_from_many_threads_at_once_all_find_the_cgroup() -> None:
    # A pool's lanes start together: 16 threads once probed under one name, and every
    # thread but the first found no writable pids cgroup and refused to run (H100).
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from tritonrl.verify.sandbox.cgroup import cgroup_parent

    gate = Barrier(16)

    def find(_: int):
        gate.wait()
        return cgroup_parent("pids"), cgroup_parent("memory")

    with ThreadPoolExecutor(16) as ex:
        found = list(ex.map(find, range(16)))
    assert all(pids and memory for pids, memory in found), found


def test_normal_run_reports_what_is_enforced(workdir: Path) -> None:
    run = run_script(workdir, "print('hello')")
    assert run.ok and run.stdout == "hello\n" and run.killed is None
    assert set(run.enforced) >= {"bwrap", "landlock", "netns", "pidns", "pids-cgroup"}
    assert "memory-cgroup" in run.enforced
    assert {"rlimit-as", "rlimit-fsize", "rlimit-cpu", "rlimit-core"} <= set(run.enforced)
    assert run.missing == [] or all(m.startswith("landlock-") for m in run.missing)


@pytest.mark.parametrize("mechanism", REQUIRED)
def test_strict_refuses_when_a_mechanism_is_unavailable(workdir: Path, mechanism: str) -> None:
    marker = workdir / "ran"
    code = f"open({str(marker)!r}, 'w').close()"
    with pytest.raises(SandboxUnavailable, match=mechanism):
        run_script(workdir, code, disable=frozenset({mechanism}))
    assert not marker.exists()


def test_non_strict_warns_and_records_missing(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tritonrl.verify.sandbox"):
        run = run_script(workdir, "print('ran')", strict=False, disable=frozenset({"landlock"}))
    assert run.ok and run.stdout == "ran\n"
    assert any(m.startswith("landlock:") for m in run.missing)
    assert "landlock" not in run.enforced
    assert any("NOT enforced: landlock" in r.getMessage() for r in caplog.records)


def test_gpu_mode_skips_the_address_space_limit_and_says_so(workdir: Path) -> None:
    run = run_script(workdir, "print('ok')", gpu=True)
    assert run.ok
    assert "rlimit-as" not in run.enforced
    assert any(m.startswith("rlimit-as:") for m in run.missing)


# --------------------------------------------------------------------------------------
# Environment and files (docs/hacks.md #23)
# --------------------------------------------------------------------------------------


def test_env_scrubbed_and_home_is_workdir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    code = """
        import json, os, tempfile
        print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(),
                          "tmp": tempfile.gettempdir()}))
    """
    run = run_script(workdir, code)
    assert run.ok, run.stderr
    seen = json.loads(run.stdout)
    env = seen["env"]
    assert "AWS_SECRET_ACCESS_KEY" not in env and "hunter2" not in run.stdout
    assert env["HOME"] == env["TMPDIR"] == seen["cwd"] == seen["tmp"] == str(workdir)
    assert env["TRITON_CACHE_DIR"].startswith(str(workdir))
    assert env["TRITON_INTERPRET"] == "1"  # on the allow-list
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "PWD", "LC_CTYPE"}
    extra = {k for k in env if not k.startswith(("PYTHON", "TRITON_", "XDG_", "OMP_"))}
    assert extra - allowed - set(SandboxConfig().env_passthrough) == set()


@pytest.mark.parametrize("mode", MODES)
def test_writes_confined_to_workdir(workdir: Path, tmp_path: Path, mode: str) -> None:
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    tag = uuid.uuid4().hex
    targets = [
        outside_dir / "pwned.txt",
        Path.home() / f"tritonrl-pwned-{tag}.txt",
        Path("/tmp") / f"tritonrl-pwned-{tag}.txt",
        Path(sys.prefix) / f"tritonrl-pwned-{tag}.txt",
    ]
    code = f"""
        import os
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("pwned")
                print("WROTE", path)
            except OSError as exc:
                print("DENIED", path, exc.errno)
        try:
            os.rename({str(outside_dir)!r}, {str(outside_dir) + "-moved"!r})
            print("RENAMED")
        except OSError:
            print("DENIED rename")
        with open("inside.txt", "w") as f:
            f.write("fine")
    """
    run = run_script(workdir, code, **MODES[mode])
    assert run.ok, run.stderr
    for target in targets:
        assert not target.exists(), f"{target} was written ({mode})"
    assert outside_dir.is_dir() and "RENAMED" not in run.stdout
    assert (workdir / "inside.txt").read_text() == "fine"


def test_home_directory_hidden(workdir: Path) -> None:
    """The caller's home (credentials, tokens) is not readable in the sandbox."""
    secret = Path.home() / f".tritonrl-secret-{uuid.uuid4().hex}"
    secret.write_text("hunter2-token")
    try:
        code = f"""
            try:
                print(open({str(secret)!r}).read())
            except OSError as exc:
                print("UNREADABLE", type(exc).__name__)
        """
        run = run_script(workdir, code)
    finally:
        secret.unlink()
    assert run.ok, run.stderr
    assert "hunter2" not in run.stdout and "UNREADABLE" in run.stdout


def test_cannot_install_packages(workdir: Path) -> None:
    """pip works inside (into the work dir) but cannot touch the environment's packages."""
    name = f"canary_{uuid.uuid4().hex[:8]}"
    wheel = workdir / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        info = f"{name}-0.1.dist-info"
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{info}/RECORD", "")
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "-q"]
    pip += ["--disable-pip-version-check", "--no-cache-dir"]
    code = f"""
        import subprocess, sys
        into_env = subprocess.run({pip + [str(wheel)]!r})
        into_workdir = subprocess.run({pip + ["--target", "target", str(wheel)]!r})
        print("ENV", into_env.returncode, "WORKDIR", into_workdir.returncode)
    """
    run = run_script(workdir, code, timeout_s=60)
    assert run.ok, run.stderr
    assert "WORKDIR 0" in run.stdout, run.stdout + run.stderr  # the wheel is installable
    assert "ENV 0" not in run.stdout
    site = Path(sysconfig.get_paths()["purelib"])
    assert not (site / name).exists()
    assert (workdir / "target" / name / "__init__.py").exists()


def test_subprocess_shell_is_contained(workdir: Path, tmp_path: Path) -> None:
    target = tmp_path / "from-shell.txt"
    code = f"""
        import subprocess
        done = subprocess.run(["sh", "-c", "echo pwned > {target}; echo shell-ran"],
                              capture_output=True, text=True)
        print(done.stdout.strip(), done.returncode)
    """
    run = run_script(workdir, code)
    assert run.ok, run.stderr
    assert "shell-ran" in run.stdout  # spawning is allowed...
    assert not target.exists()  # ...but the shell is inside the same sandbox


# --------------------------------------------------------------------------------------
# Network (docs/hacks.md #23)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_no_network(workdir: Path, mode: str) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    code = f"""
        import socket
        for host in ("127.0.0.1", "1.1.1.1"):
            try:
                socket.create_connection((host, {port}), timeout=2).close()
                print("CONNECTED", host)
            except OSError as exc:
                print("FAILED", host, type(exc).__name__)
        try:
            socket.getaddrinfo("pypi.org", 443)
            print("RESOLVED")
        except OSError:
            print("NO DNS")
    """
    try:
        run = run_script(workdir, code, **MODES[mode])
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody ever connected
    finally:
        server.close()
    assert run.ok, run.stderr
    assert "CONNECTED" not in run.stdout and "RESOLVED" not in run.stdout
    assert run.stdout.count("FAILED") == 2


# --------------------------------------------------------------------------------------
# Resource abuse (docs/hacks.md #24)
# --------------------------------------------------------------------------------------


def test_infinite_loop_killed_at_timeout(workdir: Path) -> None:
    run = run_script(workdir, "while True:\n    pass\n", timeout_s=1.5)
    assert run.timed_out and run.killed == "timeout" and not run.ok
    assert 1.5 <= run.wall_s < 1.5 + 1.5
    assert host_processes_with(str(workdir)) == []
    assert my_children() == []  # reaped: no zombie


@pytest.mark.parametrize(
    ("mode", "then"), [("full", "exit"), ("full", "hang"), ("no-bwrap", "hang")]
)
def test_setsid_grandchild_dies_with_the_sandbox(workdir: Path, mode: str, then: str) -> None:
    heartbeat = workdir / "heartbeat"
    pid_file = workdir / "grandchild.pid"
    loop = (
        "import os, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n"
        f"    open({str(heartbeat)!r}, 'a').write('.')\n"
        "    time.sleep(0.05)\n"
    )
    code = f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {loop!r}], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.02)
        print("grandchild started", flush=True)
        if {then!r} == "hang":
            time.sleep(3600)
    """
    run = run_script(workdir, code, timeout_s=3, **MODES[mode])
    assert "grandchild started" in run.stdout, run.stderr
    assert run.timed_out == (then == "hang")
    assert run.wall_s < 3 + 2
    assert pid_file.exists() and heartbeat.exists()
    assert host_processes_with(str(heartbeat)) == []
    size = heartbeat.stat().st_size
    time.sleep(0.3)
    assert heartbeat.stat().st_size == size  # nobody is writing any more
    assert my_children() == []


def test_fork_bomb_contained(workdir: Path) -> None:
    code = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    start = time.monotonic()
    run = run_script(workdir, code, timeout_s=2, max_procs=16)
    assert run.timed_out and time.monotonic() - start < 2 + 3
    assert host_processes_with(str(workdir)) == []
    assert my_children() == []
    assert subprocess.run(["true"]).returncode == 0  # the caller can still fork


def test_process_limit(workdir: Path) -> None:
    code = """
        import os, time
        started = 0
        for _ in range(40):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                started += 1
            except OSError:
                break
        print("STARTED", started, flush=True)
        os._exit(0)
    """
    run = run_script(workdir, code, max_procs=8)
    assert run.ok, run.stderr
    started = int(run.stdout.split()[-1])
    assert 1 <= started < 8
    assert host_processes_with(str(workdir)) == []


def test_memory_bomb_killed_parent_fine(workdir: Path) -> None:
    code = """
        block = bytearray(50 * 2**30)  # 50 GB
        print("ALLOCATED", len(block))
    """
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = run_script(workdir, code, memory_mb=1024)
    assert not run.ok and run.killed == "memory" and "ALLOCATED" not in run.stdout
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB
    assert run_script(workdir, "print('still fine')").stdout == "still fine\n"


MEMORY_BOMB = """
    import resource
    print("RLIMIT_AS", resource.getrlimit(resource.RLIMIT_AS)[0], flush=True)
    hoard = []
    while True:  # touched pages: resident memory, not just address space
        hoard.append(bytearray(b"x") * (64 << 20))
"""


def test_memory_cgroup_kills_a_bomb_without_the_address_space_limit(workdir: Path) -> None:
    """gpu=True skips RLIMIT_AS (CUDA reserves a huge address space): the memory cgroup
    is then the only memory limit, and the OOM killer's kill is reported as "memory"."""
    start = time.monotonic()
    run = run_script(workdir, MEMORY_BOMB, gpu=True, memory_mb=512, timeout_s=60)
    elapsed = time.monotonic() - start
    assert "memory-cgroup" in run.enforced and "rlimit-as" not in run.enforced
    assert "RLIMIT_AS -1" in run.stdout  # no address-space limit inside
    assert run.killed == "memory" and not run.timed_out, (run.killed, run.stderr[-300:])
    assert elapsed < 20, f"killed after {elapsed:.0f} s"
    assert host_processes_with(str(workdir)) == []
    assert run_script(workdir, "print('still fine')", gpu=True).stdout == "still fine\n"


def test_memory_cgroup_can_be_disabled_and_says_so(workdir: Path) -> None:
    run = run_script(workdir, "print('ok')", disable=frozenset({"memory-cgroup"}))
    assert run.ok and "memory-cgroup" not in run.enforced
    assert "memory-cgroup: disabled by SandboxConfig.disable" in run.missing


def test_file_size_limit(workdir: Path) -> None:
    code = """
        with open("big.bin", "wb") as f:
            f.write(b"x" * (3 << 20))
    """
    run = run_script(workdir, code, max_file_mb=1)
    assert not run.ok
    assert (workdir / "big.bin").stat().st_size <= 1 << 20


def test_giant_output_capped(workdir: Path) -> None:
    code = """
        import sys
        chunk = b"x" * (1 << 20)
        for _ in range(256):
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.write(b"\\nEND\\n")
        sys.stderr.write("e" * (3 << 20))
    """
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = run_script(workdir, code, output_cap_bytes=1 << 20)
    assert run.ok, run.stderr[-500:]
    assert len(run.stdout) < (1 << 20) + 200 and len(run.stderr) < (1 << 20) + 200
    assert "bytes truncated" in run.stdout and run.stdout.endswith("END\n")
    assert run.truncated == ["stdout", "stderr"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB


def test_stdin_is_delivered(workdir: Path) -> None:
    run = run_script(
        workdir, "import sys; print(len(sys.stdin.buffer.read()))", stdin=b"a" * 300_000
    )
    assert run.ok and run.stdout.strip() == "300000"


# --------------------------------------------------------------------------------------
# What the verifier needs inside
# --------------------------------------------------------------------------------------

KERNEL = """
    import os
    import torch
    import triton
    import triton.language as tl

    assert os.environ["TRITON_INTERPRET"] == "1"


    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)


    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(1000, 256),)](x, y, out, 1000, BLOCK=256)
    torch.testing.assert_close(out, x + y)
    print("TRITON OK")
"""


def test_torch_and_triton_interpreter_work_inside(workdir: Path) -> None:
    start = time.monotonic()
    run = run_script(workdir, KERNEL, timeout_s=60, env={"TRITON_INTERPRET": "1"})
    assert run.ok, run.stderr[-2000:]
    assert run.stdout.strip() == "TRITON OK"
    assert time.monotonic() - start < 30


CUDA_KERNEL = """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    double_kernel[(16,)](x, out, 4096, BLOCK=256)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2)
    try:
        open("/tmp/from-gpu-child", "w")
        print("WROTE")
    except OSError:
        print("CUDA OK")
"""


@pytest.mark.gpu
def test_cuda_triton_kernel_runs_inside_with_gpu_mode(workdir: Path) -> None:
    run = run_script(workdir, CUDA_KERNEL, timeout_s=120, gpu=True, env={"TRITON_INTERPRET": "0"})
    assert run.ok, run.stderr[-2000:]
    assert run.stdout.strip() == "CUDA OK"
    assert "landlock" in run.enforced and "bwrap" in run.enforced
