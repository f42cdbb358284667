"""`VerifyResult`: the typed verdict on one candidate, and its JSON form.

The verifier never raises for a bad candidate: every failure is a result with the
`stage` it reached, a short `error` string and, for cheating or safety findings, names
in `flags`. A candidate ended by a sandbox limit has it in `limit` (one of `LIMITS`;
`timed_out` too for the wall clock), whatever stage it reached. The reward is derived
from the result by `tritonrl.reward`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# The funnel's stages in order; `stage` is the last one reached.
STAGES = ("extract", "static", "compile", "correctness", "performance", "done")

# Flags that are findings about the candidate's honesty or safety. Any of them makes the
# reward 0. Informational notes (e.g. a sandbox mechanism missing on this host) go to
# `notes`, never to `flags`.
CHEAT_FLAGS = frozenset(
    {
        "torch_compile", "hidden_code", "ctypes", "subprocess", "threading", "introspection",
        "monkeypatch", "try_except_launch", "torch_compute", "nn_compute_layer", "io",
        "reference_access", "no_triton_kernel", "timing_tamper", "side_stream",
        # run-time findings
        "torch_fallback", "no_launch", "input_mutation", "output_aliases_input",
        "output_type", "background_thread", "timer_tampering", "output_caching",
        "impossible_speed", "sandbox_violation", "forged_verdict", "timing_phase",
    }
)  # fmt: skip


# The sandbox limits that can end a candidate's run (`VerifyResult.limit`): the wall
# clock (verify.timeout_s), host memory (verify.memory_mb: the memory cgroup's OOM kill,
# or an allocation refused under RLIMIT_AS), the size of one file (RLIMIT_FSIZE), CPU
# time (RLIMIT_CPU) and the number of processes and threads (verify.max_procs). Two
# are the machine's: "gpu_memory" (also when the reference's passes find no room, or a
# wrong answer was computed while the GPU refused allocations), and "disk" when the
# input sets cannot be staged or the worker's outputs do not fit beside them.
LIMITS = ("timeout", "memory", "gpu_memory", "file_size", "cpu_time", "processes", "disk")


@dataclass
class InputSetOutcome:
    """One input set's verdict (its name says which: tiny, seed_a, shifted, odd, ...)."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class VerifyResult:
    task: str
    device: str
    stage: str = "extract"
    compiled: bool = False
    tiny_correct: bool = False
    correct: bool = False
    flags: list[str] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    limit: str | None = None  # the sandbox limit that ended the run (LIMITS), if one did
    runtime_ms: float | None = None
    ref_runtime_ms: float | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    # The speedup the reward uses: 1.0 inside the measurement noise (timing's noise rule).
    reward_speedup: float | None = None
    # A timed candidate's two measures, "device" (the launch hidden, as a CUDA graph gives)
    # and "launch" (the launch inside, as an eager call costs), each {speedup, ci,
    # median_ms, ref_median_ms}; `speedup` is the one `verify.speedup_measure` picks.
    speedups: dict[str, dict[str, Any]] = field(default_factory=dict)
    # seconds per stage; `gate_wait` (the wait for the GPU gate's shared side) lies
    # inside the stages that waited, so it is not added to them
    stage_times: dict[str, float] = field(default_factory=dict)
    input_sets: list[InputSetOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sandbox: dict[str, list[str]] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)  # trials, RSE, medians, checks

    @property
    def cheated(self) -> bool:
        return any(f in CHEAT_FLAGS for f in self.flags)

    def flag(self, name: str, detail: str | None = None) -> None:
        if name not in self.flags:
            self.flags.append(name)
        if detail:
            self.notes.append(f"{name}: {detail}")

    def add_flags(self, flags: dict[str, str] | None) -> None:
        """Record the worker's `{flag: detail}` findings (untrusted: bounded strings)."""
        if not isinstance(flags, dict):  # a forged or corrupt reply
            return
        for name, detail in flags.items():
            self.flag(str(name)[:64], str(detail)[:500])

    def add_findings(self, findings: dict[str, str]) -> None:
        """Flags from the worker's findings log that its replies did not already bring."""
        for name, detail in findings.items():
            if name not in self.flags:
                self.flag(name, f"{detail} (from the worker's findings log)")

    def fail(self, stage: str, error: str) -> VerifyResult:
        self.stage, self.error = stage, _short(error)
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["speedup_ci"] = list(self.speedup_ci) if self.speedup_ci else None
        d["stage_times"] = {k: round(v, 4) for k, v in self.stage_times.items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerifyResult:
        """The result `to_dict` wrote (e.g. received from the verifier service); keys
        this version does not know are ignored, a missing `task` or `device` is an error."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        missing = {"task", "device"} - kw.keys()
        if missing:
            raise ValueError(f"a verify result needs {sorted(missing)}; got keys {sorted(d)}")
        kw["input_sets"] = [InputSetOutcome(**o) for o in kw.get("input_sets") or []]
        if kw.get("speedup_ci") is not None:
            kw["speedup_ci"] = tuple(kw["speedup_ci"])
        return cls(**kw)


def _short(text: str, limit: int = 500) -> str:
    """Errors are short strings: the first lines of a long message, capped."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
