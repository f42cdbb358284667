"""Difficulty labels: the AST heuristic on the builtin suite, generated tasks, hand-written
architectures and edge cases, and the LLM labeller against a loopback OpenAI-style server."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tritonrl.tasks import load_builtin
from tritonrl.tasks.difficulty import (
    LabelError,
    describe_ops,
    label_level,
    label_level_llm,
    parse_level,
)
from tritonrl.tasks.generator import generate_tasks

HEADER = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
INPUTS = "\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n"


def model(init: str, forward: str, extra: str = "", header: str = HEADER) -> str:
    """A reference source from the bodies of `__init__` and `forward` (8-space indented)."""
    return (
        f"{header}{extra}\nclass Model(nn.Module):\n    def __init__(self):\n"
        f"        super().__init__()\n{init}\n    def forward(self, x, y=None):\n{forward}\n"
        f"{INPUTS}"
    )


def body(*lines: str) -> str:
    return "".join(f"        {line}\n" for line in lines)


# --------------------------------------------------------------------------- suites


@pytest.mark.parametrize("level", [1, 2])
def test_builtin_tasks_are_labelled_as_their_folder(level):
    tasks = load_builtin(f"level{level}").tasks
    assert tasks
    wrong = {t.id: (label_level(t.source), describe_ops(t.source)) for t in tasks}
    wrong = {k: v for k, v in wrong.items() if v[0] != level}
    assert not wrong, f"labelled differently from level{level}/: {wrong}"


def test_generated_tasks_are_labelled_at_their_level():
    tasks = generate_tasks(80)
    assert {t.level for t in tasks} == {1, 2}
    wrong = [
        (t.id, t.level, describe_ops(t.source)) for t in tasks if label_level(t.source) != t.level
    ]
    assert not wrong


# --------------------------------------------------------------------------- level 3

TRANSFORMER_BLOCK = model(
    body(
        "self.ln1 = nn.LayerNorm(64)",
        "self.qkv = nn.Linear(64, 192)",
        "self.proj = nn.Linear(64, 64)",
        "self.ln2 = nn.LayerNorm(64)",
        "self.fc1 = nn.Linear(64, 256)",
        "self.fc2 = nn.Linear(256, 64)",
        "self.n_head = 4",
    ),
    body(
        "B, T, C = x.size()",
        "q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)",
        "q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)",
        "k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)",
        "v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)",
        "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
        "att = F.softmax(att, dim=-1)",
        "h = (att @ v).transpose(1, 2).contiguous().view(B, T, C)",
        "x = x + self.proj(h)",
        "x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))",
        "return x",
    ),
)

RESNET_BLOCK = model(
    body(
        "self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)",
        "self.bn1 = nn.BatchNorm2d(16)",
        "self.relu = nn.ReLU(inplace=True)",
        "self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)",
        "self.bn2 = nn.BatchNorm2d(16)",
    ),
    body(
        "identity = x",
        "out = self.relu(self.bn1(self.conv1(x)))",
        "out = self.bn2(self.conv2(out))",
        "out += identity",
        "return self.relu(out)",
    ),
)

MLP_LOOP = model(
    body(
        "sizes = [32, 64, 64, 16]",
        "self.layers = nn.ModuleList(",
        "    [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]",
        ")",
    ),
    body("for layer in self.layers:", "    x = torch.relu(layer(x))", "return x"),
)

MLP_APPENDED = model(
    body(
        "self.layers = nn.ModuleList()",
        "for _ in range(3):",
        "    self.layers.append(nn.Linear(16, 16))",
    ),
    body("for i in range(len(self.layers)):", "    x = F.relu(self.layers[i](x))", "return x"),
)

VGG_SEQUENTIAL = model(
    body(
        "self.features = nn.Sequential(",
        "    nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.MaxPool2d(2)",
        ")",
        "self.head = nn.Linear(8, 10)",
    ),
    body("x = self.features(x)", "return self.head(torch.flatten(x, 1))"),
)

LSTM_MODEL = model(
    body("self.lstm = nn.LSTM(8, 16, batch_first=True)", "self.fc = nn.Linear(16, 4)"),
    body("out, _ = self.lstm(x)", "return self.fc(out[:, -1, :])"),
)

LOCAL_BLOCKS = model(
    body("self.block1 = Block()", "self.block2 = Block()"),
    body("return self.block2(self.block1(x))"),
    extra=(
        "class Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n\n    def forward(self, x):\n"
        "        return torch.relu(self.fc(x))\n\n"
    ),
)

MANY_LAYERS = model(
    body(*(f"self.fc{i} = nn.Linear(8, 8)" for i in range(3))),
    body("return self.fc2(self.fc1(self.fc0(x)))"),
)


@pytest.mark.parametrize(
    "source",
    [
        TRANSFORMER_BLOCK,
        RESNET_BLOCK,
        MLP_LOOP,
        MLP_APPENDED,
        VGG_SEQUENTIAL,
        LSTM_MODEL,
        LOCAL_BLOCKS,
        MANY_LAYERS,
    ],
    ids=["transformer", "resnet", "mlp-loop", "mlp-appended", "vgg", "lstm", "blocks", "3-fc"],
)
def test_architectures_are_level_3(source):
    assert label_level(source) == 3, describe_ops(source)


def test_transformer_ops_are_counted():
    ops = describe_ops(TRANSFORMER_BLOCK)
    assert ops["linear"] == 4 and ops["layernorm"] == 2 and ops["matmul"] == 2
    assert ops["softmax"] == 1 and ops["gelu"] == 1 and ops["add"] == 2
    assert ops["mul"] == 1  # the scale; 1.0 / math.sqrt(...) is arithmetic on numbers


def test_resnet_ops_are_counted():
    assert describe_ops(RESNET_BLOCK) == {
        "conv2d": 2,
        "batchnorm2d": 2,
        "relu": 2,
        "add": 1,
    }


def test_local_block_is_analysed():
    assert describe_ops(LOCAL_BLOCKS) == {"linear": 2, "relu": 2}


# --------------------------------------------------------------------------- levels 1-2


FUSION_CASES = [
    # (lines of __init__, lines of forward, level)
    ((), ("return torch.relu(x)",), 1),
    ((), ("return x.relu()",), 1),
    ((), ("return x.relu().sum(dim=1)",), 2),
    ((), ("return torch.matmul(x, y)",), 1),
    ((), ("return x @ y",), 1),
    ((), ("return (x @ y).clamp(min=0.0)",), 2),
    ((), ("return x * 2.0",), 1),
    ((), ("return x * 2.0 + y",), 2),
    ((), ("return -x",), 1),
    ((), ("return x.masked_fill(x > 0, -torch.inf)",), 1),
    ((), ("return x * (1.0 / math.sqrt(x.size(-1)))",), 1),
    ((), ("return x.view(x.size(0), -1).contiguous()",), 1),
    ((), ("return torch.max(x, dim=1)[0]",), 1),
    ((), ("return F.softmax(x, dim=-1)",), 1),
    (
        (),
        (
            "e = torch.exp(x - x.max(dim=1, keepdim=True)[0])",
            "return e / e.sum(dim=1, keepdim=True)",
        ),
        1,
    ),
    ((), ("return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",), 1),
    ((), ("y = x", "y += 1.0", "return torch.tanh(y)"), 2),
    # A long element-wise formula (MinGPT's GELU, 8 ops) is a fusion, not an architecture.
    (
        (),
        (
            "c = math.sqrt(2.0 / math.pi)",
            "return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))",
        ),
        2,
    ),
    (
        ("self.fc = nn.Linear(8, 8)",),
        ("h = self.fc(x)", "return torch.relu(h * 2.0 + 1.0).sum(1).exp() - h.mean(1) * 3.0"),
        3,
    ),
    (("self.fc = nn.Linear(8, 8)",), ("return self.fc(x)",), 1),
    (("self.fc = nn.Linear(8, 8)",), ("return F.relu(self.fc(x))",), 2),
    (("self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())",), ("return self.net(x)",), 2),
    (("self.fc = nn.Linear(8, 8)",), ("return self.fc(x) + x",), 2),
    (
        ("self.conv = nn.Conv2d(3, 8, 3)", "self.bn = nn.BatchNorm2d(8)"),
        ("return torch.relu(self.bn(self.conv(x)))",),
        2,
    ),
    (
        ("self.fc = nn.Linear(8, 8)",),
        ("h = self.fc(x)", "return h / h.norm(dim=1, keepdim=True)"),
        2,
    ),
    (("self.cell = nn.GRUCell(8, 8)",), ("return self.cell(x, y)",), 2),
    (("self.w = nn.Parameter(torch.randn(8))",), ("return x * self.w",), 1),
]


@pytest.mark.parametrize("init,forward,level", FUSION_CASES)
def test_ops_and_fusions(init, forward, level):
    source = model(body(*init), body(*forward))
    assert label_level(source) == level, describe_ops(source)


def test_aliases():
    header = "import torch\nfrom torch import nn\nimport torch.nn.functional as fn\n"
    header += "from torch.nn.functional import gelu as g\nfrom torch.nn import Linear\n"
    source = model(
        body("self.fc = Linear(8, 8)"), body("return g(fn.relu(self.fc(x)))"), header=header
    )
    assert describe_ops(source) == {"linear": 1, "relu": 1, "gelu": 1}
    assert label_level(source) == 2
    plain = model(
        "",
        body("return torch.nn.functional.silu(x)"),
        header="import torch\nimport torch.nn as nn\n",
    )
    assert describe_ops(plain) == {"silu": 1}


def test_helper_methods_are_followed():
    source = model("", body("return self._act(x) * y")).replace(
        "\n    def forward",
        "\n    def _act(self, x):\n        return torch.sigmoid(x)\n\n    def forward",
    )
    assert describe_ops(source) == {"sigmoid": 1, "mul": 1}


def test_odd_input_is_level_1_with_a_log(caplog):
    with caplog.at_level(logging.WARNING, logger="tritonrl.tasks.difficulty"):
        assert label_level("def broken(:\n") == 1
        assert "cannot analyse" in caplog.text
        assert label_level("x = 1\n") == 1
        assert label_level("") == 1
        assert label_level(None) == 1  # type: ignore[arg-type]
    deep = model("", body("return " + "torch.relu(" * 300 + "x" + ")" * 300))
    assert label_level(deep) in (1, 3)  # whatever it decides, it does not raise


# --------------------------------------------------------------------------- LLM labeller


class _Server:
    """An OpenAI-compatible chat server on 127.0.0.1 answering `answer` (or an error)."""

    def __init__(self, answer="2", status=200, delay=0.0):
        self.requests: list[tuple[str, dict, dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(
                    (self.path, dict(self.headers), json.loads(self.rfile.read(length)))
                )
                time.sleep(delay)
                payload = (
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
                    if status == 200
                    else {"error": {"message": "model not found"}}
                )
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (the timeout test)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_llm_label_from_a_chat_endpoint():
    source = model("", body("return torch.relu(x)"))
    with _Server("3") as server:
        assert label_level_llm(source, server.url, "tiny-model", api_key="sk-test") == 3
        assert label_level_llm(source, server.url + "/v1", "tiny-model") == 3
    (path, headers, request), (path2, headers2, _) = server.requests
    assert path == path2 == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test" and "Authorization" not in headers2
    assert request["model"] == "tiny-model"
    assert request["messages"][-1]["content"] == source
    assert "1, 2 or 3" in request["messages"][0]["content"]


@pytest.mark.parametrize(
    "answer,level",
    [
        ("2", 2),
        (" 1.\n", 1),
        ("Level 3 (an architecture).", 3),
        ("<think>4 ops, 1 layer</think>2", 2),
    ],
)
def test_llm_answers_are_parsed(answer, level):
    assert parse_level(answer) == level
    with _Server(answer) as server:
        assert label_level_llm("class Model: pass", server.url, "m") == level


def test_llm_errors_are_clear():
    with _Server("banana") as server, pytest.raises(LabelError, match="no level 1-3"):
        label_level_llm("src", server.url, "m")
    with (
        _Server(status=404) as server,
        pytest.raises(LabelError, match="HTTP 404.*model not found"),
    ):
        label_level_llm("src", server.url, "m")
    with _Server("2", delay=1.0) as server, pytest.raises(LabelError, match="within 0.2 s"):
        label_level_llm("src", server.url, "m", timeout=0.2)
    with _Server() as server:
        closed = server.url
    with pytest.raises(LabelError, match="cannot reach"):
        label_level_llm("src", closed, "m", timeout=2)
