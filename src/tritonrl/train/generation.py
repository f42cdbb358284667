"""Which generator GRPO and RLOO sample with: vLLM (TRL's `use_vllm`) or transformers.

    choice = choose(config, device)           # before any model is loaded
    choice = check_model(choice, config, model.name_or_path)   # what vLLM would load
    log.info(choice.line)                     # "generating with vLLM (colocate): ..."

`rl.vllm` (tritonrl.config.RlConfig): `auto` takes vLLM where it is installed and RL
runs on CUDA, and transformers' generate otherwise, saying which and why in one log
line; `on` takes vLLM or stops with an error naming the key, before any model is
loaded where vLLM is missing or RL runs on the CPU (`tritonrl.config.check_vllm`, which
`tritonrl rl` also runs when it checks its config); `off` takes transformers. Colocate
mode hands vLLM the policy's `name_or_path` (TRL's `LLM(model=...)`) and pushes the
trained weights into it before each generation (an SFT adapter merged first): that must
be a model directory vLLM can read (config.json beside the weights) or a hub id, not a
`.gguf` (`check_model`, once the policy is loaded; `auto` then falls back).

Both generators sample as the `sampling` section says (its temperature, top_p and top_k;
min_p none, no repetition penalty: `grpo.trainer_args` sets each) with at most
`sampling.max_new_tokens` new tokens. vLLM runs its own kernels in its own precision
(bf16 for a float32 checkpoint), so the policy's log-probabilities of the sampled tokens
differ slightly from vLLM's; TRL corrects the GRPO loss for that by importance sampling
(`vllm_importance_sampling_correction`, its default, kept).

Server mode (`rl.vllm_mode server`): `trl vllm-serve --model MODEL` runs beforehand, on
a GPU of its own that this process does not see (CUDA_VISIBLE_DEVICES), with MODEL the
policy's starting point (RUN/sft/final, or the base model under an SFT adapter); TRL
pushes the trained weights to it over NCCL before each generation.

What it does NOT do: start a vLLM server; check that the server's model is the policy's;
use vLLM for best-of-n and rwsft (they sample with transformers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from tritonrl.config import Config, check_vllm, vllm_installed

log = logging.getLogger(__name__)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1", "::")


@dataclass(frozen=True)
class Generator:
    vllm: bool  # TRL's use_vllm
    mode: str | None  # colocate | server (vLLM), None (transformers)
    reason: str

    @property
    def name(self) -> str:
        return f"vLLM ({self.mode})" if self.vllm else "transformers' generate"

    @property
    def line(self) -> str:
        """The one log line that says how completions are generated, and why."""
        return f"generating with {self.name}: {self.reason}"

    def info(self) -> dict:
        """What the stage's info records."""
        return {"backend": "vllm" if self.vllm else "transformers", "mode": self.mode,
                "reason": self.reason}  # fmt: skip


def choose(config: Config, device: str) -> Generator:
    """The generator `rl.vllm` asks for on `device`; a ValueError naming the key for
    `on` where vLLM cannot run (`check_vllm`: not installed, not CUDA, best-of-n)."""
    rl = config.rl
    vllm = Generator(True, rl.vllm_mode, "")
    if rl.vllm == "off":
        return Generator(False, None, "rl.vllm is off")
    if rl.vllm == "on":
        check_vllm(config, device)
        return replace(vllm, reason="rl.vllm is on")
    if device != "cuda":
        return Generator(False, None, f"rl.vllm is auto and RL runs on {device} (vLLM needs CUDA)")
    if not vllm_installed():
        why = "rl.vllm is auto and vLLM is not installed (pip install -e '.[vllm]')"
        return Generator(False, None, why)
    return replace(vllm, reason="rl.vllm is auto, vLLM is installed and RL runs on CUDA")


def model_problem(name_or_path: str) -> str | None:
    """Why vLLM (colocate) could not load the model TRL would hand it, or None."""
    path = Path(name_or_path).expanduser()
    if not path.exists():
        return None if not str(name_or_path).endswith(".gguf") else (
            f"{name_or_path} is a .gguf file")  # fmt: skip
    if path.is_dir() and (path / "config.json").is_file():
        return None
    return (f"its model {name_or_path} is not a model directory (a .gguf, or no config.json); "
            "convert it first: tritonrl convert-gguf FILE --out DIR")  # fmt: skip


def check_model(choice: Generator, config: Config, name_or_path: str) -> Generator:
    """`choice`, or transformers when colocated vLLM could not load the policy's model
    (`auto`); a ValueError naming the key for `on`. Server mode loads its own model."""
    if not choice.vllm or choice.mode != "colocate":
        return choice
    problem = model_problem(str(name_or_path))
    if problem is None:
        return choice
    if config.rl.vllm == "on":
        raise ValueError(f"rl.vllm is 'on' but vLLM cannot load the policy: {problem}")
    return Generator(False, None, f"rl.vllm is auto but vLLM cannot load the policy: {problem}")


def warn_shared_server(config: Config, gpus: int) -> None:
    """A warning when a vLLM server on this machine may share a GPU this process uses:
    the verifier's lanes use every GPU the process sees, and the trainer's hold on the
    GPU gate covers its own GPU only (README, "Reinforcement learning")."""
    rl = config.rl
    if rl.vllm_mode != "server" or rl.vllm_server_host not in LOCAL_HOSTS or gpus < 2:
        return
    log.warning(
        "rl.vllm_mode is server at %s:%d on this machine, and this process sees %d GPUs: "
        "start the server on a GPU this process does not see (CUDA_VISIBLE_DEVICES=1 trl "
        "vllm-serve --model MODEL; CUDA_VISIBLE_DEVICES=0 tritonrl rl ...), or the verifier "
        "may run and time kernels on the server's GPU",
        rl.vllm_server_host,
        rl.vllm_server_port,
        gpus,
    )
