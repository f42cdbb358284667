"""The sections of a run and its SFT stage: run (seed, checkpoints, object store), data,
model, tiny_model, lora, sft, and pipeline; `need`, the check every section's fields use.

What it does NOT do: check one section against another (`tritonrl.config.check_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEVICES = ("auto", "cpu", "cuda")
SFT_SOURCES = ("auto", "prepare", "distill", "builtin")
DECONTAMINATE_FORMS = ("program", "forward")  # tritonrl.tasks.normalize.FORMS
REPORTERS = ("tensorboard", "wandb", "none")
TINY = "tiny"  # model.name_or_path that means: the tiny model, built inside the run
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def need(ok: bool, message: str) -> None:
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
        need(self.sync_interval_s >= 0, "run.sync_interval_s must be >= 0 (0: after checkpoints)")
        if self.store is not None:
            need(bool(str(self.store).strip()), "run.store must be a URL or null")
        # The newest checkpoint is recorded in the manifest only after the trainer has
        # rotated the old ones out: with one kept, a crash there leaves none recorded.
        need(self.keep_last >= 2, "run.keep_last must be at least 2 (see config.RunConfig)")
        bad = [r for r in self.report_to if r not in REPORTERS]
        need(not bad, f"run.report_to: unknown {bad}; choose from {', '.join(REPORTERS)}")


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
        need(self.family_tasks >= 1, "data.family_tasks must be >= 1")
        need(self.sft_source in SFT_SOURCES, f"data.sft_source must be one of {SFT_SOURCES}")
        need(
            self.decontaminate_form in DECONTAMINATE_FORMS,
            f"data.decontaminate_form must be one of {', '.join(DECONTAMINATE_FORMS)}",
        )
        need(self.generated_tasks >= 0, "data.generated_tasks must be >= 0")
        need(
            0.0 <= self.validation_fraction <= 0.5,
            "data.validation_fraction must be between 0 and 0.5",
        )
        need(self.max_samples >= 1, "data.max_samples must be >= 1")


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
        need(self.vocab_size >= 512, "tiny_model.vocab_size must be >= 512")
        need(
            self.hidden_size % self.num_heads == 0
            and (self.hidden_size // self.num_heads) % 2 == 0,
            "tiny_model.hidden_size must be an even multiple of tiny_model.num_heads",
        )
        need(
            self.num_kv_heads >= 1 and self.num_heads % self.num_kv_heads == 0,
            "tiny_model.num_heads must be a multiple of tiny_model.num_kv_heads",
        )
        need(self.num_layers >= 1, "tiny_model.num_layers must be >= 1")


@dataclass
class LoraConfig:
    """PEFT LoRA for every fine-tuning stage; `enabled: false` trains all parameters."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS))

    def __post_init__(self):
        need(self.r >= 1, "lora.r must be >= 1")
        need(self.alpha >= 1, "lora.alpha must be >= 1")
        need(0.0 <= self.dropout < 1.0, "lora.dropout must be in [0, 1)")
        need(
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
        need(self.device in DEVICES, f"sft.device must be one of {DEVICES}, not {self.device!r}")
        need(self.learning_rate > 0, "sft.learning_rate must be positive")
        need(
            self.max_steps == -1 or self.max_steps >= 1,
            f"sft.max_steps must be >= 1, or -1 to train sft.epochs epochs, not {self.max_steps}",
        )
        need(self.epochs > 0 or self.max_steps > 0, "sft.epochs or sft.max_steps must be > 0")
        for name in ("per_device_batch_size", "gradient_accumulation", "save_steps"):
            need(getattr(self, name) >= 1, f"sft.{name} must be >= 1")
        for name in ("eval_steps", "logging_steps"):
            need(getattr(self, name) >= 1, f"sft.{name} must be >= 1")
        need(self.max_length >= 64, "sft.max_length must be >= 64 tokens")
        need(self.warmup_steps >= 0, "sft.warmup_steps must be >= 0")


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
        need(bool(self.prepare_source), "pipeline.prepare_source must name a source")
        need(self.eval_samples >= 1, "pipeline.eval_samples must be >= 1")
        need(
            self.pass_rate_samples == 0 or self.pass_rate_samples >= 2,
            f"pipeline.pass_rate_samples must be 0 (every training task goes to rl) or at "
            f"least 2 (one answer is greedy: solved always or never), not "
            f"{self.pass_rate_samples}",
        )
