"""The models `tritonrl eval` asks for kernels: local (transformers, or vLLM) and API.

    model = open_model("runs/demo")                   # the run's latest model
    model = open_model("models/x")                    # a model dir, an adapter dir, a .gguf
    model = open_model("openai:gpt-4o@https://api.openai.com/v1")
    answers = model.answers(list_of_messages, n=4, config=config)   # [[str] * 4, ...]

`model_name(spec)` is the name an evaluation records and `model_identity(spec, device,
backend)` what the model is (that name, the resolved path, its files' fingerprint, the
backend; `tritonrl.evaluate.identity`), both found without loading anything.
Models: a local HF model directory; a LoRA adapter directory (adapter_config.json: its
base is loaded, a `.gguf` base too, and the adapter put on it with peft); a `.gguf` file
(`tritonrl.models.load.load_causal_lm`, dequantized); a run directory (the latest model
its manifest names: rl's when that stage is done, else sft's; an adapter goes on the
run's base as `tritonrl rl` finds it); `openai:MODEL@URL`, any OpenAI-compatible
endpoint, through `tritonrl.data.distill.ChatClient` (key from $OPENAI_API_KEY).

Sampling: one greedy answer per prompt when n is 1, else n samples as the config's
`sampling` section says (`greedy=` says otherwise: an evaluation of 3 samples that lacks
one asks n=1, sampled), its temperature, top_p and top_k on every backend, and no
repetition penalty, whatever the model's generation_config.json says
(`tritonrl.models.sampling`), as GRPO samples; at most `sampling.max_new_tokens` new
tokens (`tritonrl eval --max-tokens`). Local models see the tokenizer's chat template
(plain turns without one); API models get the messages. `generate` also says of each
answer whether it stopped at that limit (`Answer.truncated`: a local answer that ends in
neither EOS nor padding, an API or vLLM answer whose finish_reason is "length");
`answers` gives the texts alone.

vLLM: with `backend="vllm"` (or "auto" on CUDA when `import vllm` works) a full model
directory generates through `vllm.LLM` (its defaults: bf16 for a float32 checkpoint,
torch.compile and CUDA graphs, 0.9 of the GPU's memory), answers for every prompt at
once. Its test is GPU-only and skips where vLLM is not installed (no vLLM on CPU); it
runs on an H100 with vLLM 0.26.0 (bench/carry_vllm.sh takes vLLM there). Adapters and
`.gguf` files always use transformers.

A prompt is a conversation: the system and user messages, and for a later turn of a
multi-turn evaluation the earlier answers (assistant) and the verifier's feedback (user)
after them; every backend takes it as it is (the chat template, vLLM's `chat`, the
endpoint's messages).

What it does NOT do: it decides no turns (`tritonrl.evaluate.runner` does), no tool use,
no batching of API calls beyond a few in flight at once.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from tritonrl.config import TINY, Config
from tritonrl.data.distill import ChatClient, chat_sampling
from tritonrl.data.prompts import render_plain
from tritonrl.evaluate import identity
from tritonrl.models.adapters import relocate_adapters
from tritonrl.models.load import load_causal_lm, load_tokenizer
from tritonrl.models.sampling import sampling_kwargs, vllm_sampling
from tritonrl.runs import Run

log = logging.getLogger(__name__)
API_IN_FLIGHT = 8  # concurrent requests to an OpenAI-compatible endpoint
BACKENDS = ("auto", "transformers", "vllm")


class Answer(NamedTuple):
    text: str
    truncated: bool  # it stopped at the token limit, not by itself


class _Answers:
    """`answers`, the texts of `generate` (which each model defines)."""

    identity: dict  # what it is (`model_identity`): recorded with its evaluations

    def generate(self, prompts: list[list[dict]], n: int, config: Config,
                 greedy: bool | None = None) -> list[list[Answer]]:  # fmt: skip
        raise NotImplementedError

    def answers(self, prompts: list[list[dict]], n: int, config: Config,
                greedy: bool | None = None) -> list[list[str]]:  # fmt: skip
        return [[a.text for a in answers] for answers in self.generate(prompts, n, config, greedy)]


class LocalModel(_Answers):
    """A transformers model on this machine, generating a batch of prompts at once."""

    def __init__(self, model, tokenizer, name: str, identity: dict | None = None):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.identity = identity or {"name": name, "backend": "transformers"}
        # Tasks per generate call: a GPU takes many sequences at the cost of one.
        self.batch_tasks = 32 if model.device.type == "cuda" else 8
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"

    def _text(self, messages: list[dict]) -> str:
        if not self.tokenizer.chat_template:
            return render_plain(messages)
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def generate(self, prompts: list[list[dict]], n: int, config: Config,
                 greedy: bool | None = None) -> list[list[Answer]]:  # fmt: skip
        import torch

        texts = [self._text(p) for p in prompts]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        batch = batch.to(self.model.device)
        greedy = n == 1 if greedy is None else greedy
        sampling = sampling_kwargs(None if greedy else config.sampling)
        limit = config.sampling.max_new_tokens
        with torch.no_grad():
            ids = self.model.generate(**batch, **sampling, num_return_sequences=n,
                                      max_new_tokens=limit,
                                      pad_token_id=self.tokenizer.pad_token_id)  # fmt: skip
        new = ids[:, batch["input_ids"].shape[1] :]
        done = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        # A sequence that ended by itself has EOS or padding last (ended early in a batch).
        ends = {self.tokenizer.pad_token_id, self.tokenizer.eos_token_id}
        cut = [new.shape[1] >= limit and int(row[-1]) not in ends
               for row in new]  # fmt: skip
        answers = [Answer(t, c) for t, c in zip(done, cut, strict=True)]
        return [answers[i * n : (i + 1) * n] for i in range(len(prompts))]


class VllmModel(_Answers):
    """A full model directory served by vLLM in this process (CUDA only)."""

    def __init__(self, path: Path, name: str, identity: dict | None = None,
                 gpu_memory_utilization: float = 0.3):  # fmt: skip
        from vllm import LLM

        # vLLM's engine process is forked by default, and a fork after CUDA was touched in
        # this process fails ("Cannot re-initialize CUDA in forked subprocess": an eval of
        # `train:RUN` on an H100 did); spawned, it starts clean (a setting kept if given).
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        # vLLM takes this share of the GPU's memory up front (its own default, 0.9, left
        # the verifier's lanes on the same GPU too little for full-size inputs).
        llm = LLM(model=str(path), gpu_memory_utilization=gpu_memory_utilization)
        self.llm, self.name = llm, name
        # Tasks asked together: vLLM batches hundreds of answers as cheaply as a few. Each
        # answer is written as it is verified, but the next batch is asked once this one's
        # slowest answer (one run to the wall clock) is in: larger batches, fewer such waits.
        self.batch_tasks = 64
        self.identity = identity or {"name": name, "backend": "vllm"}

    def generate(self, prompts: list[list[dict]], n: int, config: Config,
                 greedy: bool | None = None) -> list[list[Answer]]:  # fmt: skip
        from vllm import SamplingParams

        greedy = n == 1 if greedy is None else greedy
        params = SamplingParams(n=n, **vllm_sampling(None if greedy else config.sampling),
                                max_tokens=config.sampling.max_new_tokens)  # fmt: skip
        outputs = self.llm.chat(prompts, params, use_tqdm=False)
        return [[Answer(c.text, c.finish_reason == "length") for c in o.outputs]
                for o in outputs]  # fmt: skip


class ApiModel(_Answers):
    """An OpenAI-compatible chat endpoint (`openai:MODEL@URL`), a few requests in flight."""

    def __init__(self, model: str, url: str):
        self.name = f"openai:{model}@{url}"
        self.identity = {"name": self.name, "path": None, "fingerprint": None, "backend": "openai"}
        self.client = ChatClient(url, model, api_key=os.environ.get("OPENAI_API_KEY"),
                                 rate_limit_per_s=None)  # fmt: skip

    def generate(self, prompts: list[list[dict]], n: int, config: Config,
                 greedy: bool | None = None) -> list[list[Answer]]:  # fmt: skip
        greedy = n == 1 if greedy is None else greedy
        params = {"max_tokens": config.sampling.max_new_tokens,
                  **chat_sampling(None if greedy else config.sampling)}  # fmt: skip
        with ThreadPoolExecutor(API_IN_FLIGHT) as pool:
            jobs = [[pool.submit(self.client.chat, p, **params) for _ in range(n)]
                    for p in prompts]  # fmt: skip
            replies = [[j.result() for j in js] for js in jobs]
        return [[Answer(r["content"] or "", r.get("finish_reason") == "length") for r in rs]
                for rs in replies]  # fmt: skip


def _api_spec(spec: str) -> tuple[str, str]:
    model, sep, url = spec[len("openai:") :].partition("@")
    if not (model and sep and url):
        raise ValueError(f"{spec!r}: write openai:MODEL@URL, e.g. openai:gpt-4o@http://h:8000/v1")
    return model, url


def _path(spec: str) -> Path:
    path = Path(spec).expanduser()
    if not path.exists():
        raise ValueError(
            f"--model {spec}: no such file or directory (a model or adapter directory, a "
            ".gguf file, a run directory, or openai:MODEL@URL)"
        )
    return path


def _run_stage(path: Path) -> str:
    """The stage whose model is the run's latest: rl when done, sft when rl never started.
    An rl stage started and not done (running, failed, interrupted) is refused: the run
    has no final RL model, and its SFT model evaluated in its place would be read as
    RL's."""
    run = Run.open(path)
    rl = run.status("rl")
    if rl not in ("done", "pending"):
        raise ValueError(
            f"run {path}: its rl stage is {rl} (step {run.stages['rl'].get('step', 0)}), so it "
            f"has no final RL model; finish it (`tritonrl rl --run {path}` resumes it), or "
            f"evaluate the SFT model by its folder: --model {path / 'sft' / 'final'}"
        )
    stage = "rl" if rl == "done" else "sft"
    if run.status(stage) != "done":
        raise ValueError(f"run {path}: neither rl nor sft is done; there is no model to evaluate")
    return stage


def model_name(spec: str) -> str:
    """The name an evaluation of `spec` records (no model is loaded)."""
    if spec.startswith("openai:"):
        model, url = _api_spec(spec)
        return f"openai:{model}@{url}"
    path = _path(spec)
    if (path / "manifest.json").is_file():
        return f"{path.name}/{_run_stage(path)}"
    return path.name


def _adapter_model(adapter: Path, base: str | Path, tokenizer_dir: Path):
    from peft import PeftModel

    model = PeftModel.from_pretrained(load_causal_lm(str(base)), str(adapter))
    return model, load_tokenizer(str(tokenizer_dir))


def _local_model(path: Path):
    """(model, tokenizer) of a model dir, a .gguf file or an adapter dir (on its base)."""
    config = path / "adapter_config.json"
    if path.is_dir() and not config.is_file() and not (path / "config.json").is_file():
        raise ValueError(
            f"--model {path}: the folder holds no config.json (a model), adapter_config.json "
            "(an adapter) or manifest.json (a run); give one of those, a .gguf file, or "
            "openai:MODEL@URL"
        )
    if not config.is_file():
        return load_causal_lm(str(path)), load_tokenizer(str(path))
    base = json.loads(config.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{config} names no base_model_name_or_path: which model is it for?")
    has_tokenizer = (path / "tokenizer_config.json").is_file()
    return _adapter_model(path, base, path if has_tokenizer else Path(base))


def _run_model(path: Path):
    """(model, tokenizer) the run's manifest names as its latest, as `tritonrl rl` loads."""
    run, stage = Run.open(path), _run_stage(path)
    tokenizer = next((run.artifact(s, "tokenizer") for s in (stage, "sft")
                      if run.has_artifact(s, "tokenizer")), None)  # fmt: skip
    if run.has_artifact(stage, "model"):
        model_dir = run.artifact(stage, "model")
        return _local_model(model_dir)[0], _tokenizer(tokenizer or model_dir)
    relocate_adapters(run)  # the adapter's base is found where the run now is
    name = run.stage("sft")["info"].get("base_model")
    if not name:
        return _local_model(run.artifact(stage, "adapter"))
    base = run.artifact("tiny_model", "model") if name == TINY else name
    return _adapter_model(run.artifact(stage, "adapter"), base, tokenizer or Path(base))


def _model_parts(path: Path) -> list[Path | str]:
    """What decides `path`'s answers, as `_local_model` and `_run_model` load it: the
    model, adapter or .gguf first, then an adapter's base and a tokenizer found apart."""
    if not (path / "manifest.json").is_file():
        config = path / "adapter_config.json"
        base = json.loads(config.read_text()).get("base_model_name_or_path") if (
            config.is_file()) else None  # fmt: skip
        return [path] + ([_base(base)] if base else [])
    run, stage = Run.open(path), _run_stage(path)
    tokenizer = [run.artifact(s, "tokenizer") for s in (stage, "sft")
                 if run.has_artifact(s, "tokenizer")][:1]  # fmt: skip
    if run.has_artifact(stage, "model"):
        return [run.artifact(stage, "model"), *tokenizer]
    adapter, name = run.artifact(stage, "adapter"), run.stage("sft")["info"].get("base_model")
    if not name:
        return _model_parts(adapter) + tokenizer
    base = run.artifact("tiny_model", "model") if name == TINY else _base(name)
    return [adapter, base, *tokenizer]


def _base(name: str) -> Path | str:
    """An adapter's base: a local path when there is one, else a name (a hub id)."""
    return Path(name) if Path(name).expanduser().exists() else name


def model_identity(spec: str, device: str = "cpu", backend: str = "auto") -> dict:
    """What `spec` is, without loading it (`tritonrl.evaluate.identity`): name, resolved
    path, its files' fingerprint, and the backend `open_model` would generate with."""
    if spec.startswith("openai:"):
        return {"name": model_name(spec), "path": None, "fingerprint": None, "backend": "openai"}
    path, name = _path(spec), model_name(spec)
    used = "vllm" if _use_vllm(backend, path, device) else "transformers"
    return identity.model_identity(name, _model_parts(path), used)


def _tokenizer(path):
    return load_tokenizer(str(path))


def _use_vllm(backend: str, path: Path, device: str) -> bool:
    if backend not in BACKENDS:
        raise ValueError(f"--backend {backend}: choose one of {', '.join(BACKENDS)}")
    plain = path.is_dir() and (path / "config.json").is_file()
    if backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ValueError("--backend vllm: vLLM is not installed (pip install vllm)")
        if not plain:
            raise ValueError(f"--backend vllm takes a full model directory, not {path}")
        return True
    return backend == "auto" and plain and device == "cuda" and bool(
        importlib.util.find_spec("vllm"))  # fmt: skip


def open_model(spec: str, device: str = "cpu", backend: str = "auto",
               gpu_memory_utilization: float = 0.3):  # fmt: skip
    """The model `spec` names (see the module docstring), generating on `device`; vLLM
    takes `gpu_memory_utilization` of the GPU's memory (`rl.vllm_gpu_memory_utilization`)."""
    if spec.startswith("openai:"):
        return ApiModel(*_api_spec(spec))
    path, name = _path(spec), model_name(spec)
    if _use_vllm(backend, path, device):
        log.info("%s: generating with vLLM", path)
        ident = model_identity(spec, device, backend)
        return VllmModel(path, name, ident, gpu_memory_utilization)
    is_run = (path / "manifest.json").is_file()
    model, tokenizer = _run_model(path) if is_run else _local_model(path)
    ident = model_identity(spec, device, backend)  # after loading: the adapter is relocated
    return LocalModel(model.to(device).eval(), tokenizer, name, ident)
