"""A loopback OpenAI-compatible chat server (http.server in a thread) for the tests of
`tritonrl distill` and of what is trained on its answers; the `chat_server` fixture
(tests/conftest.py) starts them and shuts them down."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GARBAGE = "I am not sure how to do this. Maybe use CUDA? ```\nprint('hi')\n```"


def answer(code: str, thought: str = "Flatten, one program per block, mask the tail.") -> str:
    return f"<think>\n{thought}\n</think>\n\n```python\n{code}```\n"


class ChatServer:
    """Speaks `/v1/chat/completions`. `script[(marker, seed)]` is a list of steps, used
    in order (the last one repeats); a step is `(status, content)`, `(status, content,
    headers)` or `("sleep", seconds, content)`. `marker` is a task source found in the
    prompt (None: any prompt)."""

    def __init__(self, script: dict):
        self.script = {k: list(v) for k, v in script.items()}
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"t": time.monotonic(), "path": self.path, "body": body, **self.headers}
                )
                step = server.next_step(body)
                if step[0] == "sleep":
                    time.sleep(step[1])
                    step = (200, step[2])
                status, content, *headers = step
                if status == 200:
                    choice = {"message": {"role": "assistant", "content": content}}
                    payload = {"choices": [{**choice, "finish_reason": "stop"}]}
                else:
                    payload = {"error": {"message": content}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in (headers[0] if headers else {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def next_step(self, body: dict):
        prompt = body["messages"][-1]["content"]
        for (marker, seed), steps in self.script.items():
            if (marker is None or marker.strip() in prompt) and seed in (None, body.get("seed")):
                return steps.pop(0) if len(steps) > 1 else steps[0]
        return (200, GARBAGE)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
