"""The timing phase's score (`tritonrl.verify.timing_phase`): both speedups reach the
result, and the reward uses the one `verify.speedup_measure` picks (the lower by
default). The phase against a worker stand-in is in test_gate.py; on the GPU, in
test_timing.py."""

from pathlib import Path

import pytest
import torch

from tritonrl.config import VerifyConfig


def _summary(median_ms: float) -> dict:
    return {"median": median_ms, "mean": median_ms, "se": median_ms * 1e-3, "n": 100}


@pytest.mark.parametrize(
    ("measure", "picked", "speedup"), [("min", "launch", 0.3), ("device", "device", 12.5),
                                       ("launch", "launch", 0.3)],
)  # fmt: skip
def test_the_reward_uses_the_lower_of_the_two_speedups_by_default(measure, picked, speedup):
    from tritonrl.reward import compute_reward
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import _set_speedups

    config = VerifyConfig(speedup_measure=measure)
    result = VerifyResult(task="t", device="cuda", compiled=True, tiny_correct=True, correct=True)
    measure = _set_speedups(
        result, config, {"device": (_summary(0.05), _summary(0.004)),
                         "launch": (_summary(0.06), _summary(0.2))},
    )  # fmt: skip
    assert set(result.speedups) == {"device", "launch"}
    assert result.speedups["device"]["speedup"] == pytest.approx(12.5)
    assert result.speedups["launch"]["speedup"] == pytest.approx(0.3)
    assert measure == picked
    assert result.speedup == pytest.approx(speedup)
    assert result.reward_speedup < 1 if picked == "launch" else result.reward_speedup > 10
    reward = compute_reward(result, "staged")
    assert reward < 0.75 if picked == "launch" else reward == pytest.approx(1.0)
    lo, hi = result.speedup_ci
    assert lo < result.speedup < hi
    assert result.to_dict()["speedups"]["launch"]["ci"] == result.speedups["launch"]["ci"]


def test_an_unknown_speedup_measure_is_refused_when_the_config_is_built():
    with pytest.raises(ValueError, match="speedup_measure"):
        VerifyConfig(speedup_measure="fastest")


class _Replies:
    """A session whose `time` replies are given: the trusted side's reading of them."""

    def __init__(self, reply: dict) -> None:
        self.reply = reply

    def call(self, cmd: dict) -> dict:
        return self.reply

    def findings(self) -> dict:
        return {}

    def extend_deadline(self, seconds: float) -> None:  # no deadline here
        self.waited = getattr(self, "waited", 0.0) + seconds


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": True, "series": {"new": {"times_ms": [0.01]}, "ref": {"times_ms": [0.02]}}},
        {"ok": True, "series": {"new": {"times_ms": [0.01]}, "ref": {"times_ms": [0.02]}},
         "launch": {"new": {"times_ms": [-1.0]}, "ref": {"times_ms": [0.02]}}},
        {"ok": True, "series": {"new": {"times_ms": []}, "ref": {"times_ms": [0.02]}},
         "launch": {"new": {"times_ms": [0.1]}, "ref": {"times_ms": [0.1]}}},
    ],
)  # fmt: skip
def test_a_timing_reply_without_both_series_of_positive_times_is_tampering(reply):
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import _measure

    result = VerifyResult(task="t", device="cuda")
    assert _measure(_Replies(reply), result, {"op": "time"}) is None
    assert result.flags == ["timer_tampering"]


def test_times_that_outrun_the_wall_clock_are_tampering():
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import _measure

    hour = [3.6e6]  # an hour of GPU time reported for a call that took milliseconds
    series = {"new": {"times_ms": hour}, "ref": {"times_ms": hour}}
    result = VerifyResult(task="t", device="cuda")
    m = _measure(_Replies({"ok": True, "series": series, "launch": series}), result, {})
    assert m is not None and result.flags == ["timer_tampering"]
    assert m["launch"][1]["median"] == 3.6e6


CUDA = VerifyConfig(device="cuda", ref_time_cache="off")


class _Worker:
    """A pooled session's worker stand-in for the timing phase: `time` replies with the
    given series (device and launch-inclusive), `time_check` writes the timed output and
    the check call's (`wrong`: outputs that do not match), `ooms` allocations refused."""

    def __init__(self, workdir, main, check, ref_ms, launch_ref_ms, wrong=False, ooms=0):
        from tritonrl.verify.session import hit_limit_error

        self.workdir, self.gpu_gate, self.limit_error = workdir, None, hit_limit_error
        self.main, self.check, self.wrong, self.ooms = main, check, wrong, ooms
        self.ref_ms, self.launch_ref_ms = ref_ms, launch_ref_ms
        self.ops: list[dict] = []

    def call(self, cmd: dict) -> dict:
        from tritonrl.verify import tensorfile

        self.ops.append(cmd)
        if cmd["op"] == "time":
            series = {"new": {"times_ms": [0.05] * 60}, "ref": {"times_ms": [self.ref_ms] * 60}}
            launch = {
                "new": {"times_ms": [0.06] * 60},
                "ref": {"times_ms": [self.launch_ref_ms] * 60},
            }
            import time

            # as long as the times it reports: this side checks them against its clock
            time.sleep(sum(sum(v["times_ms"]) for v in [*series.values(), *launch.values()]) / 1e3)
            return {"ok": True, "graphed": [], "notes": [], "series": series, "launch": launch,
                    "ooms": self.ooms}  # fmt: skip
        if cmd["op"] == "time_check":
            out = self.workdir / "out"
            out.mkdir(exist_ok=True)
            refilled = sum(c["op"] == "time_check" for c in self.ops) > 1
            timed = (self.check if refilled else self.main).expected
            check = self.check.expected
            if self.wrong:
                timed, check = timed.half().float(), check.half().float()
            tensorfile.save(timed, out / "timed.pt")
            tensorfile.save(check, out / "timing_check.pt")
        return {"ok": True}

    def findings(self) -> dict:
        return {}

    def extend_deadline(self, seconds: float) -> None:  # no deadline here
        self.waited = getattr(self, "waited", 0.0) + seconds


@pytest.fixture
def timed_sets(monkeypatch):
    import torch

    from tritonrl.tasks import load_builtin
    from tritonrl.verify import refcache
    from tritonrl.verify.inputs import InputSet, prepare_set, timing_check_set

    task = load_builtin("level1/1_ReLU").tasks[0]
    main = prepare_set(task, InputSet("seed_a", "small", 123), "cpu")
    check = prepare_set(task, timing_check_set(main.spec), "cpu", model_state=main.state_dict)
    alone = {**_summary(0.05), "rse": 1e-3, "launch": {**_summary(0.07), "rse": 1e-3}}
    monkeypatch.setattr(refcache, "reference_time", lambda *a: (alone, False))
    props = type("Props", (), {"memory_clock_rate": 2_619_000, "memory_bus_width": 5120})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return task, main, check


def test_a_reference_slowed_only_in_its_launch_is_replaced_by_its_launch_alone(
    tmp_path, timed_sets
):
    # A candidate can slow the reference's Python launch path (a wrapper around the op
    # it calls) without touching its GPU time: the launch-inclusive speedup would then be
    # inflated. It is timed again and, slowed again, its time alone with the launch
    # inside (0.07 ms) is used: 0.07 / 0.06, not 0.5 / 0.06.
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import time_phase

    task, main, check = timed_sets
    worker = _Worker(tmp_path, main, check, ref_ms=0.05, launch_ref_ms=0.5)
    result = VerifyResult(task=task.id, device="cuda", correct=True)
    time_phase(worker, task, [main], check, CUDA, result)
    assert result.timing["tries"] == 2 and not result.flags, (result.flags, result.notes)
    assert "the reference's time alone with its launch inside is used" in result.notes
    assert result.speedups["launch"]["speedup"] == pytest.approx(0.07 / 0.06)
    assert result.speedups["device"]["speedup"] == pytest.approx(1.0)


@pytest.mark.parametrize(("ooms", "verdict"), [(0, "timing_phase"), (2, "gpu_memory")])
def test_timed_outputs_wrong_for_want_of_gpu_memory_are_a_limit_not_a_flag(
    tmp_path, timed_sets, ooms, verdict
):
    # Wrong outputs after timing are the flag timing_phase (a kernel that behaves only
    # while checked), unless allocations were refused in the worker meanwhile: then a
    # library may have computed another way, and the verdict is the GPU's limit.
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.session import WorkerError
    from tritonrl.verify.timing_phase import time_phase

    task, main, check = timed_sets
    worker = _Worker(tmp_path, main, check, 0.05, 0.07, wrong=True, ooms=ooms)
    result = VerifyResult(task=task.id, device="cuda", correct=True)
    if verdict == "gpu_memory":
        with pytest.raises(WorkerError) as e:
            time_phase(worker, task, [main], check, CUDA, result)
        assert e.value.limit == "gpu_memory" and not result.flags
    else:
        time_phase(worker, task, [main], check, CUDA, result)
        assert result.flags == ["timing_phase"]
        # the error says which call's output and why, as the correctness phase's do
        assert result.error.startswith(
            "timing checks: timing_phase (output of the timed call: output 0: "
        ), result.error
        assert "elements differ" in result.error


LONG_SUM_TANH = (Path(__file__).parent / "fixtures" / "long_sum_tanh.py").read_text()


def _blocked_tanh(a, b):
    """tanh(a @ b) with the sum over K taken in blocks of 64 in float32 (a tiled
    kernel's order): an honest near miss of torch's, exact enough against float64."""
    return torch.tanh(sum(a[:, k : k + 64] @ b[k : k + 64, :] for k in range(0, a.shape[1], 64)))


def test_a_float32_near_miss_of_a_timed_output_gets_the_second_look():
    # The first look alone refuses the honest blocked sum (what the timing phase did
    # before it got the float64 reference); with it, it passes, and a wrong element
    # or lower-precision products are still refused, with the call named.
    from tritonrl.verify.timing_phase import output_wrong

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 65536, generator=g), torch.randn(65536, 64, generator=g)
    expected, honest = torch.tanh(a @ b), _blocked_tanh(a, b)
    wide = torch.tanh(a.double() @ b.double())
    assert output_wrong("timed", expected, honest, None).startswith(
        "output of the timed call: output 0: "
    )
    assert output_wrong("timed", expected, honest, lambda: wide) is None
    bf16 = _blocked_tanh(a.bfloat16().float(), b.bfloat16().float())
    why = output_wrong("timing_check", expected, bf16, lambda: wide)
    assert why is not None and why.startswith("output of the timing check call: output 0: ")
    far = honest.clone()
    far[1, 2] = -far[1, 2] + 0.5
    assert "elements differ" in output_wrong("graph_check", expected, far, lambda: wide)
    assert output_wrong("timed", expected, OSError("gone"), None) == (
        "output of the timed call: unreadable (OSError)"
    )


class _NearMissWorker(_Worker):
    """The worker stand-in whose outputs are an honest blocked sum of the inputs each
    call got (the timed buffers' set, then the fresh check set)."""

    def call(self, cmd: dict) -> dict:
        from tritonrl.verify import tensorfile

        if cmd["op"] != "time_check":
            return super().call(cmd)
        self.ops.append(cmd)
        out = self.workdir / "out"
        out.mkdir(exist_ok=True)
        refilled = sum(c["op"] == "time_check" for c in self.ops) > 1
        timed = self.check if refilled else self.main
        tensorfile.save(_blocked_tanh(*timed.inputs), out / "timed.pt")
        tensorfile.save(_blocked_tanh(*self.check.inputs), out / "timing_check.pt")
        return {"ok": True}


def test_an_honest_float32_near_miss_is_not_a_timing_phase_cheat(tmp_path, timed_sets):
    # tanh after a 65,536-long float32 sum in blocks (a tl.dot kernel's order): the
    # correctness phase accepts it against the float64 reference; so must the timing
    # phase's checks of the timed output and the call on fresh inputs. The float64
    # reference is made on the result's device: the CPU here.
    from tritonrl.tasks.task import Task
    from tritonrl.verify.inputs import InputSet, prepare_set, timing_check_set
    from tritonrl.verify.result import VerifyResult
    from tritonrl.verify.timing_phase import time_phase

    task = Task("long_sum_tanh", 1, "long_sum_tanh", LONG_SUM_TANH, "test_timing_phase.py")
    main = prepare_set(task, InputSet("seed_a", "small", 123), "cpu")
    check = prepare_set(task, timing_check_set(main.spec), "cpu", model_state=main.state_dict)
    assert _blocked_tanh(*main.inputs).sub(main.expected).abs().max() > 1e-4  # a near miss
    worker = _NearMissWorker(tmp_path, main, check, ref_ms=0.05, launch_ref_ms=0.07)
    result = VerifyResult(task=task.id, device="cpu", correct=True)
    time_phase(worker, task, [main], check, CUDA, result)
    assert not result.flags and result.error is None, (result.flags, result.error)
    assert result.correct and result.speedup == pytest.approx(1.0)
