"""Loopback OpenAI-compatible servers for the evaluation tests: `Teacher` (an honest
kernel for one builtin task, a torch cheat for ReLU, prose for anything else) and
`Learner` (a wrong ReLU kernel first, the right one once it has read the verifier's
feedback) (imported by their tests and conftest, like tests/verify/static's
static_cases)."""

import json
from http.server import BaseHTTPRequestHandler

from tritonrl.tasks import load_builtin

RELU = load_builtin("level1/1_ReLU").tasks[0]
OTHERS = [t for t in load_builtin("level1").tasks if t.id != RELU.id and t.solution][:2]
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip


# A ReLU kernel that clamps at 0.5, not 0: wrong for inputs in (0, 0.5).
WRONG_RELU = RELU.solution.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")
assert RELU.solution != WRONG_RELU
FEEDBACK = "Your answer was verified."  # how `tritonrl.data.feedback` opens


def _reply(handler: BaseHTTPRequestHandler, text: str, finish: str = "stop") -> None:
    answer = {"choices": [{"message": {"role": "assistant", "content": text},
                           "finish_reason": finish}]}  # fmt: skip
    data = json.dumps(answer).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Learner(BaseHTTPRequestHandler):
    """/v1/chat/completions: for ReLU, WRONG_RELU until the conversation holds the
    verifier's feedback, then ReLU's solution; OTHERS[0]'s solution for OTHERS[0]; prose
    for anything else. `bodies` records every request's body."""

    bodies: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Learner.bodies.append(body)
        task = body["messages"][1]["content"]  # the first user turn: the task
        told = any(FEEDBACK in m["content"] for m in body["messages"][2:])
        if RELU.source.strip() in task:
            text = f"```python\n{RELU.solution if told else WRONG_RELU}```"
        elif OTHERS[0].source.strip() in task:
            text = f"```python\n{OTHERS[0].solution}```"
        else:
            text = "I cannot write this kernel."
        _reply(self, text)

    def log_message(self, *args):
        pass


class Teacher(BaseHTTPRequestHandler):
    """/v1/chat/completions: OTHERS[0]'s solution for OTHERS[0], a torch cheat for ReLU,
    prose for anything else. `calls` records (path, model) of every request."""

    calls: list = []
    bodies: list = []  # every request's body
    chars_per_token = 0  # > 0: honour max_tokens, cutting the answer (finish_reason "length")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        Teacher.calls.append((self.path, body["model"]))
        Teacher.bodies.append(body)
        if OTHERS[0].source.strip() in prompt:
            text = f"```python\n{OTHERS[0].solution}```"
        elif RELU.source.strip() in prompt:
            text = CHEAT
        else:
            text = "I cannot write this kernel."
        finish, room = "stop", self.chars_per_token * body.get("max_tokens", 0)
        if self.chars_per_token and len(text) > room:
            text, finish = text[:room], "length"
        _reply(self, text, finish)

    def log_message(self, *args):
        pass
