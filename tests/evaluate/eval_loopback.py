"""A loopback OpenAI-compatible server for the evaluation tests: an honest kernel for one
builtin task, a torch cheat for ReLU, prose for anything else (imported by their tests
and conftest, like tests/verify/static's static_cases)."""

import json
from http.server import BaseHTTPRequestHandler

from tritonrl.tasks import load_builtin

RELU = load_builtin("level1/1_ReLU").tasks[0]
OTHERS = [t for t in load_builtin("level1").tasks if t.id != RELU.id and t.solution][:2]
CHEAT = ("```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n```")  # fmt: skip


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
        answer = {"choices": [{"message": {"role": "assistant", "content": text},
                               "finish_reason": finish}]}  # fmt: skip
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass
