"""Which verifier `verify.backend` gives (`tritonrl.verify.backend`): this machine's pool
for "local"; for "ray" without Ray installed, an error naming the pip line that installs
it, from the API and from `verify --batch --backend ray` (exit 2, no traceback); `serve`
refuses it. The Ray backend itself is tested in test_ray_backend.py."""

import json
import sys

import pytest
from typer.testing import CliRunner

from tritonrl.cli import app
from tritonrl.config import VerifyConfig
from tritonrl.tasks import load_builtin
from tritonrl.verify.backend import open_verifier, shared_verifier
from tritonrl.verify.pool.pool import VerifierPool, close_shared_pools, shared_pool
from tritonrl.verify.ray_backend import RayVerifierError

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")
PIP_LINE = r'pip install "tritonrl\[ray\]"'


def test_the_local_backend_is_this_machines_pool():
    config = VerifyConfig(device="cpu")
    try:
        verifier = shared_verifier(config, 1)
        assert isinstance(verifier, VerifierPool) and verifier is shared_pool(config, 1)
    finally:
        close_shared_pools()


def test_the_ray_backend_without_ray_names_the_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when not installed
    ray_config = VerifyConfig(device="cpu", backend="ray")
    with pytest.raises(RayVerifierError, match=PIP_LINE):
        open_verifier(ray_config)
    with pytest.raises(RayVerifierError, match="or set verify.backend to 'local'"):
        shared_verifier(ray_config)


def test_verify_batch_backend_ray_without_ray_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
    relu = load_builtin("level1/1_ReLU").tasks[0]
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"task": relu.id, "kernel": relu.solution}) + "\n")
    out = tmp_path / "results.jsonl"
    args = ["--batch", str(cases), "--out", str(out), "--backend", "ray", "--device", "cpu"]
    r = CliRunner().invoke(app, ["verify", *args], terminal_width=300)
    assert r.exit_code == 2, r.output
    assert 'pip install "tritonrl[ray]"' in r.output and "Traceback" not in r.output
    assert not out.exists()  # no results file left behind to need --force next time
    one = CliRunner().invoke(app, ["verify", relu.id, "-", "--backend", "ray"],
                             input=relu.solution, terminal_width=300)  # fmt: skip
    assert one.exit_code == 2 and 'pip install "tritonrl[ray]"' in one.output, one.output


def test_serve_refuses_the_ray_backend():
    r = CliRunner().invoke(app, ["serve", "--verify.backend", "ray"], terminal_width=300)
    assert r.exit_code == 2, r.output
    assert "tritonrl serve verifies on this machine's pool" in r.output
