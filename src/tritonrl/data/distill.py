"""Optional distillation: a teacher model behind an OpenAI-compatible endpoint writes
reasoning + kernel for each task; only answers the verifier accepts become SFT examples.

    summary = distill(tasks, "http://localhost:8000/v1", "deepseek-r1", "data/distill")

For each task the teacher gets the shared prompt
(`tritonrl.data.prompts.build_messages`, with the verifier config's policy) `variations`
times (request `seed` = variation index, sampled as the config's `sampling` section
says: `chat_sampling`; the answer's length is distillation's own `max_tokens`, a
teacher's reasoning being longer than the policy's). Each answer's kernel is extracted
(`tritonrl.extract`) and verified (`tritonrl.verify.verify`); verified-correct ones
become `sft_example(task.source, code, reasoning=...)` rows, the reasoning taken from
the message's `reasoning_content` / `reasoning` field, else its `<think>` block, else
the prose before the code. Identical kernels for the same task are kept once.

On disk, under `out_dir`: `cache/<key>.json`, one teacher answer per task and variation,
`key` a hash of prompt + model + variation index, so a rerun (after a crash, a 401, a
Ctrl-C) makes no repeat call; `verdicts/<key>-<config hash>.json`, the verifier's verdict
on it, so a rerun does not verify again either; then `train.jsonl` (`{"prompt",
"completion", "task_id", "level", "variation", "model", "reward"}` a line), `tasks.jsonl`
(the tasks asked, as `prepare` writes them: what SFT's split and RL's reward load a row's
`task_id` from) and `summary.json`, all written atomically at the end. `sft` trains on
`train.jsonl` with `data.sft_source: distill` (`tritonrl.train.sft.data`).

HTTP: urllib only. Requests are spaced to at most `rate_limit_per_s` (retries
included); 429, 5xx, timeouts and dropped connections are retried `max_retries` times
with exponential backoff (`Retry-After` honoured); 401/403, other 4xx and an endpoint
that refuses the very first connection fail at once with `DistillError`.

What it does NOT do: it is never needed (the default pipeline uses KernelBook or the
builtin suite), does not send requests in parallel (one at a time, verification between
them), does not check that the teacher's licence allows distillation, and does not
split train / validation (SFT holds out `data.validation_fraction` of the tasks).
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import logging
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

from tritonrl.config import SamplingConfig, VerifyConfig
from tritonrl.data.kernelbook import progress, task_record, write_json, write_jsonl
from tritonrl.data.prompts import build_messages, policy_settings, sft_example
from tritonrl.extract import normalise_code, try_extract
from tritonrl.reward import reward_for
from tritonrl.tasks.task import Task

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
_THINK = re.compile(r"<think>(.*?)</think>", re.S | re.I)
_FENCE = re.compile(r"^\s*(```|~~~)", re.M)


def chat_url(endpoint: str) -> str:
    """`http://host:8000`, `.../v1` or the full URL -> the chat-completions URL."""
    url = endpoint.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return f"{url}/chat/completions" if url.endswith("/v1") else f"{url}/v1/chat/completions"


def chat_sampling(sampling: SamplingConfig | None) -> dict:
    """An OpenAI-compatible request's sampling fields: temperature 0 for None (greedy),
    else `sampling`'s temperature, with top_p and top_k only where they narrow the
    distribution (1 and off are the endpoints' defaults, and `top_k` is no OpenAI field:
    vLLM's and SGLang's servers take it, OpenAI's own refuses it)."""
    if sampling is None:
        return {"temperature": 0.0}
    params: dict = {"temperature": sampling.temperature}
    if sampling.top_p != 1.0:
        params["top_p"] = sampling.top_p
    if sampling.top_k:
        params["top_k"] = sampling.top_k
    return params


class DistillError(RuntimeError):
    """The teacher endpoint cannot be used: the message says which URL and why."""


class _Transient(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


@dataclasses.dataclass
class DistillSummary:
    """What `distill` asked, got and kept (also written as `summary.json`)."""

    model: str
    out_dir: str
    tasks: int = 0
    variations: int = 0
    answers: int = 0
    requests: int = 0  # HTTP requests made by this run (retries included)
    retries: int = 0
    cache_hits: int = 0
    verified: int = 0  # verifier calls made by this run (cached verdicts not counted)
    kept: int = 0
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)
    by_level: dict[str, int] = dataclasses.field(default_factory=dict)
    kept_by_task: dict[str, int] = dataclasses.field(default_factory=dict)
    files: dict[str, str] = dataclasses.field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


# --------------------------------------------------------------------------- HTTP


class RateLimiter:
    """Spaces calls to `wait` at least 1 / `per_s` seconds apart (thread-safe)."""

    def __init__(self, per_s: float | None):
        self.interval = 1.0 / per_s if per_s else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + self.interval
        if at > now:
            time.sleep(at - now)


class ChatClient:
    """Minimal OpenAI-compatible chat client: rate limit, retries, clear errors."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        rate_limit_per_s: float | None = 1.0,
    ):
        if max_retries < 0 or backoff_s < 0 or timeout_s <= 0:
            raise ValueError("max_retries and backoff_s must be >= 0 and timeout_s > 0")
        if rate_limit_per_s is not None and rate_limit_per_s <= 0:
            raise ValueError("rate_limit_per_s must be positive (or None for no limit)")
        self.url, self.model, self.api_key = chat_url(endpoint), model, api_key
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.limiter = RateLimiter(rate_limit_per_s)
        self.requests = self.retries = 0
        self._reached = False  # once the server answered, connection errors are transient

    def chat(self, messages: list[dict], **params) -> dict:
        """One completion: {"content", "reasoning", "finish_reason"}. Raises DistillError."""
        body = {"model": self.model, "messages": messages, **params}
        last: _Transient | None = None
        for attempt in range(self.max_retries + 1):
            self.limiter.wait()
            self.requests += 1
            try:
                return _message(self.url, self._once(body))
            except _Transient as e:
                last = e
                if attempt == self.max_retries:
                    break
                delay = e.retry_after if e.retry_after is not None else self.backoff_s * 2**attempt
                self.retries += 1
                log.warning("%s: %s; retry %d in %.2g s", self.url, e, attempt + 1, delay)
                time.sleep(min(delay, MAX_BACKOFF_S))
        raise DistillError(f"{self.url}: gave up after {self.max_retries + 1} attempts: {last}")

    def _once(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            self._reached = True
            raise self._http_error(e) from None
        except urllib.error.URLError as e:
            raise self._connection_error(e.reason) from None
        except TimeoutError:
            raise _Transient(f"no answer within {self.timeout_s:g} s") from None
        except (ConnectionError, http.client.HTTPException) as e:
            raise self._connection_error(e) from None
        self._reached = True
        try:
            return json.loads(raw)
        except ValueError:
            raise _Transient(f"the answer is not JSON: {raw[:120]!r}") from None

    def _http_error(self, e: urllib.error.HTTPError) -> Exception:
        detail = e.read()[:300].decode("utf-8", "replace").strip()
        if e.code == 429 or e.code >= 500:
            return _Transient(f"HTTP {e.code} {e.reason}", _retry_after(e.headers))
        if e.code in (401, 403):
            return DistillError(
                f"{self.url}: HTTP {e.code} {e.reason}: the endpoint refused the API key; "
                f"pass --api-key or set OPENAI_API_KEY ({detail})"
            )
        hint = "; is the URL the server's base (http://host:port/v1)?" if e.code == 404 else ""
        return DistillError(f"{self.url}: HTTP {e.code} {e.reason}: {detail}{hint}")

    def _connection_error(self, reason) -> Exception:
        if isinstance(reason, TimeoutError):
            return _Transient(f"no answer within {self.timeout_s:g} s")
        if not self._reached and isinstance(reason, (ConnectionRefusedError, socket.gaierror)):
            return DistillError(
                f"cannot reach {self.url}: {reason}; is the server running, and is that "
                "its address?"
            )
        return _Transient(f"connection failed: {reason}")


def _retry_after(headers) -> float | None:
    try:
        return max(0.0, float(headers.get("Retry-After")))
    except (TypeError, ValueError):
        return None


def _message(url: str, payload: dict) -> dict:
    try:
        choice = payload["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise DistillError(f"{url}: no choices[0].message in {str(payload)[:200]}") from None
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return {
        "content": message.get("content") or "",
        "reasoning": reasoning if isinstance(reasoning, str) else None,
        "finish_reason": choice.get("finish_reason"),
    }


# --------------------------------------------------------------------------- answers


def cache_key(messages: list[dict], model: str, variation: int) -> str:
    text = json.dumps(
        {"messages": messages, "model": model, "variation": variation}, sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def reasoning_of(answer: dict) -> str | None:
    """The teacher's reasoning: its reasoning field, `<think>` block(s), or the prose
    before the first code fence."""
    if answer.get("reasoning"):
        return answer["reasoning"].strip()
    content = answer.get("content") or ""
    thoughts = _THINK.findall(content)
    if thoughts:
        return "\n\n".join(t.strip() for t in thoughts)
    if "</think>" in content.lower():
        return content[: content.lower().index("</think>")].strip() or None
    fence = _FENCE.search(content)
    prose = content[: fence.start()].strip() if fence else ""
    return prose or None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable cache file %s (%s)", path, e)
        return None


def _config_hash(config) -> str:
    text = json.dumps(dataclasses.asdict(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _verdict(task: Task, code: str, config, path: Path, summary: DistillSummary) -> dict:
    cached = _read_json(path)
    if cached is not None:
        return cached
    from tritonrl.verify import verify  # lazy: the funnel loads torch

    result = verify(task, code, config)
    summary.verified += 1
    verdict = {
        "correct": bool(result.correct),
        "stage": result.stage,
        "error": result.error,
        "flags": list(result.flags),
        "reward": reward_for(result, config),
    }
    write_json(path, verdict)
    return verdict


# --------------------------------------------------------------------------- distill


def _check(tasks: list[Task], variations: int) -> None:
    if variations < 1:
        raise ValueError(f"variations must be at least 1, not {variations}")
    if not tasks:
        raise ValueError(
            "no tasks to distill; pass --tasks builtin:level1, a folder or tasks.jsonl"
        )
    if any(not isinstance(t, Task) for t in tasks):
        raise TypeError("tasks must be tritonrl.tasks.Task objects")


def distill(
    tasks: list[Task],
    endpoint: str,
    model: str,
    out_dir: str | Path,
    variations: int = 5,
    api_key: str | None = None,
    rate_limit_per_s: float | None = 1.0,
    max_retries: int = 5,
    verify_config=None,
    sampling: SamplingConfig | None = None,
    max_tokens: int = 16384,
    timeout_s: float = 600.0,
    backoff_s: float = 1.0,
) -> DistillSummary:
    """Ask the teacher for `variations` answers per task and keep the verified-correct
    ones as SFT rows in `out_dir/train.jsonl` (see the module docstring).

    Raises `DistillError` when the endpoint cannot be used; every answer received so far
    stays in `out_dir/cache`, and a rerun continues from there.
    """
    _check(tasks, variations)

    config = verify_config or VerifyConfig()
    client = ChatClient(
        endpoint, model, api_key, timeout_s, max_retries, backoff_s, rate_limit_per_s
    )
    out = Path(out_dir)
    for sub in ("cache", "verdicts"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    summary = DistillSummary(model=model, out_dir=str(out), tasks=len(tasks), variations=variations)
    params = {**chat_sampling(sampling or SamplingConfig()), "max_tokens": max_tokens}
    rows: list[dict] = []
    try:
        for task in progress(tasks, "distilling"):
            prompt_kw = policy_settings(config, task.id)
            messages = build_messages(task.source, **prompt_kw)
            seen: set[str] = set()
            for v in range(variations):
                key = cache_key(messages, model, v)
                answer = _answer(
                    client, out / "cache" / f"{key}.json", messages, v, params, summary
                )
                verdict_path = out / "verdicts" / f"{key}-{_config_hash(config)}.json"
                row = _judge(task, answer, verdict_path, config, prompt_kw, seen, summary)
                if row is not None:
                    rows.append({**row, "variation": v, "model": model})
    finally:
        summary.requests, summary.retries = client.requests, client.retries
    _finish(out, rows, tasks, summary)
    return summary


def _answer(client, path: Path, messages, variation: int, params: dict, summary) -> dict:
    answer = _read_json(path)
    if answer is not None:
        summary.cache_hits += 1
    else:
        answer = client.chat(messages, seed=variation, **params)
        answer["variation"] = variation
        write_json(path, answer)
    summary.answers += 1
    return answer


def _judge(task, answer, verdict_path, config, prompt_kw, seen, summary) -> dict | None:
    code, error = try_extract(answer.get("content") or "")
    if code is None:
        summary.drop("no_code")
        log.debug("%s: no kernel in the answer (%s)", task.id, error)
        return None
    digest = hashlib.sha256(normalise_code(code).encode()).hexdigest()
    if digest in seen:
        summary.drop("duplicate")
        return None
    seen.add(digest)
    verdict = _verdict(task, code, config, verdict_path, summary)
    if not verdict["correct"]:
        summary.drop("flagged" if verdict["flags"] else f"failed_{verdict['stage']}")
        log.debug("%s: rejected at %s: %s", task.id, verdict["stage"], verdict["error"])
        return None
    try:
        example = sft_example(task.source, code, reasoning=reasoning_of(answer), **prompt_kw)
    except ValueError as e:
        summary.drop("sft_rejected")
        log.debug("%s: %s", task.id, e)
        return None
    summary.kept += 1
    summary.kept_by_task[task.id] = summary.kept_by_task.get(task.id, 0) + 1
    return {**example, "task_id": task.id, "level": task.level, "reward": verdict["reward"]}


def _finish(out: Path, rows: list[dict], tasks: list[Task], summary: DistillSummary) -> None:
    summary.by_level = dict(sorted(Counter(str(r["level"]) for r in rows).items()))
    write_jsonl(out / "train.jsonl", rows)
    write_jsonl(out / "tasks.jsonl", [task_record(t) for t in tasks])
    summary.files = {name: str(out / f"{name}.{ext}") for name, ext in
                     (("train", "jsonl"), ("tasks", "jsonl"), ("summary", "json"))}  # fmt: skip
    write_json(out / "summary.json", dataclasses.asdict(summary))
    log.info(
        "distilled %d of %d answers (%d requests, %d cached) into %s",
        summary.kept, summary.answers, summary.requests, summary.cache_hits, out,
    )  # fmt: skip
