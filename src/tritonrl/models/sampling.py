"""The sampling settings every sampler of a model uses: transformers `generate` arguments.

    model.generate(**batch, **sampling_kwargs(0.7), max_new_tokens=...)

Best-of-n's rounds and the transformers eval backend both sample through
`sampling_kwargs`, so one model is sampled the same way by each trainer and backend.

What it does NOT do: it does not generate (the callers do), and sets nothing for vLLM
(whose SamplingParams defaults already sample the whole distribution).
"""

from __future__ import annotations


def sampling_kwargs(temperature: float | None) -> dict:
    """transformers `generate` arguments: greedy for None, else the model's whole
    distribution at `temperature`, as TRL's GRPO (top_k 0, top_p 1) and vLLM (its
    SamplingParams defaults) sample. Set explicitly, because otherwise generate narrows it
    with transformers' default top-k of 50 and whatever the model's generation_config.json
    says (Qwen2.5-Coder's: top_p 0.8, top_k 20, repetition_penalty 1.05), so the same
    model would be sampled differently by each trainer and eval backend."""
    if temperature is None:
        return {"do_sample": False, "repetition_penalty": 1.0}
    return {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0,
            "repetition_penalty": 1.0}  # fmt: skip
