"""Fixtures of the evaluation tests: a loopback OpenAI-compatible server answering an
honest kernel, a cheat or prose by task, one that learns from the verifier's feedback,
and a tiny LoRA run after a short SFT."""

import threading
from http.server import ThreadingHTTPServer

import pytest
from eval_loopback import Learner, Teacher

from tritonrl.verify.pool.pool import close_shared_pools


@pytest.fixture
def server():
    """The base URL of a running Teacher (http://127.0.0.1:PORT/v1)."""
    Teacher.calls, Teacher.bodies, Teacher.chars_per_token = [], [], 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Teacher)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


@pytest.fixture
def learner():
    """The base URL of a running Learner (http://127.0.0.1:PORT/v1)."""
    Learner.bodies = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Learner)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _pools_closed():
    yield
    close_shared_pools()


@pytest.fixture(scope="session")
def lora_run(tmp_path_factory):
    """A run whose tiny model got a LoRA adapter in 2 SFT steps (the adapter path of every
    loader; tests/train's runs train all parameters). Do not change it."""
    pytest.importorskip("trl")
    from tritonrl.config_loader import load_config
    from tritonrl.train.sft import run_sft

    run_dir = tmp_path_factory.mktemp("eval") / "run"
    run_sft(load_config(None, ["--sft.max_steps", "2", "--lora.enabled", "true",
                               "--data.generated_tasks", "20",
                               "--tiny_model.generated_tasks", "50",
                               "--run.report_to", "[none]"]), run_dir)  # fmt: skip
    return run_dir
