"""Tests for `tritonrl.data.distill` against a loopback OpenAI-compatible server written
here (http.server in a thread): only verified-correct answers are kept, the on-disk cache
makes a rerun send nothing, retries and the rate limit work, and errors are clear."""

from __future__ import annotations

import json
import socket
import time
from itertools import pairwise

import pytest
import typer
from typer.testing import CliRunner

from chat_server import GARBAGE, answer
from cli_process import tritonrl
from tritonrl.config import SamplingConfig
from tritonrl.data.commands import register
from tritonrl.data.distill import (
    ChatClient,
    DistillError,
    chat_sampling,
    chat_url,
    distill,
    reasoning_of,
)
from tritonrl.data.kernelbook import load_prepared_tasks
from tritonrl.data.prompts import build_messages
from tritonrl.extract import extract_code, normalise_code
from tritonrl.runs import Run
from tritonrl.tasks import load_builtin
from tritonrl.verify import VerifyConfig

RELU = load_builtin("level1/1_ReLU").tasks[0]
SIGMOID = load_builtin("level1/2_Sigmoid").tasks[0]
WRONG_RELU = RELU.solution.replace("tl.maximum(x, 0.0)", "x")
CPU = VerifyConfig(device="cpu", timing=False)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# --------------------------------------------------------------------------- the whole loop


def test_only_verified_correct_answers_are_kept_and_a_rerun_sends_nothing(chat_server, tmp_path):
    other_sigmoid = SIGMOID.solution.replace("class ModelNew", "# variation 2\nclass ModelNew")
    server = chat_server(
        {
            (RELU.source, 0): [(200, answer(RELU.solution))],
            (RELU.source, 1): [(200, answer(WRONG_RELU))],
            (RELU.source, 2): [(200, GARBAGE)],
            (SIGMOID.source, 0): [(429, "slow down"), (200, answer(SIGMOID.solution))],
            (SIGMOID.source, 1): [(500, "oops"), (200, answer(other_sigmoid, "Use exp."))],
        }
    )
    out = tmp_path / "distill"
    kw = dict(variations=3, verify_config=CPU, backoff_s=0.01, rate_limit_per_s=None)
    summary = distill([RELU, SIGMOID], server.url, "teacher", out, **kw)

    # 6 answers (3 + 3, Sigmoid's third is garbage by default) after 8 requests.
    assert (summary.answers, summary.requests, summary.retries) == (6, 8, 2)
    assert len(server.requests) == 8 and summary.cache_hits == 0
    assert summary.kept == 3 and summary.kept_by_task == {RELU.id: 1, SIGMOID.id: 2}
    assert summary.dropped == {"no_code": 2, "failed_correctness": 1}
    assert summary.verified == 4 and summary.by_level == {"1": 3}
    rows = read_jsonl(out / "train.jsonl")
    assert [(r["task_id"], r["variation"]) for r in rows] == [
        (RELU.id, 0),
        (SIGMOID.id, 0),
        (SIGMOID.id, 1),
    ]
    for r, code in zip(rows, (RELU.solution, SIGMOID.solution, other_sigmoid), strict=True):
        content = r["completion"][0]["content"]
        assert extract_code(content) == normalise_code(code)
        assert content.startswith("<think>\n") and r["model"] == "teacher" and r["reward"] > 0
        assert r["prompt"] == build_messages(
            RELU.source if r["task_id"] == RELU.id else SIGMOID.source
        )
    assert "Use exp." in rows[2]["completion"][0]["content"]
    assert json.loads((out / "summary.json").read_text())["kept"] == 3

    again = distill([RELU, SIGMOID], server.url, "teacher", out, **kw)
    assert len(server.requests) == 8  # nothing new reached the server
    assert (again.requests, again.cache_hits, again.verified, again.kept) == (0, 6, 0, 3)
    assert read_jsonl(out / "train.jsonl") == rows


def test_the_request_carries_the_shared_prompt_model_seed_and_key(chat_server, tmp_path):
    server = chat_server({})
    summary = distill(
        [RELU], server.url, "teacher", tmp_path, variations=2, api_key="sk-test",
        rate_limit_per_s=None, sampling=SamplingConfig(temperature=0.5), max_tokens=99,
    )  # fmt: skip
    assert summary.kept == 0 and summary.dropped == {"no_code": 2} and summary.verified == 0
    first, second = server.requests
    assert first["path"] == "/v1/chat/completions"
    assert first["Authorization"] == "Bearer sk-test"
    assert first["body"]["messages"] == build_messages(RELU.source)
    assert first["body"]["model"] == "teacher"
    assert (first["body"]["seed"], second["body"]["seed"]) == (0, 1)
    assert (first["body"]["temperature"], first["body"]["max_tokens"]) == (0.5, 99)
    assert "top_p" not in first["body"] and "top_k" not in first["body"]  # the defaults
    assert read_jsonl(tmp_path / "train.jsonl") == []


def test_a_401_stops_at_once_and_a_rerun_resumes_from_the_cache(chat_server, tmp_path):
    server = chat_server({(SIGMOID.source, None): [(401, "bad key")]})
    with pytest.raises(DistillError, match="HTTP 401.*refused the API key.*OPENAI_API_KEY"):
        distill([RELU, SIGMOID], server.url, "t", tmp_path, variations=2, rate_limit_per_s=None)
    assert len(server.requests) == 3  # ReLU's two answers, then one 401, no retry
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    fixed = chat_server({})
    summary = distill(
        [RELU, SIGMOID], fixed.url, "t", tmp_path, variations=2, rate_limit_per_s=None
    )
    assert len(fixed.requests) == 2 and summary.cache_hits == 2 and summary.answers == 4


# --------------------------------------------------------------------------- the client


def test_retries_back_off_exponentially_and_honour_retry_after(chat_server):
    server = chat_server({(None, None): [(429, "a"), (503, "b"), (200, "fine")]})
    client = ChatClient(server.url, "m", backoff_s=0.1, rate_limit_per_s=None)
    start = time.monotonic()
    assert client.chat([{"role": "user", "content": "x"}])["content"] == "fine"
    assert (client.requests, client.retries) == (3, 2)
    gaps = [b["t"] - a["t"] for a, b in pairwise(server.requests)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2  # 0.1 * 2**attempt
    assert time.monotonic() - start < 5

    waited = chat_server({(None, None): [(429, "a", {"Retry-After": "0.5"}), (200, "ok")]})
    client = ChatClient(waited.url, "m", backoff_s=0.0, rate_limit_per_s=None)
    client.chat([{"role": "user", "content": "x"}])
    assert waited.requests[1]["t"] - waited.requests[0]["t"] >= 0.5


def test_it_gives_up_after_max_retries(chat_server):
    server = chat_server({(None, None): [(500, "down")]})
    client = ChatClient(server.url, "m", max_retries=2, backoff_s=0.01, rate_limit_per_s=None)
    with pytest.raises(DistillError, match="gave up after 3 attempts: HTTP 500"):
        client.chat([{"role": "user", "content": "x"}])
    assert len(server.requests) == 3


def test_a_timeout_is_retried(chat_server):
    server = chat_server({(None, None): [("sleep", 1.5, "late"), (200, "on time")]})
    client = ChatClient(server.url, "m", timeout_s=0.3, backoff_s=0.01, rate_limit_per_s=None)
    assert client.chat([{"role": "user", "content": "x"}])["content"] == "on time"
    assert client.retries == 1


def test_the_rate_limit_spaces_requests(chat_server):
    server = chat_server({(None, None): [(429, "a"), (200, "ok")]})
    client = ChatClient(server.url, "m", backoff_s=0.0, rate_limit_per_s=10)
    for _ in range(5):
        client.chat([{"role": "user", "content": "x"}])
    times = [r["t"] for r in server.requests]
    assert len(times) == 6  # the retry counts against the limit too
    assert min(b - a for a, b in pairwise(times)) >= 0.09
    assert times[-1] - times[0] >= 0.5 - 0.01


def test_an_unreachable_endpoint_fails_at_once_with_its_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    client = ChatClient(f"http://127.0.0.1:{port}", "m", backoff_s=1.0)
    start = time.monotonic()
    with pytest.raises(DistillError, match=f"cannot reach http://127.0.0.1:{port}/v1/chat"):
        client.chat([{"role": "user", "content": "x"}])
    assert time.monotonic() - start < 1.0 and client.retries == 0


def test_a_404_says_to_check_the_url(chat_server):
    server = chat_server({(None, None): [(404, "no route")]})
    with pytest.raises(DistillError, match="HTTP 404.*no route.*server's base"):
        ChatClient(server.url, "m", rate_limit_per_s=None).chat([{"role": "user", "content": "x"}])


def test_urls_and_reasoning():
    assert chat_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert chat_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert chat_url("http://h/x/chat/completions") == "http://h/x/chat/completions"
    assert reasoning_of({"reasoning": " field ", "content": "<think>tag</think>"}) == "field"
    assert reasoning_of({"content": "<think> a </think>\n```python\nx\n```"}) == "a"
    assert reasoning_of({"content": "plan first\n</think>\ncode"}) == "plan first"
    assert reasoning_of({"content": "Tile by rows.\n\n```python\nx = 1\n```"}) == "Tile by rows."
    assert reasoning_of({"content": "```python\nx = 1\n```"}) is None


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="variations must be at least 1"):
        distill([RELU], "http://h", "m", tmp_path, variations=0)
    with pytest.raises(ValueError, match="no tasks to distill"):
        distill([], "http://h", "m", tmp_path)
    with pytest.raises(ValueError, match="rate_limit_per_s must be positive"):
        ChatClient("http://h", "m", rate_limit_per_s=0)


# --------------------------------------------------------------------------- command


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def test_distill_command(chat_server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = chat_server({})
    base = ["distill", "--endpoint", server.url, "--model", "t", "--variations", "1"]
    args = [*base, "--tasks", "builtin:level1", "--limit", "2", "--out", str(tmp_path / "d")]
    result = CliRunner().invoke(_app(), [*args, "--rate-limit", "100"])
    assert result.exit_code == 0, result.output
    assert "kept 0 of 2 answers for 2 tasks (2 requests, 0 cached)" in result.output
    # the held-out tasks are never asked for: no training data may copy them
    assert "8 of 32 tasks left out: equal to a task of data.decontaminate_against" in result.output
    held = [t.source.strip() for t in load_builtin("heldout").tasks]
    asked = [r["body"]["messages"][-1]["content"] for r in server.requests]
    assert len(asked) == 2 and not any(h in a for h in held for a in asked)
    denied = chat_server({(None, None): [(401, "no")]})
    args[2] = denied.url
    result = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "e")])
    assert (
        result.exit_code == 1 and "HTTP 401" in result.output and "rerun to resume" in result.output
    )
    result = CliRunner().invoke(
        _app(), [*base, "--tasks", str(tmp_path / "none.jsonl"), "--out", "x"]
    )
    assert result.exit_code == 2 and "none.jsonl: no such file" in result.output


def test_distill_run_records_its_rows_and_tasks_and_status_lists_it_in_place(distill_run):
    run = Run.open(distill_run)
    assert run.stage("distill")["status"] == "done"
    rows = read_jsonl(run.artifact("distill", "train"))
    tasks = load_prepared_tasks(run.artifact("distill", "tasks"))  # every task asked
    assert [t.id for t in tasks] == [
        "builtin:level1/3_Tanh",
        "builtin:level1/5_LeakyReLU",
        "builtin:level1/6_Softplus",
    ]
    assert {r["task_id"] for r in rows} == {t.id for t in tasks[:2]} and len(rows) == 4
    tanh = load_builtin("level1/3_Tanh").tasks[0]
    assert (tasks[0].source, tasks[0].solution, tasks[0].level) == (
        tanh.source, tanh.solution, tanh.level)  # fmt: skip
    r = tritonrl("status", str(distill_run), "--json")
    assert r.returncode == 0, r.stderr
    stages = json.loads(r.stdout)["stages"]
    assert list(stages) == ["prepare", "distill", "sft", "rl", "eval"]  # in the order they run
    assert stages["distill"]["artifacts"] == {
        "train": "distill/train.jsonl", "tasks": "distill/tasks.jsonl"}  # fmt: skip
    table = tritonrl("status", str(distill_run)).stdout
    assert "distill" in table and "tasks=distill/tasks.jsonl" in table


def test_the_teacher_is_sampled_as_the_sampling_section_says(chat_server, tmp_path):
    assert chat_sampling(None) == {"temperature": 0.0}  # greedy
    assert chat_sampling(SamplingConfig()) == {"temperature": 0.8}  # endpoints' own defaults
    narrow = SamplingConfig(temperature=0.6, top_p=0.9, top_k=20)
    assert chat_sampling(narrow) == {"temperature": 0.6, "top_p": 0.9, "top_k": 20}
    server = chat_server({})
    base = ["distill", "--endpoint", server.url, "--model", "t", "--variations", "1",
            "--tasks", "builtin:level1/3_Tanh", "--rate-limit", "100"]  # fmt: skip
    r = CliRunner().invoke(_app(), [*base, "--out", str(tmp_path / "d"), "--sampling.top_p",
                                    "0.9", "--sampling.temperature", "0.6"])  # fmt: skip
    assert r.exit_code == 0, r.output
    (request,) = server.requests
    assert (request["body"]["temperature"], request["body"]["top_p"]) == (0.6, 0.9)
    assert request["body"]["max_tokens"] == 16384  # distill's own --max-tokens: a teacher's


def test_distill_temperature_is_refused_naming_the_sampling_key(chat_server, tmp_path):
    server = chat_server({})
    r = CliRunner().invoke(_app(), ["distill", "--endpoint", server.url, "--model", "t",
                                    "--out", str(tmp_path / "d"), "--temperature", "0.5"],
                           terminal_width=300)  # fmt: skip
    assert r.exit_code == 2
    assert " ".join(r.output.split()) == (
        "error: distill --temperature is now sampling.temperature: write it as `sampling: "
        "{temperature: VALUE}` in a config file, or --sampling.temperature VALUE on the "
        "command line"
    )
    assert server.requests == [] and not (tmp_path / "d").exists()
    old = ["--out", str(tmp_path / "d"), "--rl.temperature", "0.5"]
    r = CliRunner().invoke(_app(), ["distill", "--endpoint", server.url, "--model", "t", *old])
    assert r.exit_code == 2 and "rl.temperature is now sampling.temperature" in r.output
