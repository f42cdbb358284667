"""Configuration dataclasses, one per stage. Every default here is the product default
of SPEC.md; every field can be changed by the caller.

So far: the verifier. (The YAML files in configs/ and `--section.key value` overrides
are the data-and-SFT issue's work.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

POLICIES = ("strict", "partial")


@dataclass
class VerifyConfig:
    device: str = "auto"  # auto | cpu (Triton interpreter) | cuda
    # Cheating policy: strict = all computation in Triton; partial = torch allowed for
    # the ops named in allowed_torch_ops (aten names, e.g. "aten::mm" or "mm").
    policy: str = "strict"
    allowed_torch_ops: list[str] = field(default_factory=list)
    # Static (AST) cheating checks. Off only to test or ablate the run-time layer: every
    # category that can be caught at run time must be caught there too.
    static_checks: bool = True
    # Extension 1, multi-input testing.
    multi_input: bool = True
    num_input_sets: int = 5
    # Extension 2, the staged funnel: stop at the first failing stage, tiny run first.
    funnel: bool = True
    skip_timing_on_failure: bool = True
    # Extension 4, timing (CUDA only).
    timing: bool = True
    warmup: int = 10
    trials: int = 50
    # Extension 5, the strict sandbox.
    sandbox_strict: bool = True  # refuse to run when an isolation mechanism is missing
    timeout_s: float = 120.0  # wall clock for one candidate's whole worker session
    memory_mb: int = 8192
    max_procs: int = 64
    # Reward.
    reward_scheme: str = "staged"  # staged | tritonrl | kevin
    tritonrl_alpha: float = 0.1

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"verify.policy must be one of {POLICIES}, not {self.policy!r}")
        if self.allowed_torch_ops and self.policy == "strict":
            raise ValueError(
                "verify.allowed_torch_ops is set but verify.policy is 'strict': "
                "use policy 'partial' to allow torch ops"
            )
        if self.num_input_sets < 2:
            raise ValueError("verify.num_input_sets must be at least 2 (tiny + one full set)")
        if self.timeout_s <= 0:
            raise ValueError("verify.timeout_s must be positive")
