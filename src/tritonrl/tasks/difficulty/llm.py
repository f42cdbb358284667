"""Difficulty labels from an LLM: an OpenAI-compatible chat endpoint asked for 1, 2 or 3.

`label_level_llm` posts the reference with `LLM_PROMPT` to `/v1/chat/completions`
(urllib, no extra dependency) and reads the level with `parse_level`.

What it does NOT do: no retries, no caching, no batching; every failure is a
`LabelError` saying from where and why, and the caller decides what to do with it.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request


class LabelError(RuntimeError):
    """The LLM labeller could not get a level: the message says from where and why."""


LLM_PROMPT = (
    "You label GPU kernel-writing tasks by difficulty, as KernelBench does. The task is "
    "the PyTorch reference below; a solver must write a faster kernel for Model.forward.\n"
    "1 = a single operation (one activation, reduction, matmul, conv or norm layer).\n"
    "2 = a fusion of a few operations (e.g. a linear or conv layer followed by "
    "activations, scaling, reductions).\n"
    "3 = a whole architecture (several layers, loops over layers, residual or attention "
    "blocks, e.g. an MLP, a ResNet block, a transformer block).\n"
    "Answer with the digit alone: 1, 2 or 3."
)
_MAX_SOURCE = 12000


def _chat_url(endpoint: str) -> str:
    url = endpoint.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


def parse_level(text: str) -> int:
    """The level in an answer: the whole answer, `level N`, or the first 1-3 digit."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()
    for pattern in (r"^\s*([123])\s*\.?\s*$", r"level\s*([123])\b", r"(?<!\d)([123])(?!\d)"):
        m = re.search(pattern, text, flags=re.IGNORECASE)
        if m:
            return int(m.group(1))
    raise LabelError(f"no level 1-3 in the model's answer: {text[:200]!r}")


def _post_json(url: str, body: dict, api_key: str | None, timeout: float) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise LabelError(f"{url}: HTTP {e.code} {e.reason}: {detail}") from None
    except urllib.error.URLError as e:
        raise LabelError(f"{url}: cannot reach the endpoint: {e.reason}") from None
    except TimeoutError:
        raise LabelError(f"{url}: no answer within {timeout:g} s") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise LabelError(f"{url}: the answer is not JSON: {raw[:200]!r}") from None


def label_level_llm(
    source: str, endpoint: str, model: str, api_key: str | None = None, timeout: float = 60.0
) -> int:
    """Ask an OpenAI-compatible `/v1/chat/completions` endpoint for the level (1-3).

    `endpoint` is the server's base URL (`http://host:8000`, `.../v1`, or the full
    chat-completions URL). Raises `LabelError` on network errors, timeouts, HTTP errors
    and answers without a level.
    """
    url = _chat_url(endpoint)
    body = {
        "model": model,
        "temperature": 0,
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": LLM_PROMPT},
            {"role": "user", "content": source[:_MAX_SOURCE]},
        ],
    }
    payload = _post_json(url, body, api_key, timeout)
    try:
        text = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LabelError(f"{url}: no choices[0].message.content in {str(payload)[:200]}") from None
    return parse_level(str(text))
