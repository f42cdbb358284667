"""`tritonrl eval` against a loopback OpenAI-compatible server written here (honest
kernels for some tasks, a torch cheat for another, prose for a third), a tiny local
model, resuming an interrupted eval, and --compare."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tritonrl.config import load_config
from tritonrl.evaluate.runner import ApiModel, eval_tasks, evaluate
from tritonrl.tasks import load_builtin
from tritonrl.verify.pool import close_shared_pools

RELU = load_builtin("level1/1_ReLU").tasks[0]
OTHERS = [t for t in load_builtin("level1").tasks if t.id != RELU.id and t.solution][:2]
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip


class Teacher(BaseHTTPRequestHandler):
    """Answers the honest solution for the first task, a cheat for ReLU, prose else."""

    honest: str = ""
    calls: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        Teacher.calls.append(body["model"])
        if "torch.relu" in prompt or "relu(" in prompt.lower() and "class Model" in prompt:
            text = CHEAT
        elif Teacher.honest and Teacher.honest in prompt:
            text = f"```python\n{OTHERS[0].solution}```"
        else:
            text = "I cannot write this kernel."
        answer = {"choices": [{"message": {"role": "assistant", "content": text},
                               "finish_reason": "stop"}]}  # fmt: skip
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module", autouse=True)
def _pools_closed():
    yield
    close_shared_pools()


@pytest.fixture
def server():
    Teacher.honest = OTHERS[0].source.strip()  # only its prompt holds its whole reference
    Teacher.calls = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Teacher)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_an_api_model_is_measured_by_the_same_verifier(server, tmp_path):
    config = load_config(None, ["--verify.device", "cpu"])
    tasks = [RELU, *OTHERS]
    summary = evaluate(ApiModel("teacher", server), tasks, 2, tmp_path / "ev", config)
    o = summary["metrics"]["overall"]
    assert summary["model"] == f"openai:teacher@{server}" and set(Teacher.calls) == {"teacher"}
    assert (o["n"], o["tasks"]) == (6, 3)
    assert o["correct"] == pytest.approx(2 / 6)  # the honest task, twice
    assert o["pass@1"] == pytest.approx(1 / 3) and o["pass@2"] == pytest.approx(1 / 3)
    assert o["flagged"] == 2 and o["flags"].get("torch_compute") == 2  # the cheat, twice
    assert o["valid"] == pytest.approx(4 / 6)  # the prose has no code
    assert o["fast_1"] is None  # nothing timed on the CPU, and the summary says so
    assert any("not timed" in n for n in summary["notes"])
    rows = [json.loads(x) for x in (tmp_path / "ev/samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {"prompt", "completion", "verdict", "reward"} <= set(rows[0])
    cheat = [r for r in rows if r["task"] == RELU.id]
    assert all(r["reward"] == 0.0 and "torch_compute" in r["verdict"]["flags"] for r in cheat)


def test_an_interrupted_eval_continues_where_it_stopped(server, tmp_path):
    config = load_config(None, ["--verify.device", "cpu"])
    out = tmp_path / "ev"
    evaluate(ApiModel("teacher", server), [RELU], 2, out, config)
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text(lines[0] + "\n" + lines[1][:40])  # killed mid-line
    Teacher.calls = []
    summary = evaluate(ApiModel("teacher", server), [RELU], 2, out, config)
    assert len(Teacher.calls) == 2  # only the task with a missing sample is asked again
    assert summary["metrics"]["overall"]["n"] == 2


def test_tasks_from_generated_sources_levels_and_limits():
    tasks = eval_tasks(["builtin:all", "gen:3:7"], levels=[1], limit=4)
    assert len(tasks) == 4 and all(t.level == 1 for t in tasks)
    gen = eval_tasks(["gen:3:7"])
    assert len(gen) == 3 and gen[0].id != eval_tasks(["gen:3:0"])[0].id  # another seed
    with pytest.raises(ValueError, match="no tasks"):
        eval_tasks(["builtin:level1"], levels=[4])


def test_the_command_evaluates_a_run_on_its_held_out_tasks_and_compares(sft_run_dir, tmp_path):
    cli = [sys.executable, "-m", "tritonrl"]
    out = tmp_path / "ev"
    r = subprocess.run([*cli, "eval", "--model", str(sft_run_dir), "--tasks",
                        f"run:{sft_run_dir}", "--samples", "2", "--limit", "3", "--out", str(out),
                        "--rl.max_completion_length", "16"],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == "run/sft" and summary["tasks"] == 3 and summary["samples"] == 2
    assert "eval of run/sft: 3 tasks x 2" in r.stdout
    r = subprocess.run([*cli, "eval", "--compare", str(out), str(out), "--json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and json.loads(r.stdout)[str(out)]["n"] == 6
    r = subprocess.run([*cli, "eval", "--compare", str(tmp_path)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "no summary.json" in r.stderr
