"""A run as a user moves, stops and extends it, for real on the CPU: a LoRA run copied
elsewhere (the original deleted) still loads, with PEFT's own loader too; a real SIGTERM
to `tritonrl sft` in a subprocess checkpoints, marks the stage interrupted, and the same
command resumes and says from where, as `status` does; one progress bar on stderr; which
config changes may continue a run."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from tritonrl.config_loader import config_to_dict, load_config
from tritonrl.runs import Run, RunError
from tritonrl.train.sft import load_sft_model, run_sft
from tritonrl.train.sft.run_dir import budget_raised, resolve_base

transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")
peft = pytest.importorskip("peft")

# The tiny-cpu config, cut to a size that trains in seconds a step on 2 cores.
SMALL = ["--data.generated_tasks", "20", "--tiny_model.generated_tasks", "50"]


@pytest.mark.slow  # trains a model
def test_a_moved_lora_run_loads_after_the_original_is_deleted(tmp_path):
    overrides = ["--lora.enabled", "true", "--sft.max_steps", "2", "--run.report_to", "[none]"]
    config = load_config(None, [*overrides, *SMALL])
    run_sft(config, tmp_path / "original")
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(tmp_path / "original", moved)
    shutil.rmtree(tmp_path / "original")

    model, tokenizer = load_sft_model(moved)
    assert isinstance(model, peft.PeftModel)
    run = Run.open(moved)
    base = str(run.artifact("tiny_model", "model"))
    assert base.startswith(str(moved))
    adapters = [run.artifact("sft", "adapter"), run.artifact("sft", "checkpoint")]
    for adapter in adapters:
        recorded = json.loads((adapter / "adapter_config.json").read_text())
        assert recorded["base_model_name_or_path"] == base
    # PEFT's own loader, which reads the base model's path from adapter_config.json.
    loaded = peft.AutoPeftModelForCausalLM.from_pretrained(adapters[0])
    assert loaded.peft_config["default"].base_model_name_or_path == base
    # The manifest records nothing outside the run.
    assert str(tmp_path) not in (moved / "manifest.json").read_text()


def _tritonrl(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tritonrl", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _assert_one_progress_bar(stderr: str) -> None:
    for flood in ("Writing model shards", "Loading weights", "Tokenizing", "Map", "{'loss'"):
        assert flood not in stderr, f"{flood!r} on stderr:\n{stderr[-3000:]}"
    assert "training:" in stderr


@pytest.mark.slow  # trains a model
def test_sigterm_interrupts_and_the_same_command_resumes_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    args = ["sft", "--run", str(run_dir), "--sft.max_steps", "8", "--run.report_to", "[none]"]
    args += SMALL
    proc = _tritonrl(*args)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if Run.open(run_dir).has_artifact("sft", "checkpoint"):
                    break
            except RunError:
                pass
            time.sleep(0.2)
        assert proc.poll() is None, "sft ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    sft = Run.open(run_dir).stage("sft")
    assert sft["status"] == "interrupted" and sft["signal"] == "SIGTERM", sft
    checkpoint = sft["artifacts"]["checkpoint"]
    step = int(checkpoint.rsplit("-", 1)[1])
    assert 0 < step < 8 and sft["step"] == step  # checkpointed where it stopped
    assert sft["error"].startswith(f"interrupted by SIGTERM at step {step}")
    assert f"interrupted by SIGTERM at step {step}" in stderr
    _assert_one_progress_bar(stderr)

    again = _tritonrl(*args)
    stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr[-3000:]
    assert f"resuming SFT of {run_dir} from {checkpoint} (step {step})" in stderr
    assert "missing keys" not in stderr  # the tiny model's tied lm_head is saved once
    assert f"SFT done (resumed from {checkpoint}): 8 steps" in stdout
    # losses as a person reads them (four significant digits), not 7.951335430145264
    losses = re.search(r"loss (\S+) -> (\S+), eval loss (\S+);", stdout)
    assert losses, stdout
    assert all(x == "n/a" or x == f"{float(x):.4g}" for x in losses.groups()), losses.groups()
    _assert_one_progress_bar(stderr)

    status = _tritonrl("status", str(run_dir), "--json")
    data = json.loads(status.communicate(timeout=60)[0])
    sft = data["stages"]["sft"]
    assert sft["status"] == "done" and sft["signal"] is None and sft["error"] is None
    assert sft["info"]["resumed_from_checkpoint"] == checkpoint
    assert data["resumed_from"] == {"stage": "sft", "step": step, "checkpoint": checkpoint}
    table = _tritonrl("status", str(run_dir)).communicate(timeout=60)[0]
    assert f"resumed from: sft step {step}, {checkpoint}" in table


def _config(*overrides: str) -> dict:
    return config_to_dict(load_config(None, list(overrides)))


def test_only_a_larger_budget_may_continue_a_run():
    old = _config("--sft.max_steps", "20")
    assert budget_raised(old, _config("--sft.max_steps", "25"), steps_done=20)
    assert not budget_raised(old, _config("--sft.max_steps", "15"), steps_done=20)
    assert not budget_raised(old, old, steps_done=20)  # nothing to continue
    assert not budget_raised(old, _config("--sft.max_steps", "-1"), steps_done=20)
    assert not budget_raised(old, _config("--sft.max_steps", "25", "--lora.r", "8"), 20)
    by_epochs = _config("--sft.epochs", "1")
    assert budget_raised(by_epochs, _config("--sft.epochs", "2"), steps_done=40)
    assert not budget_raised(by_epochs, _config("--sft.epochs", "0.5"), steps_done=40)
    # Counted from the steps done: a run that stopped at 20 of -1 (epochs) may get 30.
    assert budget_raised(by_epochs, _config("--sft.max_steps", "30"), steps_done=20)
    assert not budget_raised(by_epochs, _config("--sft.max_steps", "10"), steps_done=20)


def test_a_done_stage_without_a_checkpoint_cannot_continue(tmp_path):
    config = load_config(None, ["--sft.max_steps", "4"])
    run = Run.create(tmp_path / "run", asdict(config))
    run.start_stage("sft")
    run.set_step("sft", 4)
    run.finish_stage("sft")
    with pytest.raises(ValueError, match="records no checkpoint to continue from"):
        run_sft(load_config(None, ["--sft.max_steps", "6"]), run.path)


def test_a_relative_local_base_model_is_recorded_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    local = resolve_base(load_config(None, ["--model.name_or_path", "models/tiny"]))
    assert local.model.name_or_path == str(tmp_path / "models" / "tiny")
    for name in ("tiny", "Qwen/Qwen2.5-Coder-7B-Instruct"):  # built in the run; a hub id
        config = load_config(None, ["--model.name_or_path", name])
        assert resolve_base(config) is config
