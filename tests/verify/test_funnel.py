"""The staged funnel end to end on the CPU: verdicts for good and bad candidates.

Every case goes through the real sandboxed worker and the Triton interpreter.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tritonrl.config import VerifyConfig
from tritonrl.reward import compute_reward
from tritonrl.tasks import Task, load_builtin, load_source
from tritonrl.verify import verify
from tritonrl.verify.result import STAGES

HAS_CUDA = torch.cuda.is_available()
RELU = load_builtin("level1/1_ReLU").tasks[0]
GEMM = load_builtin("level2/1_Gemm_Bias_ReLU").tasks[0]


def test_a_correct_solution_passes_every_stage_and_input_set():
    r = verify(GEMM, GEMM.solution)
    assert (r.stage, r.compiled, r.tiny_correct, r.correct) == ("done", True, True, True)
    assert r.flags == [] and r.error is None
    assert [o.name for o in r.input_sets] == ["tiny", "seed_a", "seed_b", "shifted", "odd"]
    if HAS_CUDA:  # timed: 0.7 + 0.3 * min(speedup / 2, 1)
        assert r.device == "cuda" and r.speedup > 0 and compute_reward(r) > 0.7
        assert r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1]
    else:  # no timing under the interpreter
        assert r.device == "cpu" and r.speedup is None and compute_reward(r) == pytest.approx(0.7)
    assert {"extract", "static", "compile", "tiny", "correctness"} <= set(r.stage_times)
    assert "netns" in r.sandbox["enforced"]
    # On CUDA the address-space limit is skipped (the driver reserves a huge one): said so.
    missing = [m.split(":")[0] for m in r.sandbox["missing"]]
    assert missing == (["rlimit-as"] if HAS_CUDA else [])
    d = json.loads(r.to_json())
    for key in ("task", "stage", "compiled", "correct", "flags", "error", "timed_out",
                "runtime_ms", "ref_runtime_ms", "speedup", "speedups", "limit",
                "device"):  # fmt: skip
        assert key in d
    assert "reward" not in d  # the reward side scores a verdict (tritonrl.reward)


def test_an_untimed_result_says_why():
    # Timing needs CUDA: on the CPU a correct kernel's result says it was not timed (its
    # reward is the untimed one); with timing switched off nothing says so.
    r = verify(RELU, RELU.solution, VerifyConfig(device="cpu"))
    assert r.correct and r.stage == "done" and r.timing == {} and r.speedup is None
    assert "not timed: timing needs CUDA (device cpu)" in r.notes, r.notes
    assert compute_reward(r) == pytest.approx(0.7)
    off = verify(RELU, RELU.solution, VerifyConfig(device="cpu", timing=False))
    assert off.correct and not any(n.startswith("not timed") for n in off.notes), off.notes


def test_a_completion_with_reasoning_and_fences_is_extracted():
    completion = f"<think>relu is max(x, 0)</think>\nHere it is:\n```python\n{RELU.solution}```\n"
    assert verify(RELU, completion).correct


@pytest.mark.parametrize(
    ("candidate", "stage", "needle"),
    [
        ("", "extract", "empty"),
        ("Sorry, I cannot write that kernel.", "extract", "ModelNew"),
        ("```python\nclass ModelNew(:\n    pass\n```", "extract", "line"),
        ("x" * (10 << 20), "extract", "ModelNew"),
        (b"\xff\xfe\x00 not utf-8 \x80", "extract", "ModelNew"),
    ],
    ids=["empty", "no-modelnew", "syntax-error", "10MB", "non-utf8"],
)
def test_unusable_completions_get_an_extract_verdict(candidate, stage, needle):
    r = verify(RELU, candidate)
    assert r.stage == stage and not r.compiled and compute_reward(r) == 0.0
    assert needle.lower() in r.error.lower()


def test_a_finding_about_the_whole_file_names_no_line():
    """A candidate with no Triton kernel at all was told `line 0: no @triton.jit ...`."""
    torch_only = RELU.solution.split("class ModelNew")[0].split("@triton.jit")[0] + (
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
        "        return torch.relu(x)\n"
    )
    r = verify(RELU, torch_only)
    assert r.stage == "static" and "no_triton_kernel" in r.flags
    assert "no_triton_kernel: no @triton.jit function is defined" in r.notes
    assert not any("line 0" in n for n in r.notes) and "line 0" not in (r.error or "")
    assert any(n.startswith("torch_compute: line ") for n in r.notes)  # a line where there is one


def test_wrong_init_signature_is_a_clear_failure():
    bad = RELU.solution.replace("def __init__(self):", "def __init__(self, width):")
    r = verify(RELU, bad)
    assert r.compiled and not r.correct and compute_reward(r) == pytest.approx(0.3)
    assert "TypeError" in r.error and "width" in r.error


def test_wrong_output_shape_and_dtype_name_the_problem():
    shape = verify(RELU, RELU.solution.replace("return y", "return y[:1]"))
    assert not shape.correct and "shape" in shape.error
    dtype = verify(RELU, RELU.solution.replace("return y", "return y.double()"))
    assert not dtype.correct and "dtype" in dtype.error


def test_a_wrong_kernel_stops_at_the_tiny_run():
    r = verify(RELU, RELU.solution.replace("tl.maximum(x, 0.0)", "tl.abs(x)"))
    assert r.stage == "correctness" and r.compiled and not r.tiny_correct
    assert [o.name for o in r.input_sets] == ["tiny"]  # the funnel stopped there
    assert compute_reward(r) == pytest.approx(0.3)


def test_a_kernel_triton_does_not_compile_earns_nothing_for_compiling():
    # Triton compiles a kernel at its first launch: a compile error there is a module
    # that loaded but a kernel that did not compile, not the 0.3 of a wrong answer. The
    # interpreter compiles nothing, so here the candidate raises Triton's own error, with
    # the static checks off (they refuse `triton.compiler`); on the GPU (below) Triton
    # raises it.
    head = "    def forward(self, x: torch.Tensor) -> torch.Tensor:"
    raising = RELU.solution.replace(
        head, head + "\n        raise triton.compiler.errors.CompilationError(None, None, 'no')\n"
    )
    assert raising != RELU.solution
    unchecked = VerifyConfig(static_checks=False)
    r = verify(RELU, raising, unchecked)
    assert (r.stage, r.compiled, r.tiny_correct, r.correct) == ("compile", False, False, False)
    assert r.error.startswith("input set tiny: CompilationError"), r.error
    assert compute_reward(r) == 0.0
    plain = raising.replace("triton.compiler.errors.CompilationError(None, None, ", "ValueError(")
    other = verify(RELU, plain, unchecked)
    assert (other.stage, other.compiled) == ("correctness", True), other.error
    assert compute_reward(other) == pytest.approx(0.3)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA: the interpreter compiles nothing")
def test_on_the_gpu_a_kernel_the_compiler_refuses_is_not_compiled():
    bad = RELU.solution.replace("0.0), mask=mask)", "0.0), mask=mask, other=0.0)")
    assert "tl.store" in RELU.solution and bad != RELU.solution
    r = verify(RELU, bad)
    assert (r.stage, r.compiled) == ("compile", False), (r.stage, r.error)
    assert "CompilationError" in r.error and compute_reward(r) == 0.0


def test_without_the_funnel_every_input_set_runs():
    r = verify(RELU, RELU.solution.replace("tl.maximum(x, 0.0)", "tl.abs(x)"),
               VerifyConfig(funnel=False))  # fmt: skip
    assert len(r.input_sets) == 5 and not any(o.ok for o in r.input_sets)


def test_the_worker_shows_no_caller_path_or_argv_to_probe(monkeypatch):
    # A phase probe (docs/hacks.md #16) reads words from PATH and argv. CI once ran from a
    # checkout under /check/, which made every call look like a check: the worker must
    # see the same neutral argv and a fixed system PATH whatever the caller's are.
    monkeypatch.setenv("PATH", "/opt/check/test/bin:" + os.environ.get("PATH", ""))
    probe = RELU.solution.replace(
        "    def forward(self, x",
        "    def forward(self, x, _probe=None):\n"
        "        import os, sys\n"
        "        assert sys.argv == ['tritonrl-worker'], sys.argv\n"
        "        assert 'check' not in os.environ['PATH'], os.environ['PATH']\n"
        "        return self._forward(x)\n\n"
        "    def _forward(self, x",
        1,
    )
    assert "_forward" in probe
    r = verify(RELU, probe, VerifyConfig(static_checks=False))
    assert r.correct, r.error


def test_a_task_whose_reference_fails_is_reported_as_such(tmp_path):
    broken = RELU.source.replace("return torch.relu(x)", "return torch.relu(x) + undefined_name")
    task = Task("broken", 1, "broken", broken, "mem")
    r = verify(task, RELU.solution)
    assert not r.correct and "reference failed" in r.error and "NameError" in r.error


def test_a_hanging_candidate_gets_a_verdict_within_the_limit():
    hang = RELU.solution.replace("x = x.contiguous()", "while True:\n            pass")
    start = time.monotonic()
    r = verify(RELU, hang, VerifyConfig(timeout_s=15))
    assert time.monotonic() - start < 15 + 20  # + the trusted side's own preparation
    assert r.timed_out and not r.correct and "timed out" in r.error
    assert (
        r.limit == "timeout" and "verify.timeout_s = 15 s" in r.error and compute_reward(r) == 0.0
    )
    assert verify(RELU, RELU.solution).correct  # the caller is healthy


def test_stage_names_are_the_documented_ones():
    assert STAGES == ("extract", "static", "compile", "correctness", "performance", "done")


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "tritonrl", "verify", *args], input=stdin,
                          capture_output=True, timeout=300)  # fmt: skip


def test_cli_json_verdicts_and_exit_codes(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(RELU.solution)
    r = _cli(RELU.id, str(good), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["correct"] is True
    # A bad candidate is still a verdict: exit 0, no traceback.
    r = _cli(RELU.id, "-", "--json", stdin=b"\xff\xfe garbage \x00")
    assert r.returncode == 0 and b"Traceback" not in r.stderr
    assert json.loads(r.stdout)["stage"] == "extract"
    # Bad usage: exit 2 with a message.
    r = _cli("builtin:level1/999_Nope", str(good))
    assert r.returncode == 2 and b"no such builtin task" in r.stderr
    r = _cli(RELU.id, str(tmp_path / "missing.py"))
    assert r.returncode == 2 and b"no such file" in r.stderr
    r = _cli(RELU.id, str(good), "--device", "tpu")
    assert r.returncode == 2 and b"unknown device" in r.stderr


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_task_declaring_another_dtype_gets_an_input_set_in_it():
    task = load_source(str(FIXTURES / "1_ScaleShift_TwoDtypes.py")).tasks[0]
    solution = (FIXTURES / "scale_shift_solution.py").read_text()
    r = verify(task, solution)
    assert r.correct, r.error
    assert [o.name for o in r.input_sets][-1] == "float16"
    # A kernel that always returns float32 passes the float32 sets, not the float16 one.
    fp32 = "y = torch.empty(x.shape, dtype=torch.float32, device=x.device)"
    fp32_only = solution.replace("y = torch.empty_like(x)", fp32)
    r = verify(task, fp32_only, VerifyConfig(funnel=False))
    failed = [o.name for o in r.input_sets if not o.ok]
    assert failed == ["float16"] and "dtype" in r.error


_STAGE_ON_A_FULL_DISK = """
import json, os, subprocess, sys
d = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d], check=True)
os.environ["TMPDIR"] = d
import tempfile; tempfile.tempdir = None
from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify import verify
task = load_builtin("level2/1_Gemm_Bias_ReLU").tasks[0]
r = verify(task, task.solution, VerifyConfig(device="cpu", timeout_s=60))
print(json.dumps({"limit": r.limit, "error": r.error, "correct": r.correct}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs in a mount namespace")
def test_a_full_staging_disk_is_a_named_limit_not_a_verifier_error(tmp_path):
    # Every input set is staged on disk before the worker starts: when that disk is full
    # the verdict names the machine's limit and where to make room, so a user (or the
    # reward, which scores a limit like any refusal) never reads it as a verifier bug.
    small = tmp_path / "small"
    small.mkdir()
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c",
         _STAGE_ON_A_FULL_DISK, str(small)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["limit"] == "disk" and not r["correct"], r
    assert r["error"].startswith("limit disk: no space left") and "TMPDIR" in r["error"], r
    assert str(small) in r["error"], r


# A task whose input has no size constant to shrink: every set, tiny included, is 4 MB
# of inputs (a raw file the worker maps) and 4 MB of outputs, on the CPU too.
_FIXED_4MB = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
"""
_STAGE_ONE_AT_A_TIME = """
import json, os, subprocess, sys
d, task_file = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=18m", "tmpfs", d], check=True)
os.environ["TMPDIR"] = d
import tempfile; tempfile.tempdir = None
import tritonrl.verify.job as job
job.STAGE_AHEAD_BYTES = 0  # every set is written when it is run, as a full-size one is
from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin, load_source
from tritonrl.verify import verify
task = load_source(task_file).tasks[0]
solution = load_builtin("level1/1_ReLU").tasks[0].solution
r = verify(task, solution, VerifyConfig(device="cpu", timeout_s=120))
print(json.dumps({"limit": r.limit, "error": r.error, "correct": r.correct,
                  "sets": [o.name for o in r.input_sets if o.ok]}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs in a mount namespace")
def test_sets_written_one_at_a_time_fit_a_disk_that_all_of_them_do_not(tmp_path):
    # Five sets of 4 MB in and 4 MB out on an 18 MB disk: written all at once before the
    # worker starts they need 20 MB (refused: limit disk); written one at a time, each
    # taken and deleted by the worker before the next is written, they need the set
    # being run, its outputs, the mapped seed_a set the later ones are refilled into and
    # (under the Triton interpreter, which holds its last launch's arrays) the set before.
    small = tmp_path / "small"
    small.mkdir()
    task_file = tmp_path / "fixed_relu.py"
    task_file.write_text(_FIXED_4MB)
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c",
         _STAGE_ONE_AT_A_TIME, str(small), str(task_file)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["correct"] and r["limit"] is None, r
    assert r["sets"] == ["tiny", "seed_a", "seed_b", "shifted", "odd"], r


# An honest ReLU whose "library" wants a workspace and, when the allocation is refused,
# computes another way (in half precision), as cuDNN tries another engine when its
# workspace does not fit. The workspace is kept until the next call's is made, and is
# sized to 60% of the address space left under the worker's RLIMIT_AS: the first call
# of each model fits, the second call of one model (seed_b, refilled into seed_a's
# buffers) does not.
FALLBACK_UNDER_PRESSURE = """
import resource

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, LOW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if LOW:
        x = x.to(tl.float16).to(tl.float32)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def _room():
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    return limit - size


_WORKSPACE = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not _WORKSPACE:
            _WORKSPACE.append(int(0.6 * _room()))
        y = torch.empty_like(x)
        try:
            self.workspace = torch.empty(_WORKSPACE[0], dtype=torch.uint8)
            low = False
        except (RuntimeError, MemoryError):  # refused: the other way
            low = True
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), LOW=low, BLOCK=1024)
        return y
"""


def test_a_wrong_answer_under_memory_pressure_is_not_output_caching():
    # A real allocation refused by a real limit (RLIMIT_AS), not a mock. The seed_b
    # outputs are wrong but computed from seed_b's inputs: a plain wrong answer, never
    # `output_caching` (the old verdict of any wrong refill set; 77_conv_transposed_3D
    # got it on a busy H100 pool, where cuDNN fell back to another engine).
    config = VerifyConfig(device="cpu", static_checks=False)
    r = verify(RELU, FALLBACK_UNDER_PRESSURE, config)
    assert [(o.name, o.ok) for o in r.input_sets] == [
        ("tiny", True),
        ("seed_a", True),
        ("seed_b", False),
    ], (r.input_sets, r.error)
    assert "output_caching" not in r.flags and not r.cheated, (r.flags, r.error)
    assert "elements differ" in r.error and compute_reward(r) > 0


class _OneSet:
    """A session whose worker ran one set and wrote `out` as its outputs."""

    def __init__(self, workdir: Path, out, ooms: int = 0) -> None:
        from tritonrl.verify.session import hit_limit_error

        self.workdir, self.out, self.ooms = workdir, out, ooms
        self.limit_error = hit_limit_error

    def call(self, cmd: dict) -> dict:
        from tritonrl.verify import tensorfile

        (self.workdir / "out").mkdir(exist_ok=True)
        tensorfile.save(self.out, self.workdir / "out" / f"{cmd['set']}.pt")
        return {"ok": True, "ooms": self.ooms}

    def findings(self) -> dict:
        return {}

    def extend_deadline(self, seconds: float) -> None:  # no deadline here
        self.waited = getattr(self, "waited", 0.0) + seconds


def _seed_sets():
    from tritonrl.verify.inputs import InputSet, prepare_set

    a = prepare_set(RELU, InputSet("seed_a", "small", 1, model_seed=3), "cpu")
    spec = InputSet("seed_b", "small", 2, refill_of="seed_a", model_seed=3)
    return a, prepare_set(RELU, spec, "cpu", model_state=a.state_dict)


@pytest.mark.parametrize(
    ("out", "ooms", "pressure", "verdict"),
    [("stale", 0, 0, "output_caching"), ("stale", 3, 0, "output_caching"),
     ("half", 0, 0, "wrong"), ("half", 3, 0, "gpu_memory"), ("half", 0, 1, "gpu_memory")],
)  # fmt: skip
def test_a_refill_sets_wrong_outputs_are_caching_only_when_they_hold_the_old_answer(
    tmp_path, out, ooms, pressure, verdict
):
    # Stale outputs are output_caching whatever else happened; outputs computed anew but
    # wrong are a wrong answer, or the GPU's limit when allocations were refused in the
    # worker during the set (`ooms`) or while the reference's outputs were made here.
    from tritonrl.verify.funnel import _check_set
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.session import WorkerError

    a, b = _seed_sets()
    b.pressure = pressure
    got = a.expected.clone() if out == "stale" else b.expected.half().float()
    result = VerifyResult(task=RELU.id, device="cuda")
    session = _OneSet(tmp_path, got, ooms)
    if verdict == "gpu_memory":
        with pytest.raises(WorkerError) as e:
            _check_set(session, b, result, stale=a)
        assert e.value.limit == "gpu_memory" and "refused allocations" in str(e.value)
        assert not result.flags
        return
    ok, detail = _check_set(session, b, result, stale=a)
    assert not ok and "elements differ" in detail
    assert result.flags == (["output_caching"] if verdict == "output_caching" else [])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_on_the_gpu_a_refill_set_computed_another_way_for_want_of_memory_is_a_limit():
    # seed_b's call meets a real out-of-memory error from the CUDA caching allocator
    # (asking for a petabyte), caught, and computes in half precision: wrong, and the
    # worker counted the refused allocation, so the verdict is the GPU's limit.
    code = FALLBACK_UNDER_PRESSURE.replace(
        """        if not _WORKSPACE:
            _WORKSPACE.append(int(0.6 * _room()))
""", "        self.calls = getattr(self, 'calls', 0) + 1\n",
    ).replace(
        "torch.empty(_WORKSPACE[0], dtype=torch.uint8)",
        "torch.empty(1 << 50 if self.calls == 2 else 1024, dtype=torch.uint8, device=x.device)",
    )  # fmt: skip
    r = verify(RELU, code, VerifyConfig(static_checks=False, ref_time_cache="off"))
    assert r.limit == "gpu_memory" and "output_caching" not in r.flags, (r.flags, r.error)
    assert "refused allocations" in r.error and compute_reward(r) == 0.0


LONG_SUM_TANH = (FIXTURES / "long_sum_tanh.py").read_text()

BLOCKED_TANH = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, 2.0 * tl.sigmoid(2.0 * x) - 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        acc = torch.matmul(a[:, :64], b[:64, :])
        for k in range(64, a.shape[1], 64):
            acc = torch.addmm(acc, a[:, k : k + 64], b[k : k + 64, :])
        out = torch.empty_like(acc)
        tanh_kernel[(triton.cdiv(acc.numel(), 256),)](acc, out, acc.numel(), BLOCK=256)
        return out
"""


def _long_sum_tanh(**config) -> tuple[Task, VerifyConfig]:
    """The long sum left in torch and its verify settings (the partial policy)."""
    task = Task("long_sum_tanh", 1, "long_sum_tanh", LONG_SUM_TANH, "mem")
    return task, VerifyConfig(
        policy="partial",
        allowed_torch_ops=["matmul", "addmm"],
        static_checks=False,
        num_input_sets=3,
        **config,
    )


def test_a_float32_near_miss_gets_its_second_look_against_float64():
    # A long sum left in torch (the partial policy) taken in blocks, then tanh in a
    # Triton kernel. Where the sum cancels, its rounding passes through tanh whole and
    # misses the first look; the funnel then computes the reference in float64 and the
    # candidate passes within 4x the float32 reference's own error there. The same
    # kernel with its products rounded to bfloat16 still fails.
    task, config = _long_sum_tanh()
    r = verify(task, BLOCKED_TANH, config)
    assert r.correct, r.error
    low = BLOCKED_TANH.replace(
        "torch.addmm(acc, a[:, k : k + 64], b[k : k + 64, :])",
        "torch.addmm(acc, a[:, k : k + 64].bfloat16().float(), "
        "b[k : k + 64, :].bfloat16().float())",
    )
    assert low != BLOCKED_TANH
    wrong = verify(task, low, config)
    assert not wrong.correct and "elements differ" in wrong.error, wrong.error


def test_a_block_over_max_block_elements_fails_at_once_naming_the_key():
    # On the GPU a 1024 x 1024 tile compiles past any wall clock; the limit makes Triton
    # refuse it when the block is made (here the interpreter, at the launch).
    big = RELU.solution.replace("BLOCK = 1024", "BLOCK = 1 << 17")
    assert big != RELU.solution
    assert verify(RELU, big).correct  # Triton's own limit (1 << 20) lets it through
    r = verify(RELU, big, VerifyConfig(max_block_elements=1 << 16))
    assert not r.correct and compute_reward(r) < 1.0
    assert "numel (131072) exceeds" in r.error and "verify.max_block_elements = 65536" in r.error
    assert verify(RELU, RELU.solution, VerifyConfig(max_block_elements=1 << 16)).correct


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA: the interpreter compiles nothing")
def test_on_the_gpu_a_tile_over_the_limit_is_not_compiled_and_fails_fast():
    tile = RELU.solution.replace(
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
        "    offs = pid * BLOCK * BLOCK + tl.arange(0, BLOCK)[:, None] * BLOCK"
        " + tl.arange(0, BLOCK)[None, :]\n",
    ).replace("triton.cdiv(n, BLOCK)", "triton.cdiv(n, BLOCK * BLOCK)")
    assert tile != RELU.solution
    started = time.monotonic()
    r = verify(RELU, tile, VerifyConfig(max_block_elements=1 << 18))
    assert (r.stage, r.compiled) == ("compile", False), (r.stage, r.error)
    assert "verify.max_block_elements = 262144" in r.error
    assert time.monotonic() - started < 60


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA: the timing phase runs only there")
def test_on_the_gpu_a_float32_near_miss_is_not_a_timing_phase_cheat():
    # The timing phase checks the timed output and a call on fresh inputs with the same
    # second look as the correctness phase: the honest blocked sum that passes correctness
    # is timed, not flagged `timing_phase`.
    task, config = _long_sum_tanh(ref_time_cache="off")
    r = verify(task, BLOCKED_TANH, config)
    assert r.correct and not r.flags and r.stage == "done", (r.stage, r.error, r.flags)
    assert r.speedup is not None and r.speedup > 0


# A Triton copy, then ReLU through torch.nn.functional: allowed or not by the partial
# policy's list, the static checks and the run-time op audit each judging it.
F_RELU = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return torch.nn.functional.relu(y)
"""


def test_an_allowed_op_called_through_nn_functional_passes_both_checks_however_spelt():
    """The static checks read `nn.functional.relu` and `ReLU` in allowed_torch_ops as
    "relu"; the run-time op audit kept the prefix and the capitals, so aten::relu was a
    torch_fallback there (correct=False) for a kernel the static checks had let through."""
    for allowed in (["relu"], ["nn.functional.relu"], ["ReLU"], ["torch.nn.functional.relu"]):
        for static in (True, False):
            config = VerifyConfig(device="cpu", policy="partial", allowed_torch_ops=allowed,
                                  static_checks=static, num_input_sets=2)  # fmt: skip
            r = verify(RELU, F_RELU, config)
            assert r.correct and r.flags == [], (allowed, static, r.flags, r.error)


def test_a_disallowed_op_called_through_nn_functional_is_flagged_by_both_checks():
    for allowed in (["gelu"], ["nn.functional.gelu"]):
        config = VerifyConfig(device="cpu", policy="partial", allowed_torch_ops=allowed,
                              num_input_sets=2)  # fmt: skip
        r = verify(RELU, F_RELU, config)
        assert not r.correct and r.stage == "static" and "nn_compute_layer" in r.flags, r.flags
        # with the static checks off, the run-time audit alone catches aten::relu
        r = verify(RELU, F_RELU, dataclasses.replace(config, static_checks=False))
        assert not r.correct and r.flags == ["torch_fallback"], (allowed, r.flags, r.error)
