"""Configuration dataclasses, one per stage. Every default here is the product default
of SPEC.md; every field can be changed by the caller.

Sections: run, data, model, tiny_model, lora, sft, pipeline (`stages`), sampling, rl,
best_of_n, curriculum (`rl`) and verify (`verify`); this module holds `Config`, the whole,
and the checks of one section against another or against the machine. `load_config`
(`tritonrl.config_loader`) fills them from a YAML file in configs/ (the embedded default
is configs/tiny-cpu.yaml) plus `--section.key value` overrides, converts each value by its
field's type, and rejects unknown names and option combinations that cannot work
(`check_config`) before anything runs. The resolved config is what a run's manifest
records.

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
from dataclasses import dataclass, field

# Every section's names, importable from `tritonrl.config` as before the split.
from tritonrl.config.rl import (
    RL_ALGOS,
    RL_LOSS_TYPES,
    TIMING_KEYS,
    VLLM_CHOICES,
    VLLM_MODES,
    BestOfNConfig,
    CurriculumConfig,
    RlConfig,
    SamplingConfig,
    describe_sampling,
)
from tritonrl.config.stages import (
    DECONTAMINATE_FORMS,
    DEVICES,
    LORA_TARGETS,
    REPORTERS,
    RL_FREE_KEYS,
    RL_SECTIONS,
    SFT_SOURCES,
    STORE_KEYS,
    TINY,
    DataConfig,
    LoraConfig,
    ModelConfig,
    PipelineConfig,
    RunConfig,
    SftConfig,
    TinyModelConfig,
    need,
)
from tritonrl.config.verify import (
    OP_NAME,
    OP_NAME_HINT,
    OP_PREFIXES,
    PARTIAL_TORCH_OPS,
    POLICIES,
    REWARD_SCHEMES,
    SPEEDUP_MEASURES,
    VERIFY_BACKENDS,
    VerifyConfig,
    op_key,
)

__all__ = [
    "BestOfNConfig", "Config", "CurriculumConfig", "DataConfig", "DECONTAMINATE_FORMS",
    "DEVICES", "LORA_TARGETS", "LoraConfig", "ModelConfig", "OP_NAME", "OP_NAME_HINT",
    "OP_PREFIXES", "PARTIAL_TORCH_OPS", "PipelineConfig", "POLICIES", "REPORTERS",
    "REWARD_SCHEMES", "RL_ALGOS", "RL_FREE_KEYS", "RL_LOSS_TYPES", "RL_SECTIONS", "RlConfig",
    "RunConfig", "SamplingConfig", "SFT_SOURCES", "SftConfig", "SPEEDUP_MEASURES",
    "STORE_KEYS", "TIMING_KEYS", "TINY", "TinyModelConfig", "VERIFY_BACKENDS", "VerifyConfig",
    "VLLM_CHOICES", "VLLM_MODES", "check_config", "check_vllm", "describe_sampling", "need",
    "op_key", "rl_device", "sft_device", "vllm_installed",
]  # fmt: skip


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
        """The `verify` section with RL's own reward scheme, wall clock, timing and CPU
        priority in it, where `rl.reward_scheme`, `rl.verify_timeout_s`, `rl.timing_*` and
        `rl.reward_nice` set them."""
        changes: dict = {}
        if self.rl.reward_nice is not None:
            changes["nice"] = self.rl.reward_nice
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
    if rl.reward_process == "child" and config.verify.backend != "local":
        raise ValueError(
            f"rl.reward_process child verifies on this machine's pool, not verify.backend "
            f"{config.verify.backend!r}: set rl.reward_process trainer, or verify.backend local"
        )
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
