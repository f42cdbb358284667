"""How GRPO and RLOO generate (tritonrl.train.generation): vLLM when `rl.vllm` asks and
it can run, transformers otherwise, said in one line; the checks that stop `rl.vllm on`
before any work; TRL's arguments for each generator; the step clock. No vLLM needed:
where it is installed, its presence is switched off or on here."""

import logging

import pytest

from tritonrl import config as config_module
from tritonrl.config import check_config
from tritonrl.config_loader import load_config
from tritonrl.train import generation
from tritonrl.train.generation import Generator, check_model, choose, warn_shared_server

QUIET = ["--run.report_to", "[none]"]


@pytest.fixture
def vllm_missing(monkeypatch):
    monkeypatch.setattr(config_module, "vllm_installed", lambda: False)
    monkeypatch.setattr(generation, "vllm_installed", lambda: False)


@pytest.fixture
def vllm_present(monkeypatch):
    monkeypatch.setattr(config_module, "vllm_installed", lambda: True)
    monkeypatch.setattr(generation, "vllm_installed", lambda: True)


def _config(*overrides):
    return load_config(None, [*overrides, *QUIET])


def test_auto_falls_back_to_transformers_and_says_why(vllm_missing):
    cpu = choose(_config(), "cpu")
    assert not cpu.vllm and cpu.mode is None
    assert cpu.line == (
        "generating with transformers' generate: rl.vllm is auto and RL runs on cpu "
        "(vLLM needs CUDA)"
    )
    cuda = choose(_config(), "cuda")
    assert not cuda.vllm
    assert cuda.reason == "rl.vllm is auto and vLLM is not installed (pip install -e '.[vllm]')"
    assert choose(_config("--rl.vllm", "off"), "cuda").reason == "rl.vllm is off"


def test_auto_takes_vllm_where_it_is_installed_and_rl_runs_on_cuda(vllm_present):
    choice = choose(_config(), "cuda")
    assert choice == Generator(True, "colocate", choice.reason)
    assert choice.line == (
        "generating with vLLM (colocate): rl.vllm is auto, vLLM is installed and RL runs on CUDA"
    )
    assert choice.info() == {"backend": "vllm", "mode": "colocate", "reason": choice.reason}
    assert choose(_config("--rl.vllm_mode", "server"), "cuda").mode == "server"
    assert not choose(_config(), "cpu").vllm


def test_vllm_on_where_it_cannot_run_is_refused_naming_the_key(vllm_missing):
    with pytest.raises(ValueError, match=r"rl.vllm is 'on' but vLLM is not installed: pip"):
        choose(_config("--rl.vllm", "on"), "cuda")
    with pytest.raises(ValueError, match=r"rl.vllm is 'on' but rl.device is 'cpu': vLLM needs"):
        choose(_config("--rl.vllm", "on"), "cpu")
    # the command's config check says the same before anything runs
    on_cuda = _config("--rl.vllm", "on", "--rl.device", "cuda")
    with pytest.raises(ValueError, match=r"rl.vllm is 'on' but vLLM is not installed"):
        check_config(on_cuda, cuda_available=True, stage="rl")
    auto = _config("--rl.vllm", "on", "--rl.device", "auto")
    with pytest.raises(ValueError, match=r"rl.device is 'auto', which resolves to cpu"):
        check_config(auto, cuda_available=False, stage="rl")
    check_config(_config("--rl.device", "cuda"), cuda_available=True, stage="rl")  # auto: fine


def test_vllm_on_with_an_algorithm_that_does_not_generate_through_trl(vllm_present):
    config = _config("--rl.vllm", "on", "--rl.algo", "best-of-n", "--rl.device", "cuda")
    with pytest.raises(ValueError, match=r"rl.vllm is 'on' but rl.algo is 'best-of-n'"):
        check_config(config, cuda_available=True, stage="rl")
    config = _config("--rl.vllm", "on", "--rl.algo", "rloo", "--rl.device", "cuda")
    check_config(config, cuda_available=True, stage="rl")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rl.vllm", "yes", r"rl.vllm must be one of \('auto', 'on', 'off'\), not 'yes'"),
        ("rl.vllm_mode", "remote", r"rl.vllm_mode must be one of \('colocate', 'server'\)"),
        ("rl.vllm_gpu_memory_utilization", "0", r"rl.vllm_gpu_memory_utilization must be in"),
        ("rl.vllm_gpu_memory_utilization", "1.5", r"rl.vllm_gpu_memory_utilization must be in"),
        ("rl.vllm_server_port", "0", r"rl.vllm_server_port must be in 1-65535"),
    ],
)
def test_bad_vllm_values_name_their_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        _config(f"--{key}", value)


def test_colocated_vllm_needs_a_model_directory(tmp_path, vllm_present):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    gguf = tmp_path / "gguf"  # what a .gguf policy's name_or_path is: the file's folder
    gguf.mkdir()
    (gguf / "m.gguf").write_bytes(b"GGUF")
    auto = choose(_config(), "cuda")
    assert check_model(auto, _config(), str(model)) is auto
    assert check_model(auto, _config(), "Qwen/Qwen2.5-Coder-7B-Instruct") is auto  # a hub id
    fallback = check_model(auto, _config(), str(gguf))
    assert not fallback.vllm
    assert fallback.reason.startswith("rl.vllm is auto but vLLM cannot load the policy: its model")
    assert "tritonrl convert-gguf" in fallback.reason
    on = _config("--rl.vllm", "on")
    with pytest.raises(ValueError, match=r"rl.vllm is 'on' but vLLM cannot load the policy"):
        check_model(choose(on, "cuda"), on, str(gguf))
    server = _config("--rl.vllm_mode", "server")  # the server loads its own model
    assert check_model(choose(server, "cuda"), server, str(gguf)).vllm


def test_a_local_server_beside_several_gpus_is_warned_of(caplog):
    server = _config("--rl.vllm_mode", "server")
    with caplog.at_level(logging.WARNING, logger="tritonrl.train.generation"):
        warn_shared_server(server, 1)
        warn_shared_server(_config("--rl.vllm_mode", "server", "--rl.vllm_server_host", "gpu2"), 4)
        warn_shared_server(_config(), 4)  # colocate
        assert not caplog.records
        warn_shared_server(server, 2)
    assert "start the server on a GPU this process does not see" in caplog.text
    assert "127.0.0.1:8000" in caplog.text


def test_trl_arguments_for_each_generator(tmp_path):
    pytest.importorskip("trl")
    from tritonrl.train.rl.grpo import trainer_args

    whole = trainer_args(_config(), tmp_path, "cpu")  # the defaults: the whole distribution
    assert (whole.temperature, whole.top_k, whole.top_p, whole.min_p) == (0.8, 0, 1.0, None)
    config = _config("--rl.vllm_gpu_memory_utilization", "0.25", "--sampling.max_new_tokens",
                     "1024", "--sampling.temperature", "0.7", "--sampling.top_p", "0.95",
                     "--sampling.top_k", "20")  # fmt: skip
    plain = trainer_args(config, tmp_path, "cpu")
    assert not plain.use_vllm
    colocate = trainer_args(config, tmp_path, "cuda", Generator(True, "colocate", "why"))
    for args in (plain, colocate):  # the sampling section, either way
        assert (args.temperature, args.top_k, args.top_p, args.min_p) == (0.7, 20, 0.95, None)
        assert args.repetition_penalty == 1.0 and args.max_completion_length == 1024
    assert colocate.use_vllm and colocate.vllm_mode == "colocate"
    assert colocate.vllm_gpu_memory_utilization == 0.25
    assert colocate.vllm_enable_sleep_mode is False
    assert colocate.vllm_importance_sampling_correction  # TRL's default, kept
    fallback = trainer_args(config, tmp_path, "cuda", Generator(False, None, "why"))
    assert not fallback.use_vllm

    rloo = _config("--rl.algo", "rloo", "--rl.vllm_mode", "server", "--rl.vllm_server_host",
                   "10.0.0.2", "--rl.vllm_server_port", "8011")  # fmt: skip
    server = trainer_args(rloo, tmp_path, "cuda", Generator(True, "server", "why"))
    assert type(server).__name__ == "RLOOConfig" and server.use_vllm
    assert (server.vllm_mode, server.vllm_server_host, server.vllm_server_port) == (
        "server", "10.0.0.2", 8011)  # fmt: skip


def test_the_step_clock_splits_a_step(monkeypatch):
    from tritonrl.train.rl import grpo

    now = iter([0.0, 1.0, 4.0, 4.5, 6.5, 10.0, 20.0])
    monkeypatch.setattr(grpo.time, "perf_counter", lambda: next(now))
    clock = grpo.StepClock()
    assert clock.end() == {}
    clock.begin()  # 0.0
    with clock.part("generate"):  # 1.0 -> 4.0
        pass
    clock.begin()  # a later micro-step of the same step: no new start
    with clock.part("reward_wait"):  # 4.5 -> 6.5
        pass
    assert clock.end() == {"time/generate_s": 3.0, "time/reward_wait_s": 2.0,
                           "time/update_s": 5.0, "time/step_s": 10.0}  # fmt: skip
    clock.begin()  # 20.0: the next step starts afresh
    assert clock.started == 20.0 and clock.generate == clock.reward_wait == 0.0


def test_the_gpu_hold_says_what_the_gate_cost_the_step():
    """The trainer's hold waits for a timing phase that holds its GPU; step_metrics gives
    that wait and the window it waited for, then starts again from zero."""
    import threading
    import time

    from tritonrl.train.rl.grpo import GpuHold
    from tritonrl.verify.pool.gate import GpuGate

    gate = GpuGate()
    hold = GpuHold(gate)
    timing = threading.Event()

    def time_a_kernel():
        with gate.exclusive:
            timing.set()
            time.sleep(0.3)

    phase = threading.Thread(target=time_a_kernel)
    phase.start()
    assert timing.wait(5)
    hold.take()  # waits for the timing phase to leave
    assert hold.held and not gate._held
    hold.release()
    phase.join()
    first = hold.step_metrics()
    assert 0.2 <= first["time/gpu_wait_s"] < 5
    assert first["gpu/timing_windows"] == 1
    assert 0.25 <= first["gpu/timing_held_s"] <= first["gpu/window_s"] < 5
    hold.take()  # nothing in the way
    hold.release()
    second = hold.step_metrics()
    assert second["gpu/timing_windows"] == 0 and second["gpu/window_s"] == 0
    assert second["time/gpu_wait_s"] < 0.1


def test_the_gpu_hold_in_the_reward_childs_gate_waits_for_its_timing(tmp_path):
    """With the reward's verifier a child process, the trainer's hold is taken in the
    child's gate (`RemoteGate`): it waits for a timing phase there, and step_metrics
    reports the child's windows."""
    import threading
    import time

    from tritonrl.config import VerifyConfig
    from tritonrl.train.rl.grpo import GpuHold
    from tritonrl.verify.child import RemoteGate, child_service

    with child_service(VerifyConfig(device="cpu"), 1, tmp_path / "v.log") as served:
        hold = GpuHold(RemoteGate(served, "0"))
        timing = threading.Event()

        def time_a_kernel():  # a timing phase of the child's, as its lanes take it
            with RemoteGate(served, "0").exclusive:
                timing.set()
                time.sleep(0.3)

        phase = threading.Thread(target=time_a_kernel)
        phase.start()
        assert timing.wait(10)
        hold.take()
        assert hold.held
        hold.release()
        phase.join()
        first = hold.step_metrics()
        assert 0.15 <= first["time/gpu_wait_s"] < 5
        assert first["gpu/timing_windows"] == 1 and first["gpu/timing_held_s"] >= 0.25
        assert hold.step_metrics()["gpu/timing_windows"] == 0
