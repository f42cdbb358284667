"""The sampling settings every sampler of a model uses, from the config's `sampling` section.

    model.generate(**batch, **sampling_kwargs(config.sampling), max_new_tokens=...)
    SamplingParams(n=4, **vllm_sampling(config.sampling), max_tokens=...)

`sampling_kwargs` is transformers' `generate` (best-of-n's rounds, the transformers eval
backend), `vllm_sampling` vLLM's SamplingParams (the vLLM eval backend). GRPO and RLOO
hand the same section to TRL (`tritonrl.train.rl.grpo.trainer_args`), and an
OpenAI-compatible request takes it from `tritonrl.data.distill.chat_sampling` (the API
eval backend, distillation). None is greedy everywhere.

What it does NOT do: it does not generate (the callers do), and it does not choose the
token limit (`sampling.max_new_tokens`, which each caller names in its own argument).
"""

from __future__ import annotations

from tritonrl.config import SamplingConfig


def sampling_kwargs(sampling: SamplingConfig | None) -> dict:
    """transformers `generate` arguments: greedy for None, else `sampling`'s temperature,
    top_p and top_k (0: off), no repetition penalty. Set explicitly, because otherwise
    generate narrows the distribution with transformers' default top-k of 50 and
    whatever the model's generation_config.json says (Qwen2.5-Coder's: top_p 0.8, top_k
    20, repetition_penalty 1.05), so the same model would be sampled differently by each
    trainer and eval backend."""
    if sampling is None:
        return {"do_sample": False, "repetition_penalty": 1.0}
    return {"do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "repetition_penalty": 1.0}  # fmt: skip


def vllm_sampling(sampling: SamplingConfig | None) -> dict:
    """vLLM `SamplingParams` keywords: temperature 0 for None (greedy), else `sampling`'s
    temperature, top_p and top_k (vLLM: 0 is off); vLLM adds no repetition penalty."""
    if sampling is None:
        return {"temperature": 0.0}
    return {"temperature": sampling.temperature, "top_p": sampling.top_p,
            "top_k": sampling.top_k}  # fmt: skip
