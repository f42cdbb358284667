"""The `verify` section: how the verifier checks, times and rewards a candidate, and the
names of torch ops the partial policy may allow (`op_key`, the one reading of them).

What it does NOT do: run the verifier (`tritonrl.verify`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

POLICIES = ("strict", "partial")
# Under the partial policy, the torch ops allowed when `verify.allowed_torch_ops` names none
# (in the names that key takes: "matmul", "F.linear", "aten::mm"). Prompts name the same
# list, so a prompt promises what the verifier allows.
PARTIAL_TORCH_OPS = ("matmul", "mm", "bmm", "addmm", "linear", "conv1d", "conv2d", "conv3d")
SPEEDUP_MEASURES = ("min", "device", "launch")
REWARD_SCHEMES = ("staged", "tritonrl", "kevin")
VERIFY_BACKENDS = ("local", "ray")
# The form of a `verify.allowed_torch_ops` name: an op, with an optional prefix the
# checks drop (`op_key`). Whether torch has the op is asked where a command starts
# (`verify.static.op_names.check_allowed_ops`: it needs torch).
OP_PREFIXES = ("torch.nn.functional.", "torch.", "nn.functional.", "F.", "aten::", "aten.")
OP_NAME = re.compile(f"({'|'.join(map(re.escape, OP_PREFIXES))})?[A-Za-z_][A-Za-z0-9_]*")
OP_NAME_HINT = "write names like 'matmul', 'conv2d', 'relu' (or 'torch.relu', 'F.relu', 'aten::mm')"


def op_key(name: str) -> str:
    """An op's name as the checks compare it, static and run-time alike: the `OP_PREFIXES`
    gone, lower case ("torch.nn.functional.ReLU" -> "relu")."""
    for prefix in OP_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.lower()


@dataclass
class VerifyConfig:
    device: str = "auto"  # auto | cpu (Triton interpreter) | cuda
    # Cheating policy: strict = all computation in Triton; partial = torch allowed for
    # the ops named in allowed_torch_ops (aten names, e.g. "aten::mm" or "mm"; none named:
    # PARTIAL_TORCH_OPS). A task family whose solutions need partial (fused) gets it where
    # this says strict, as its prompts do (`tasks.families.verify_config_for`).
    policy: str = "strict"
    allowed_torch_ops: list[str] = field(default_factory=list)
    # Static (AST) cheating checks. Off only to test or ablate the run-time layer: every
    # category that can be caught at run time must be caught there too.
    static_checks: bool = True
    # Multi-input testing.
    multi_input: bool = True
    num_input_sets: int = 5
    # The most elements (inputs, parameters and outputs together) a full-size input set
    # may hold; a task written larger (KernelBench's newer problems reach 3.7e9: 14 GiB of
    # float32 a set, each set kept on the host too) runs shrunk to it, and its sets say so.
    # 0: every task as written.
    full_max_elements: int = 1 << 28
    # The staged funnel: stop at the first failing stage, tiny run first.
    funnel: bool = True
    skip_timing_on_failure: bool = True
    tiny_run_first: bool = True  # the shrunk-shape run before the full input sets
    # Calibrated timing (CUDA only): candidate and reference interleaved in the worker,
    # trials extended past `trials` until the relative standard error of each median is
    # under `target_rse` (capped by max_trials / timing_max_seconds); the speedup is the
    # ratio of the medians (tritonrl.verify.inside.timing).
    timing: bool = True
    warmup: int = 10
    trials: int = 50
    max_trials: int = 500
    target_rse: float = 0.01
    timing_max_seconds: float = 20.0
    cuda_graphs: bool = False  # replay a captured CUDA graph per trial (launch-bound kernels)
    # CUDA_DEVICE_MAX_CONNECTIONS of every worker (0: the driver's default, 8). One
    # hardware queue per process let the H100 create 12 worker contexts a second instead
    # of 5 (they are made one at a time); a kernel that overlaps work on several streams
    # then runs them one after another, which understates a speedup that relies on it.
    cuda_max_connections: int = 1
    # The worker pool on CUDA: a timing phase has its GPU alone, no other lane's
    # correctness run beside it (tritonrl.verify.pool.gate). False: more candidates a second,
    # and timings exposed to the other lanes' work.
    exclusive_timing: bool = True
    # Which speedup the reward and fast_p use. Every timed candidate is timed two ways:
    # `device`, the GPU time of a call with the host's launch hidden behind a pre-roll
    # (what a CUDA graph would give), and `launch`, the time of a call with its launch
    # inside, the GPU idle when it begins (what an eager `model(x)` costs). `min` (the
    # default) takes the lower of the two, so a kernel whose Python launch path costs
    # more than it saves on the GPU is not rewarded as faster.
    speedup_measure: str = "min"  # min | device | launch
    # Noise rule: a speedup whose 95% interval contains 1, or within this of 1, is 1.
    noise_floor: float = 0.02
    # Reference times measured alone, cached per task/shapes/device/versions:
    # "auto" ($XDG_CACHE_HOME/tritonrl/ref_times.json), "off", or a path.
    ref_time_cache: str = "auto"
    # The strict sandbox.
    sandbox_strict: bool = True  # refuse to run when an isolation mechanism is missing
    timeout_s: float = 120.0  # wall clock for one candidate's whole worker session
    # The most elements one block (tile) of a candidate's Triton kernel may hold; a
    # larger one fails to compile at once, with this key named in its error. None:
    # Triton's own limit (1,048,576). A 1024 x 1024 float32 tile is 16 times an SM's
    # register file: its compile runs past any sensible wall clock (benchmarks.md).
    max_block_elements: int | None = None
    memory_mb: int = 8192
    max_procs: int = 64
    # The largest file a worker may write (RLIMIT_FSIZE), in MB: raised to fit the task's
    # outputs (full-size tasks on CUDA). The sandbox's own defaults are these fields.
    max_file_mb: int = 256
    # Reward.
    reward_scheme: str = "staged"  # staged | tritonrl | kevin
    tritonrl_alpha: float = 0.1
    # The worker pool (batch verification, trainer adapters): a lane's sandbox is
    # replaced after this many jobs (and after any timeout or crash).
    pool_recycle_jobs: int = 256
    # The CPU priority of the pool's lanes and the workers they fork, as nice(1) takes it
    # (0-19): higher leaves the host's cores to other work first. RL's reward pool runs
    # beside the trainer at `rl.reward_nice`.
    nice: int = 0
    # The pool's GPU-memory budget (tritonrl.verify.pool.budget): before a lane runs a job it
    # reserves the job's estimate, gpu_memory_factor x its largest input set's bytes
    # (inputs, parameters, reference outputs) plus 1 GB for the worker's CUDA context,
    # from one budget per GPU, and waits while the lanes running hold too much; a job
    # larger than the whole budget runs alone. The budget is gpu_memory_fraction of the
    # GPU's memory (the rest is for the verifying process's own reference passes and
    # other users of the GPU), or gpu_memory_budget_mb when that is set (which also
    # orders a CPU pool's jobs: for tests).
    gpu_memory_fraction: float = 0.8
    gpu_memory_budget_mb: int = 0
    gpu_memory_factor: float = 3.0
    # The verifier as a service (`tritonrl serve`): when `endpoint` is set (its URL,
    # http://host:port), the reward adapters send candidates there instead of verifying
    # them in this process; the token is read from `endpoint_token_file`, else from
    # $TRITONRL_SERVE_TOKEN. The server's own verify settings decide the verdicts.
    endpoint: str = ""
    endpoint_token_file: str = ""
    # Where candidates are verified in this process's stead (`verify --batch`, the RL
    # reward, eval): "local", this machine's worker pool; "ray", the actors of a Ray
    # cluster (tritonrl.verify.ray_backend), each owning a pool on its node: one actor per
    # GPU of the cluster (num_gpus=1), else one per node on the CPU. `ray_address` is
    # what `ray.init` takes ("auto": the cluster `ray start` runs here; None: that, else a
    # local instance); `ray_actors` how many actors (0: the default above). Needs
    # `pip install "tritonrl[ray]"`.
    backend: str = "local"
    ray_address: str | None = None
    ray_actors: int = 0

    def __post_init__(self):
        limit = self.max_block_elements
        if limit is not None and not (
            isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= 1 << 20
        ):
            raise ValueError(
                "verify.max_block_elements must be a whole number of elements from 1 to "
                f"1048576 (Triton's own limit), or null for Triton's, not {limit!r}"
            )
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"verify.endpoint must be an http:// or https:// URL (the `tritonrl serve` "
                f"address), not {self.endpoint!r}"
            )
        if self.backend not in VERIFY_BACKENDS:
            raise ValueError(
                f"verify.backend must be one of {VERIFY_BACKENDS}, not {self.backend!r}"
            )
        if self.ray_actors < 0:
            raise ValueError("verify.ray_actors must be 0 (one per GPU, else per node) or more")
        if self.backend != "ray" and (self.ray_address is not None or self.ray_actors):
            raise ValueError(
                "verify.ray_address and verify.ray_actors are set but verify.backend is "
                f"{self.backend!r}: set verify.backend to 'ray' to verify on a Ray cluster"
            )
        if self.backend == "ray" and self.endpoint:
            raise ValueError(
                "verify.backend is 'ray' and verify.endpoint is set: the reward would go to the "
                "service; give one of them (the service, or the Ray cluster)"
            )
        if self.policy not in POLICIES:
            raise ValueError(f"verify.policy must be one of {POLICIES}, not {self.policy!r}")
        if self.policy == "partial" and not self.allowed_torch_ops:
            self.allowed_torch_ops = list(PARTIAL_TORCH_OPS)
        if self.allowed_torch_ops and self.policy == "strict":
            raise ValueError(
                "verify.allowed_torch_ops is set but verify.policy is 'strict': "
                "use policy 'partial' to allow torch ops"
            )
        for op in self.allowed_torch_ops:
            if not (isinstance(op, str) and OP_NAME.fullmatch(op)):
                raise ValueError(
                    f"verify.allowed_torch_ops: {op!r} is no torch op the checker knows; "
                    f"{OP_NAME_HINT}"
                )
        if self.num_input_sets < 2:
            raise ValueError("verify.num_input_sets must be at least 2 (tiny + one full set)")
        if self.full_max_elements < 0:
            raise ValueError(
                "verify.full_max_elements must be 0 (no limit) or a positive element count"
            )
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(
                f"verify.timeout_s must be a positive, finite number of seconds, not "
                f"{self.timeout_s!r}"
            )
        if self.max_file_mb <= 0:
            raise ValueError("verify.max_file_mb must be positive")
        if not 1 <= self.trials <= self.max_trials:
            raise ValueError(
                f"verify.trials ({self.trials}) must be at least 1 and at most "
                f"verify.max_trials ({self.max_trials})"
            )
        if self.warmup < 0 or self.target_rse <= 0 or self.timing_max_seconds <= 0:
            raise ValueError(
                "verify.warmup must be >= 0; verify.target_rse and "
                "verify.timing_max_seconds must be positive"
            )
        if self.reward_scheme not in REWARD_SCHEMES:
            raise ValueError(
                f"verify.reward_scheme must be one of {REWARD_SCHEMES}, not {self.reward_scheme!r}"
            )
        if self.speedup_measure not in SPEEDUP_MEASURES:
            raise ValueError(
                f"verify.speedup_measure must be one of {SPEEDUP_MEASURES}, "
                f"not {self.speedup_measure!r}"
            )
        if not 0 <= self.noise_floor < 1:
            raise ValueError("verify.noise_floor must be in [0, 1)")
        if self.pool_recycle_jobs < 1:
            raise ValueError("verify.pool_recycle_jobs must be at least 1")
        if not (isinstance(self.nice, int) and 0 <= self.nice <= 19):
            raise ValueError(
                f"verify.nice must be a whole number from 0 (the default priority) to 19 "
                f"(the lowest), not {self.nice!r}"
            )
        if not 0 < self.gpu_memory_fraction <= 1 or self.gpu_memory_budget_mb < 0:
            raise ValueError(
                "verify.gpu_memory_fraction must be in (0, 1] and verify.gpu_memory_budget_mb"
                " at least 0 (0: the fraction of the GPU's memory)"
            )
        if self.gpu_memory_factor <= 0:
            raise ValueError("verify.gpu_memory_factor must be positive")
        if not 0 <= self.cuda_max_connections <= 32:
            raise ValueError(
                "verify.cuda_max_connections must be in [0, 32] (0: the CUDA driver's default)"
            )
