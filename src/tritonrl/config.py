"""Configuration dataclasses, one per stage. Every default here is the product default
of SPEC.md; every field can be changed by the caller.

Sections: run, data, model, tiny_model, lora, sft, sampling, rl, best_of_n, curriculum,
pipeline, verify. `load_config` (`tritonrl.config_loader`) fills them from a YAML file in configs/
(the embedded default is configs/tiny-cpu.yaml) plus `--section.key value` overrides,
converts each value by its field's type, and rejects unknown names and option
combinations that cannot work (`check_config`) before anything runs. The resolved config
is what a run's manifest records.

Each extension (docs/hacks.md, extensions) can be switched off for an ablation:
multi-input testing (verify.multi_input, verify.num_input_sets), the staged funnel
(verify.funnel, verify.skip_timing_on_failure, verify.tiny_run_first), calibrated timing
(verify.timing, verify.warmup, verify.trials; CUDA events are the only timer) and the
strict sandbox (verify.sandbox_strict).

Every field here is read by a command; a key removed because nothing reads it
(`data.kernelbook`) is refused with the reason (`config_loader.REMOVED`), and one that
moved (`rl.temperature`, now `sampling.temperature`) with its new name
(`config_loader.MOVED`).

What it does NOT do: it does not start stages or touch a run directory.
"""

from __future__ import annotations

import dataclasses
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
# rl.timing_<name> -> the verify field it stands in for in the reward (Config.rl_verify)
TIMING_KEYS = {"trials": "trials", "max_trials": "max_trials", "target_rse": "target_rse",
               "max_seconds": "timing_max_seconds"}  # fmt: skip


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


# --------------------------------------------------------------------------- stages

DEVICES = ("auto", "cpu", "cuda")
SFT_SOURCES = ("auto", "prepare", "distill", "builtin")
DECONTAMINATE_FORMS = ("program", "forward")  # tritonrl.tasks.normalize.FORMS
REPORTERS = ("tensorboard", "wandb", "none")
TINY = "tiny"  # model.name_or_path that means: the tiny model, built inside the run
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


# `run` keys that say where a run is kept and watched, not what it trains: a stage may
# go on under other values (a resume on another machine, a store added later).
STORE_KEYS = ("store", "sync_interval_s", "spot_watch")
# Sections an RL attempt may set differently from the run's recorded (SFT) config (its
# rl stage records them: `tritonrl.train.rl`) ...
RL_SECTIONS = ("sampling", "rl", "best_of_n", "curriculum", "pipeline", "verify")
# ... and keys of other sections that do not change what SFT trained.
# Decontamination only takes prompts away: RL may add a benchmark SFT did not know of.
RL_FREE_KEYS = {
    "run": ("report_to", "seed", *STORE_KEYS),
    "data": ("decontaminate_against", "decontaminate_form"),
}


@dataclass
class RunConfig:
    seed: int = 0
    keep_last: int = 3  # checkpoints kept per stage (SPEC 6: last K kept)
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # + wandb | none
    # Object store (fsspec URL: s3://bucket/prefix, gs://..., file:///path, or a local path)
    # that the run is synced to, as STORE/<run directory name>; None keeps it local only.
    store: str | None = None
    # Background sync period; 0 syncs after every checkpoint only (and at each stage's end).
    sync_interval_s: float = 600.0
    # Poll the AWS spot notice (IMDSv2) while training; off by itself where none answers.
    spot_watch: bool = True

    def __post_init__(self):
        _need(self.sync_interval_s >= 0, "run.sync_interval_s must be >= 0 (0: after checkpoints)")
        if self.store is not None:
            _need(bool(str(self.store).strip()), "run.store must be a URL or null")
        # The newest checkpoint is recorded in the manifest only after the trainer has
        # rotated the old ones out: with one kept, a crash there leaves none recorded.
        _need(self.keep_last >= 2, "run.keep_last must be at least 2 (see config.RunConfig)")
        bad = [r for r in self.report_to if r not in REPORTERS]
        _need(not bad, f"run.report_to: unknown {bad}; choose from {', '.join(REPORTERS)}")


@dataclass
class DataConfig:
    # Where SFT examples come from: the `prepare` stage's files (KernelBook), the
    # `distill` stage's verified teacher answers, or the builtin suite + generator; auto
    # takes prepare's when the manifest records them, else distill's, else builtin.
    sft_source: str = "auto"
    tasks: list[str] = field(default_factory=lambda: ["builtin:all"])
    generated_tasks: int = 200  # generator tasks added to the builtin ones
    generator_seed: int = 0
    # Share held out for validation: by `prepare` (its files), and by SFT from the rows
    # it splits by task (distilled, or builtin + generator).
    validation_fraction: float = 0.1
    include_example: bool = True  # the one-shot example in every prompt
    max_samples: int = 1000  # `prepare`: most examples kept
    # `prepare --source families`: training-split tasks drawn from each task family
    # (tritonrl.tasks.families), and which families ([]: all of them).
    family_tasks: int = 100
    families: list[str] = field(default_factory=list)
    # Training tasks whose reference equals one of these tasks' (task specs: a
    # KernelBench checkout, builtin:heldout, a file, gen:N:SEED, fam:N:SEED:heldout) are
    # dropped from prepare's files (every source, the families too), SFT's examples and
    # RL's prompts; `tritonrl.tasks.decontaminate`.
    decontaminate_against: list[str] = field(default_factory=lambda: ["builtin:heldout"])
    # The weakest equality that counts: program (the whole program, names and sizes
    # aside) or forward (also the same op sequence in forward); tritonrl.tasks.normalize.
    # Tasks equal in it also stay on one side of prepare's and SFT's validation split.
    decontaminate_form: str = "forward"

    def __post_init__(self):
        _need(self.family_tasks >= 1, "data.family_tasks must be >= 1")
        _need(self.sft_source in SFT_SOURCES, f"data.sft_source must be one of {SFT_SOURCES}")
        _need(
            self.decontaminate_form in DECONTAMINATE_FORMS,
            f"data.decontaminate_form must be one of {', '.join(DECONTAMINATE_FORMS)}",
        )
        _need(self.generated_tasks >= 0, "data.generated_tasks must be >= 0")
        _need(
            0.0 <= self.validation_fraction <= 0.5,
            "data.validation_fraction must be between 0 and 0.5",
        )
        _need(self.max_samples >= 1, "data.max_samples must be >= 1")


@dataclass
class ModelConfig:
    name_or_path: str = "Qwen/Qwen2.5-Coder-7B-Instruct"  # hub id, local dir, or "tiny"
    revision: str | None = None
    trust_remote_code: bool = False


@dataclass
class TinyModelConfig:
    """The from-scratch Qwen2-architecture model (about 4M parameters by default)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 688
    max_position_embeddings: int = 4096
    generated_tasks: int = 300  # generator tasks in the tokenizer's training text
    seed: int = 0

    def __post_init__(self):
        _need(self.vocab_size >= 512, "tiny_model.vocab_size must be >= 512")
        _need(
            self.hidden_size % self.num_heads == 0
            and (self.hidden_size // self.num_heads) % 2 == 0,
            "tiny_model.hidden_size must be an even multiple of tiny_model.num_heads",
        )
        _need(
            self.num_kv_heads >= 1 and self.num_heads % self.num_kv_heads == 0,
            "tiny_model.num_heads must be a multiple of tiny_model.num_kv_heads",
        )
        _need(self.num_layers >= 1, "tiny_model.num_layers must be >= 1")


@dataclass
class LoraConfig:
    """PEFT LoRA for every fine-tuning stage; `enabled: false` trains all parameters."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS))

    def __post_init__(self):
        _need(self.r >= 1, "lora.r must be >= 1")
        _need(self.alpha >= 1, "lora.alpha must be >= 1")
        _need(0.0 <= self.dropout < 1.0, "lora.dropout must be in [0, 1)")
        _need(
            bool(self.target_modules) or not self.enabled,
            "lora.target_modules is empty with lora.enabled true",
        )


@dataclass
class SftConfig:
    device: str = "auto"  # auto | cpu | cuda
    learning_rate: float = 1e-5
    epochs: float = 1.0
    max_steps: int = -1  # >= 1 overrides epochs; -1: train `epochs`
    per_device_batch_size: int = 2
    gradient_accumulation: int = 4
    max_length: int = 8192
    bf16: bool = True
    # float32 matrix products on TF32 tensor cores (CUDA, Ampere and newer; float32
    # accumulation, 10-bit inputs): several times faster where bf16 is off
    tf32: bool = True
    load_in_8bit: bool = False  # bitsandbytes, CUDA only, LoRA only
    gradient_checkpointing: bool = True
    completion_only_loss: bool = True  # loss on the answer only, not the prompt
    lr_scheduler: str = "linear"
    warmup_steps: int = 0
    save_steps: int = 50
    eval_steps: int = 50
    logging_steps: int = 10

    def __post_init__(self):
        _need(self.device in DEVICES, f"sft.device must be one of {DEVICES}, not {self.device!r}")
        _need(self.learning_rate > 0, "sft.learning_rate must be positive")
        _need(
            self.max_steps == -1 or self.max_steps >= 1,
            f"sft.max_steps must be >= 1, or -1 to train sft.epochs epochs, not {self.max_steps}",
        )
        _need(self.epochs > 0 or self.max_steps > 0, "sft.epochs or sft.max_steps must be > 0")
        for name in ("per_device_batch_size", "gradient_accumulation", "save_steps"):
            _need(getattr(self, name) >= 1, f"sft.{name} must be >= 1")
        for name in ("eval_steps", "logging_steps"):
            _need(getattr(self, name) >= 1, f"sft.{name} must be >= 1")
        _need(self.max_length >= 64, "sft.max_length must be >= 64 tokens")
        _need(self.warmup_steps >= 0, "sft.warmup_steps must be >= 0")


@dataclass
class SamplingConfig:
    """How a model is sampled, by everything that samples one: GRPO and RLOO's generation
    (TRL's, on vLLM or transformers), best-of-n and rwsft's rounds, evaluation (every
    backend; one answer a task is greedy instead) and distillation's teacher. The
    defaults sample the model's whole distribution at `temperature` (top_p 1, top_k off),
    as TRL's GRPO does; min_p and the repetition penalty stay off everywhere, whatever a
    model's generation_config.json says (tritonrl.models.sampling)."""

    temperature: float = 0.8
    top_p: float = 1.0  # nucleus sampling: the smallest set of tokens holding this mass
    top_k: int = 0  # only the k likeliest tokens; 0 is off
    # New tokens per completion (RL, best-of-n, evaluation; `eval --max-tokens`): a
    # kernel with its plan needs about 1-2k. A teacher's answers have `distill --max-tokens`.
    max_new_tokens: int = 2048

    def __post_init__(self):
        _need(self.temperature > 0, "sampling.temperature must be positive")
        _need(
            0 < self.top_p <= 1,
            f"sampling.top_p must be in (0, 1] (1: off), not {self.top_p}",
        )
        _need(self.top_k >= 0, f"sampling.top_k must be >= 0 (0: off), not {self.top_k}")
        _need(self.max_new_tokens >= 1, "sampling.max_new_tokens must be >= 1")

    @property
    def whole_distribution(self) -> bool:
        """Whether nothing narrows the distribution (top_p 1, top_k off)."""
        return self.top_p == 1.0 and self.top_k == 0

    def describe(self) -> str:
        """`temperature 0.8`, or `temperature 0.8, top_p 0.95, top_k 20`."""
        return describe_sampling(self.temperature, self.top_p, self.top_k)


def describe_sampling(temperature: float | None, top_p: float | None = 1.0,
                      top_k: int | None = 0) -> str:  # fmt: skip
    """The sampling in words, as a model card and an evaluation name it: `greedy` for no
    temperature; top_p and top_k only where they narrow the distribution."""
    if temperature is None:
        return "greedy"
    narrowed = [f"top_p {top_p}"] if top_p not in (None, 1.0) else []
    narrowed += [f"top_k {top_k}"] if top_k else []
    return ", ".join([f"temperature {temperature}", *narrowed])


RL_ALGOS = ("grpo", "rloo", "best-of-n", "rwsft")
# TRL 1.16's GRPOConfig.loss_type values that need no other option set with them
# (luspo and vespo need sequence-level importance sampling, which we do not expose).
RL_LOSS_TYPES = ("dapo", "dr_grpo", "grpo", "bnpo", "cispo", "sapo")
VLLM_CHOICES = ("auto", "on", "off")
VLLM_MODES = ("colocate", "server")


@dataclass
class RlConfig:
    """The `rl` stage (`tritonrl rl`): starts from the run's SFT model, the verifier as
    reward (SPEC 4). Batch rule (TRL's): per_device_batch_size x gradient_accumulation
    completions are generated at a time, in whole groups of num_generations."""

    algo: str = "grpo"  # grpo | rloo (TRL's trainers) | best-of-n | rwsft (best_of_n section)
    device: str = "auto"  # auto | cpu | cuda
    max_steps: int = 200
    num_generations: int = 8  # the group size: completions per prompt
    learning_rate: float = 1e-6
    # Steps of linear warm-up (GRPO, RLOO): AdamW's first update moves every weight by
    # about the learning rate whatever its gradient, and RL starts a fresh optimizer on a
    # fine-tuned model (docs/benchmarks.md: at 1e-5 one such step broke a 0.5B model).
    warmup_steps: int = 0
    # "dapo", TRL 1.16's default: token losses summed over the whole accumulated batch
    # and divided by its number of completion tokens. "grpo" (the paper's) averages per
    # sequence first, which favours short right answers and long wrong ones; "dr_grpo"
    # divides by a constant (sampling.max_new_tokens) and so scales with it. Kernels vary
    # in length a lot, so the length-unbiased default stays.
    loss_type: str = "dapo"
    beta: float = 0.0  # KL to the reference; 0 needs no reference model (TRL's default)
    # A scheme of tritonrl.reward.schemes (staged | tritonrl | kevin); None takes
    # verify.reward_scheme.
    reward_scheme: str | None = None
    # The reward's wall clock for one candidate (None: verify.timeout_s). A kernel that
    # hangs holds its whole step until it is killed, so RL wants less than eval's limit.
    verify_timeout_s: float | None = None
    # The reward's timing of a correct answer (None: the verify section's value). Timing
    # holds the GPU alone, one answer at a time, while the step waits; a reward weighs
    # the speedup lightly (tritonrl: 0.1 a unit), so RL can take fewer trials and a
    # looser relative-standard-error target than eval, which keeps verify's.
    timing_trials: int | None = None  # verify.trials: the minimum
    timing_max_trials: int | None = None  # verify.max_trials
    timing_target_rse: float | None = None  # verify.target_rse
    timing_max_seconds: float | None = None  # verify.timing_max_seconds
    # GRPO/RLOO: the verdicts of the last N programs the reward verified, each under its
    # task, kept for later steps (a policy whose entropy has fallen samples the same
    # programs again; tritonrl.reward.adapters); 0: every step verifies afresh
    reward_memo: int = 4096
    per_device_batch_size: int = 8
    gradient_accumulation: int = 1
    bf16: bool = True
    tf32: bool = True  # as sft.tf32
    gradient_checkpointing: bool = True  # memory for time, as TRL's GRPO default
    save_steps: int = 50  # SPEC 6: a checkpoint every 50 steps, run.keep_last kept
    logging_steps: int = 1
    # Hierarchical reward decomposition (TritonRL; GRPO only): the plan/reasoning tokens
    # (before the first code fence) take the advantage of the speedup term
    # hierarchical_speedup_weight * min(speedup, hierarchical_speedup_clip) of correct
    # kernels, the code tokens that of correctness (1 when correct), each normalized in
    # its group (tritonrl.train.rl.hierarchical).
    hierarchical: bool = False
    hierarchical_speedup_weight: float = 0.1
    hierarchical_speedup_clip: float = 2.0
    # Generation in GRPO and RLOO (TRL's use_vllm; tritonrl.train.rl.grpo): `auto` takes
    # vLLM where it is installed and RL runs on CUDA, else transformers' generate (the
    # log says which, and why); `on` takes vLLM or stops; `off` takes transformers. Both
    # sample as the `sampling` section says. `colocate` runs vLLM in the
    # trainer's process on its GPU, with `vllm_gpu_memory_utilization` of the GPU's
    # memory (the trainer keeps the rest); `vllm_enable_sleep_mode` frees that memory
    # between generations (slower: the weights are pushed again each time). `server` asks
    # a `trl vllm-serve` at vllm_server_host:vllm_server_port, started beforehand on a GPU
    # of its own (README).
    vllm: str = "auto"  # auto | on | off
    vllm_mode: str = "colocate"  # colocate | server
    vllm_gpu_memory_utilization: float = 0.3
    vllm_enable_sleep_mode: bool = False
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    # Multi-turn RL (GRPO, RLOO; `tritonrl rl --turns T`, tritonrl.train.rl.multiturn):
    # each of a prompt's num_generations conversations answers, is verified and gets the
    # feedback as its next user turn, up to `turns` answers (ended early as `eval --turns`
    # ends one). Every answer is a training sample whose return is its reward plus
    # `turn_gamma` times the next answer's return (Kevin found 0.4 best; 1.0 sums them);
    # advantages are taken inside each (prompt, turn) group. 1: single-turn RL as before.
    turns: int = 1
    turn_gamma: float = 0.4
    # Tokens a later turn's prompt plus its answer (sampling.max_new_tokens) may take: the
    # oldest earlier answers and their feedback are dropped to fit. null: sft.max_length.
    turn_max_length: int | None = None
    # GRPO/RLOO: verify each batch while the trainer updates on the one before and
    # generates the next (tritonrl.train.rl.overlap): the step waits only for what the
    # verifier has left, at the price of training each batch one optimizer step after
    # it was generated (the loss's clipped ratio corrects for it). Single-turn only.
    overlap_reward: bool = False
    # The reward verifier's lanes (GRPO, RLOO; each a worker process with a
    # CUDA context of its own). null: one per CPU core, at most 16 a GPU. Fewer leave
    # cores to the trainer, whose update runs beside the verifier's compiles with
    # rl.overlap_reward.
    reward_lanes: int | None = None
    # Only the tasks the starting policy solves sometimes (tritonrl.train.rl.data): an eval
    # folder of it on the run's training tasks (`tritonrl eval --model RUN/sft/final
    # --tasks train:RUN --samples 4 --out DIR`, its samples.jsonl); the tasks whose
    # verified-correct share there lies within [pass_rate_min, pass_rate_max] are kept
    # (groups all right or all wrong teach GRPO nothing). null: every training task.
    pass_rates: str | None = None
    pass_rate_min: float = 0.01  # the defaults keep "sometimes but not always" for up
    pass_rate_max: float = 0.99  # to 99 answers a task
    # Fresh generator tasks for RL alone (SFT never sees them; tritonrl.train.rl.data): N
    # tasks from `generator_seed` (null: past the seeds data.generated_tasks can use), none
    # equal to a training task, a task of data.decontaminate_against or one the run holds
    # out (such a draw is replaced by the next seed's, up to 10 x N more seeds). The
    # pass-rate filter keeps those its file does not name (it filters the others).
    # `fresh_source` draws them: the task generator, or the task families' training
    # split (`families`, or `families:matmul,norms` for those only; seeds from 100000
    # unless generator_seed says).
    generated_tasks: int = 0
    generator_seed: int | None = None
    fresh_source: str = "generator"

    def __post_init__(self):
        _need(
            0 <= self.pass_rate_min <= self.pass_rate_max <= 1,
            f"rl.pass_rate_min and rl.pass_rate_max must satisfy 0 <= min <= max <= 1 "
            f"(shares of correct answers), not {self.pass_rate_min} and {self.pass_rate_max}",
        )
        _need(self.algo in RL_ALGOS, f"rl.algo must be one of {RL_ALGOS}, not {self.algo!r}")
        _need(
            isinstance(self.generated_tasks, int) and self.generated_tasks >= 0,
            f"rl.generated_tasks must be >= 0 (fresh generator tasks for RL; 0: none), not "
            f"{self.generated_tasks!r}",
        )
        _need(
            self.generator_seed is None or self.generator_seed >= 0,
            f"rl.generator_seed must be >= 0 or null, not {self.generator_seed!r}",
        )
        _need(
            self.fresh_source in ("generator", "families")
            or (self.fresh_source.startswith("families:") and self.fresh_source[9:]),
            f"rl.fresh_source must be generator, families or families:NAME[,NAME...] (where "
            f"rl.generated_tasks' fresh tasks come from), not {self.fresh_source!r}",
        )
        _need(
            isinstance(self.turns, int) and self.turns >= 1,
            f"rl.turns must be 1 or more (answers per conversation), not {self.turns!r}",
        )
        _need(
            0 <= self.turn_gamma <= 1,
            f"rl.turn_gamma must be in [0, 1] (the discount of later turns' rewards), "
            f"not {self.turn_gamma}",
        )
        _need(
            self.turn_max_length is None or self.turn_max_length >= 64,
            f"rl.turn_max_length must be >= 64 tokens or null (sft.max_length), "
            f"not {self.turn_max_length}",
        )
        _need(
            self.turns == 1 or self.algo in ("grpo", "rloo"),
            f"rl.turns {self.turns} needs rl.algo grpo or rloo (TRL's trainers); "
            f"{self.algo} samples single answers: set rl.turns 1",
        )
        _need(
            not self.overlap_reward
            or (self.turns == 1 and not self.hierarchical and self.algo in ("grpo", "rloo")),
            "rl.overlap_reward verifies a single-turn GRPO or RLOO batch during the step "
            "before; multi-turn rollouts verify inside the generation and rl.hierarchical "
            "splits the rewards: set rl.overlap_reward false, or rl.turns 1, "
            "rl.hierarchical false and rl.algo grpo or rloo",
        )
        _need(
            self.reward_lanes is None or self.reward_lanes >= 1,
            f"rl.reward_lanes must be >= 1 or null (one per core), not {self.reward_lanes}",
        )
        _need(
            self.turns == 1 or not self.hierarchical,
            "rl.hierarchical splits one answer's reward and takes no rl.turns > 1: set "
            "rl.turns 1 or rl.hierarchical false",
        )
        _need(self.device in DEVICES, f"rl.device must be one of {DEVICES}, not {self.device!r}")
        _need(
            self.loss_type in RL_LOSS_TYPES,
            f"rl.loss_type must be one of {RL_LOSS_TYPES}, not {self.loss_type!r}",
        )
        _need(
            self.reward_scheme is None or self.reward_scheme in REWARD_SCHEMES,
            f"rl.reward_scheme must be one of {REWARD_SCHEMES} (or null: verify.reward_scheme), "
            f"not {self.reward_scheme!r}",
        )
        _need(
            self.verify_timeout_s is None
            or (math.isfinite(self.verify_timeout_s) and self.verify_timeout_s > 0),
            "rl.verify_timeout_s must be a positive, finite number of seconds (or null: "
            f"verify.timeout_s), not {self.verify_timeout_s!r}",
        )
        for name in TIMING_KEYS:
            value = getattr(self, f"timing_{name}")
            _need(
                value is None or (math.isfinite(value) and value > 0),
                f"rl.timing_{name} must be positive (or null: verify.{TIMING_KEYS[name]}), "
                f"not {value!r}",
            )
        _need(
            self.reward_memo >= 0,
            f"rl.reward_memo must be >= 0 (0: no memo), not {self.reward_memo!r}",
        )
        _need(self.num_generations >= 2, "rl.num_generations must be >= 2 (GRPO compares a group)")
        for name in ("max_steps", "per_device_batch_size", "gradient_accumulation", "save_steps"):
            _need(getattr(self, name) >= 1, f"rl.{name} must be >= 1")
        _need(self.logging_steps >= 1, "rl.logging_steps must be >= 1")
        _need(self.learning_rate > 0, "rl.learning_rate must be positive")
        _need(self.warmup_steps >= 0, "rl.warmup_steps must be >= 0")
        _need(self.beta >= 0, "rl.beta must be >= 0")
        _need(self.hierarchical_speedup_weight >= 0, "rl.hierarchical_speedup_weight must be >= 0")
        _need(self.hierarchical_speedup_clip > 0, "rl.hierarchical_speedup_clip must be positive")
        _need(
            self.vllm in VLLM_CHOICES, f"rl.vllm must be one of {VLLM_CHOICES}, not {self.vllm!r}"
        )
        _need(
            self.vllm_mode in VLLM_MODES,
            f"rl.vllm_mode must be one of {VLLM_MODES}, not {self.vllm_mode!r}",
        )
        _need(
            0 < self.vllm_gpu_memory_utilization <= 1,
            "rl.vllm_gpu_memory_utilization must be in (0, 1]: the share of the GPU's memory "
            "vLLM takes",
        )
        _need(bool(self.vllm_server_host), "rl.vllm_server_host must name a host")
        _need(0 < self.vllm_server_port < 65536, "rl.vllm_server_port must be in 1-65535")
        batch = self.per_device_batch_size * self.gradient_accumulation
        _need(
            batch % self.num_generations == 0,
            f"rl.per_device_batch_size x rl.gradient_accumulation ({batch}) must be a multiple "
            f"of rl.num_generations ({self.num_generations}): completions come in whole groups",
        )
        slots = self.num_generations * self.turns
        _need(
            batch % slots == 0,
            f"rl.per_device_batch_size x rl.gradient_accumulation ({batch}) must be a multiple "
            f"of rl.num_generations x rl.turns ({slots}): each prompt's conversations take a "
            "slot per turn",
        )


@dataclass
class BestOfNConfig:
    """Sampling-based RL (`rl.algo` best-of-n or rwsft, SPEC 4): each round samples
    `samples` completions per task, verifies them, and fine-tunes on what it keeps.
    best-of-n keeps the top `keep` of each task whose reward is above `min_reward`;
    rwsft (reward-weighted SFT) keeps every sample with a positive reward, its loss
    weighted by that reward."""

    samples: int = 10  # N completions per task and round
    keep: int = 3  # K best kept per task (best-of-n)
    min_reward: float = 0.3  # kept only above this (best-of-n): compiling is not enough
    learning_rate: float = 5e-6
    rounds: int = 1  # sample -> verify -> fine-tune, repeated
    tasks: int = 100  # prompts drawn per round (SPEC: 100 fusion tasks)
    level: int | None = 2  # only tasks of this level (null: any); curriculum overrides
    epochs: int = 1  # fine-tuning epochs over each round's kept set
    generation_batch_size: int = 16  # prompts generated together

    def __post_init__(self):
        for name in ("samples", "keep", "rounds", "tasks", "epochs", "generation_batch_size"):
            _need(getattr(self, name) >= 1, f"best_of_n.{name} must be >= 1")
        _need(self.keep <= self.samples, "best_of_n.keep must be <= best_of_n.samples")
        _need(self.learning_rate > 0, "best_of_n.learning_rate must be positive")
        _need(self.level in (None, 1, 2, 3, 4), "best_of_n.level must be 1-4 or null")


@dataclass
class CurriculumConfig:
    """The adaptive curriculum (extension 3; tritonrl.train.rl.curriculum): the share of
    level-2 prompts starts at `start` and grows by `step` up to `end`, one growth each
    time the rolling verified-correct rate of level-1 completions (the last `window`)
    passes `trigger` (then the window starts afresh, so each growth is earned at the new
    mix). `retire_after` > 0 sets aside a task once its last that many completions were
    all verified correct, `retire_unsolved_after` > 0 once they were all wrong. Feeds
    every RL algorithm when enabled."""

    enabled: bool = True
    start: float = 0.1  # initial share of level-2 prompts
    end: float = 0.5  # final share
    trigger: float = 0.4  # rolling level-1 verified-correct rate that grows the share
    window: int = 64  # level-1 completions in the rolling rate
    step: float = 0.1  # growth of the share each time the trigger is passed
    # a task whose last `retire_after` completions were all verified correct is drawn no
    # more (its groups would carry no signal); 0: never
    retire_after: int = 0
    # the same for a task whose last `retire_unsolved_after` completions were all wrong
    # (a large pool of fresh tasks, `rl.generated_tasks`, has many); 0: never
    retire_unsolved_after: int = 0

    def __post_init__(self):
        _need(
            0.0 <= self.start <= self.end <= 1.0,
            "curriculum.start and curriculum.end need 0 <= start <= end <= 1",
        )
        _need(0.0 < self.trigger < 1.0, "curriculum.trigger must be in (0, 1)")
        _need(self.window >= 1, "curriculum.window must be >= 1")
        _need(0.0 < self.step <= 1.0, "curriculum.step must be in (0, 1]")
        _need(
            self.retire_after >= 0,
            f"curriculum.retire_after must be >= 0 (0: never), not {self.retire_after!r}",
        )
        _need(
            self.retire_unsolved_after >= 0,
            "curriculum.retire_unsolved_after must be >= 0 (0: never), not "
            f"{self.retire_unsolved_after!r}",
        )


@dataclass
class PipelineConfig:
    """`tritonrl pipeline`: prepare -> tiny model -> SFT -> RL -> eval -> report, each
    stage skipped when the run's manifest says it is done."""

    prepare_source: str = "kernelbook"  # `prepare --source`: kernelbook | builtin | families | PATH
    rl: bool = True  # run the rl stage (rl.algo) after SFT
    eval_tasks: list[str] = field(default_factory=lambda: ["run"])  # "run": held-out tasks
    eval_samples: int = 4  # completions per task (pass@k up to this k)
    # Before rl: answers a training task of the SFT model (`eval --tasks train:RUN`, no
    # timing, RUN/pass_rates), which rl then takes as rl.pass_rates (unless that is set):
    # RL only on the tasks the SFT model solves sometimes. 0: no such stage.
    pass_rate_samples: int = 0

    def __post_init__(self):
        _need(bool(self.prepare_source), "pipeline.prepare_source must name a source")
        _need(self.eval_samples >= 1, "pipeline.eval_samples must be >= 1")
        _need(
            self.pass_rate_samples == 0 or self.pass_rate_samples >= 2,
            f"pipeline.pass_rate_samples must be 0 (every training task goes to rl) or at "
            f"least 2 (one answer is greedy: solved always or never), not "
            f"{self.pass_rate_samples}",
        )


@dataclass
class Config:
    """The whole resolved config; one attribute per YAML section."""

    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    tiny_model: TinyModelConfig = field(default_factory=TinyModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    sft: SftConfig = field(default_factory=SftConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    rl: RlConfig = field(default_factory=RlConfig)
    best_of_n: BestOfNConfig = field(default_factory=BestOfNConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)

    @property
    def uses_tiny_model(self) -> bool:
        return self.model.name_or_path == TINY

    @property
    def rl_reward_scheme(self) -> str:
        """The reward RL trains on: `rl.reward_scheme`, else (null) `verify.reward_scheme`."""
        return self.rl.reward_scheme or self.verify.reward_scheme

    @property
    def rl_verify(self) -> VerifyConfig:
        """The `verify` section with RL's own reward scheme, wall clock and timing in it,
        where `rl.reward_scheme`, `rl.verify_timeout_s` and `rl.timing_*` set them."""
        changes: dict = {}
        if self.rl.reward_scheme:
            changes["reward_scheme"] = self.rl.reward_scheme
        if self.rl.verify_timeout_s is not None:
            changes["timeout_s"] = self.rl.verify_timeout_s
        for name, key in TIMING_KEYS.items():
            if getattr(self.rl, f"timing_{name}") is not None:
                changes[key] = getattr(self.rl, f"timing_{name}")
        if changes.get("max_trials", self.verify.max_trials) < changes.get(
            "trials", self.verify.trials
        ):
            raise ValueError(
                f"config: RL's timing takes {changes.get('trials', self.verify.trials)} trials "
                f"at least but {changes.get('max_trials', self.verify.max_trials)} at most; "
                "set rl.timing_max_trials >= rl.timing_trials (or verify.max_trials)"
            )
        return dataclasses.replace(self.verify, **changes) if changes else self.verify

    @property
    def rl_prompt_budget(self) -> int:
        """Tokens a later turn's prompt may take in multi-turn RL: `rl.turn_max_length`
        (null: `sft.max_length`, the length SFT trained on) less `sampling.max_new_tokens`."""
        whole = self.rl.turn_max_length or self.sft.max_length
        budget = whole - self.sampling.max_new_tokens
        if budget < 1:
            key = "rl.turn_max_length" if self.rl.turn_max_length else "sft.max_length"
            raise ValueError(
                f"{key} ({whole}) leaves no room for a prompt beside sampling.max_new_tokens "
                f"({self.sampling.max_new_tokens}): raise rl.turn_max_length or lower "
                "sampling.max_new_tokens"
            )
        return budget


# --------------------------------------------------------------------------- clashes


def _cuda(cuda_available: bool | None) -> bool:
    if cuda_available is not None:
        return cuda_available
    import torch

    return torch.cuda.is_available()


def sft_device(config: Config, cuda_available: bool | None = None) -> str:
    """`cpu` or `cuda`: where SFT runs (sft.device, with auto resolved)."""
    if config.sft.device == "auto":
        return "cuda" if _cuda(cuda_available) else "cpu"
    return config.sft.device


def rl_device(config: Config, cuda_available: bool | None = None) -> str:
    """`cpu` or `cuda`: where RL trains (rl.device, with auto resolved)."""
    if config.rl.device == "auto":
        return "cuda" if _cuda(cuda_available) else "cpu"
    return config.rl.device


def check_config(
    config: Config, cuda_available: bool | None = None, stage: str | None = None
) -> None:
    """Reject option combinations that cannot work, naming both options.

    `stage` None checks every section (what a run records); a command's name checks only
    what that command uses: the SFT clashes (e.g. sft.device cuda on a machine without
    CUDA) stop `sft`, not `verify --config qwen7b-1gpu --verify.device cpu` on a laptop."""
    if stage in (None, "sft"):
        _check_sft(config, cuda_available)
    if stage == "rl":  # not for None: a file written for SFT alone leaves rl's GPU defaults
        _check_rl(config, cuda_available)
    if stage in (None, "rl"):
        _ = config.rl_verify  # RL's timing against verify's: raises on a clash
    if "none" in config.run.report_to and len(config.run.report_to) > 1:
        raise ValueError("run.report_to lists 'none' together with other reporters")


def _check_sft(config: Config, cuda_available: bool | None) -> None:
    sft, lora = config.sft, config.lora
    if sft.device == "cuda" and not _cuda(cuda_available):
        raise ValueError("sft.device is 'cuda' but no CUDA device is visible: use --sft.device cpu")
    device = sft_device(config, cuda_available)
    where = (
        f"sft.device is 'auto', which resolves to {device}"
        if sft.device == "auto"
        else f"sft.device is {sft.device!r}"
    )
    if sft.load_in_8bit and device != "cuda":
        raise ValueError(
            f"sft.load_in_8bit needs CUDA (bitsandbytes) but {where}: set --sft.load_in_8bit false"
        )
    if sft.load_in_8bit and not lora.enabled:
        raise ValueError(
            "sft.load_in_8bit is on but lora.enabled is false: 8-bit weights cannot be trained "
            "in full; set --lora.enabled true or --sft.load_in_8bit false"
        )
    if sft.bf16 and device != "cuda":
        raise ValueError(f"sft.bf16 is on but {where}: set --sft.bf16 false for the CPU")
    tiny = config.tiny_model
    if config.uses_tiny_model and sft.max_length > tiny.max_position_embeddings:
        raise ValueError(
            f"sft.max_length ({sft.max_length}) exceeds tiny_model.max_position_embeddings "
            f"({tiny.max_position_embeddings}): lower the one or raise the other"
        )
    data = config.data
    if data.sft_source == "builtin" and not data.tasks and data.generated_tasks == 0:
        raise ValueError(
            "data.sft_source is 'builtin' but data.tasks is empty and data.generated_tasks is "
            "0: there is nothing to train on"
        )


def _check_rl(config: Config, cuda_available: bool | None) -> None:
    rl = config.rl
    if rl.hierarchical and rl.algo != "grpo":
        raise ValueError(f"rl.hierarchical works with rl.algo grpo, not {rl.algo!r}")
    if rl.device == "cuda" and not _cuda(cuda_available):
        raise ValueError("rl.device is 'cuda' but no CUDA device is visible: use --rl.device cpu")
    device = rl_device(config, cuda_available)
    if rl.bf16 and device != "cuda":
        where = (
            "rl.device is 'auto', which resolves to cpu"
            if rl.device == "auto"
            else (f"rl.device is {rl.device!r}")
        )
        raise ValueError(f"rl.bf16 is on but {where}: set --rl.bf16 false for the CPU")
    check_vllm(config, device)


def vllm_installed() -> bool:
    """Whether `import vllm` would find it (nothing is imported)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def check_vllm(config: Config, device: str) -> None:
    """`rl.vllm on` where it cannot work: an algorithm that does not use it, the CPU, or
    no vLLM installed (`auto` falls back instead: tritonrl.train.generation)."""
    rl = config.rl
    if rl.vllm != "on":
        return
    if rl.algo not in ("grpo", "rloo"):
        raise ValueError(
            f"rl.vllm is 'on' but rl.algo is {rl.algo!r}: vLLM generates for grpo and rloo "
            "only (best-of-n and rwsft sample with transformers); set --rl.vllm auto or off"
        )
    if device != "cuda":
        where = "rl.device is 'auto', which resolves to cpu" if rl.device == "auto" else (
            f"rl.device is {rl.device!r}")  # fmt: skip
        raise ValueError(f"rl.vllm is 'on' but {where}: vLLM needs CUDA; set --rl.vllm off")
    if not vllm_installed():
        raise ValueError(
            "rl.vllm is 'on' but vLLM is not installed: pip install -e '.[vllm]' (on a CUDA "
            "machine), or set --rl.vllm auto to fall back to transformers' generate"
        )
