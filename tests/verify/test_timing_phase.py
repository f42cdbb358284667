"""The timing phase's score (`tritonrl.verify.timing_phase`): both speedups reach the
result, and the reward uses the one `verify.speedup_measure` picks (the lower by
default). The phase against a worker stand-in is in test_gate.py; on the GPU, in
test_timing.py."""

import pytest

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
