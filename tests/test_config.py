"""Config: SPEC defaults, the YAML files, typed overrides, unknown, removed and moved
names, a run's config recorded before a name moved, clashes."""

from dataclasses import asdict

import pytest
import yaml

from tritonrl.config import (
    Config,
    LoraConfig,
    SamplingConfig,
    SftConfig,
    VerifyConfig,
    check_config,
)
from tritonrl.config_loader import (
    CONFIG_DIR,
    MOVED,
    REMOVED,
    config_from_dict,
    config_path,
    diff_configs,
    load_config,
    override_config,
    parse_overrides,
    split_overrides,
    upgrade_recorded,
)


def test_dataclass_defaults_are_the_spec_defaults():
    sft, lora, ver = SftConfig(), LoraConfig(), VerifyConfig()
    assert (sft.learning_rate, sft.epochs, sft.per_device_batch_size) == (1e-5, 1.0, 2)
    assert (sft.gradient_accumulation, sft.max_length, sft.bf16) == (4, 8192, True)
    assert (sft.save_steps, sft.load_in_8bit) == (50, False)
    assert (lora.enabled, lora.r, lora.alpha, lora.dropout) == (True, 16, 32, 0.05)
    assert lora.target_modules == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert (ver.multi_input, ver.num_input_sets) == (True, 5)
    assert (ver.funnel, ver.skip_timing_on_failure, ver.tiny_run_first) == (True, True, True)
    assert (ver.timing, ver.warmup, ver.trials) == (True, 10, 50)
    assert ver.sandbox_strict is True
    assert Config().model.name_or_path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert (Config().data.validation_fraction, Config().data.max_samples) == (0.1, 1000)


def test_the_embedded_default_is_tiny_cpu():
    config = load_config(None)
    assert config.uses_tiny_model
    assert config.lora.enabled is False
    assert (config.sft.device, config.sft.bf16, config.sft.save_steps) == ("cpu", False, 2)
    # The verifier times on a GPU where one is visible, as `tritonrl verify` always did.
    assert config.verify.device == "auto"
    assert config_path(None).name == "tiny-cpu.yaml"


def test_qwen7b_recipe():
    config = load_config("qwen7b-1gpu", cuda_available=True)
    assert config.model.name_or_path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert asdict(config.lora) == asdict(LoraConfig())
    sft = config.sft
    assert (sft.learning_rate, sft.epochs, sft.per_device_batch_size) == (1e-5, 1.0, 2)
    assert (sft.gradient_accumulation, sft.max_length, sft.bf16) == (4, 8192, True)


def test_a_named_config_with_a_dot_in_its_name_is_found_by_name():
    # "qwen-coder-1.5b-1gpu" has a suffix (".5b-1gpu") as a path: it is still a name.
    assert config_path("qwen-coder-1.5b-1gpu").name == "qwen-coder-1.5b-1gpu.yaml"
    config = load_config("qwen-coder-1.5b-1gpu", cuda_available=True)
    assert config.model.name_or_path == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert not config.lora.enabled and config.pipeline.prepare_source == "builtin"
    assert config.sft.device == config.rl.device == config.verify.device == "cuda"
    assert not config.sft.bf16 and not config.rl.bf16  # bf16 autocast went NaN on the GPU
    assert config.pipeline.pass_rate_samples == 4  # rl on the tasks SFT solves sometimes


def test_smollm2_recipe_is_a_small_full_parameter_run_on_builtin_data():
    config = load_config("smollm2-1gpu", cuda_available=True)
    assert config.model.name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert not config.lora.enabled and config.pipeline.prepare_source == "builtin"
    assert config.sft.device == config.rl.device == config.verify.device == "cuda"
    assert config.rl.max_steps < 50 and config.run.store is None


def test_store_settings_are_checked():
    config = load_config(None, ["--run.store", "s3://bucket/runs", "--run.sync_interval_s", "60"])
    assert (config.run.store, config.run.sync_interval_s) == ("s3://bucket/runs", 60.0)
    assert load_config(None).run.sync_interval_s == 0  # tiny-cpu: after every checkpoint
    with pytest.raises(ValueError, match="run.sync_interval_s must be >= 0"):
        load_config(None, ["--run.sync_interval_s", "-1"])


def test_overrides_are_converted_by_field_type():
    config = load_config(
        None,
        [
            "--sft.max_steps",
            "7",
            "--sft.learning_rate",
            "2e-4",
            "--lora.enabled=true",
            "--lora.target_modules",
            "q_proj,v_proj",
            "--run.report_to",
            "[none]",
            "--model.revision",
            "null",
            "--verify.policy",
            "partial",
            "--verify.allowed_torch_ops",
            "mm",
            "--data.max_samples",
            "30",
        ],
    )
    assert config.sft.max_steps == 7 and isinstance(config.sft.max_steps, int)
    assert config.sft.learning_rate == 2e-4
    assert config.lora.enabled is True
    assert config.lora.target_modules == ["q_proj", "v_proj"]
    assert config.run.report_to == ["none"]
    assert config.model.revision is None
    assert config.verify.allowed_torch_ops == ["mm"]
    assert config.data.max_samples == 30


def test_every_extension_can_be_switched_off():
    config = load_config(
        None,
        [
            "--verify.multi_input",
            "false",
            "--verify.funnel",
            "false",
            "--verify.tiny_run_first",
            "false",
            "--verify.timing",
            "false",
            "--verify.sandbox_strict",
            "false",
        ],
    )
    v = config.verify
    assert not (v.multi_input or v.funnel or v.tiny_run_first or v.timing or v.sandbox_strict)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--sft.max_steps", "ten"], "sft.max_steps must be int, not 'ten'"),
        (["--lora.enabled", "maybe"], "lora.enabled must be bool"),
        (["--sft.lr", "1"], r"unknown key sft.lr; valid keys of sft: device, learning_rate"),
        (["--sftt.max_steps", "1"], r"unknown section 'sftt'; valid sections: run, data"),
        (["--sft.max_steps"], r"--sft.max_steps has no value"),
        (["sft.max_steps", "3"], r"not of the form --section.key VALUE"),
        (["--store", "s3://b/r"], r"not of the form .*; did you mean --run.store\?"),
        (["--max_steps", "3"], r"did you mean --sft.max_steps or --rl.max_steps\?"),
        (["--lora.r", "0"], "lora.r must be >= 1"),
        (["--sft.max_steps", "0"], r"sft.max_steps must be >= 1, or -1 to train sft.epochs"),
        (["--sft.max_steps", "-5"], r"sft.max_steps must be >= 1, or -1 .*not -5"),
        (["--verify.allowed_torch_ops", "mm"], "use policy 'partial'"),
        (
            ["--verify.policy", "partial", "--verify.allowed_torch_ops", "[mm"],
            r"^verify.allowed_torch_ops: '\[mm' is not a YAML list; write a list as '\[a, b\]' "
            r"or 'a,b'$",
        ),
        (
            ["--verify.policy", "partial", "--verify.allowed_torch_ops", "{a: 1}"],
            r"^verify.allowed_torch_ops must be a list, not '\{a: 1\}'; write a list as",
        ),
        (
            ["--verify.policy", "partial", "--verify.allowed_torch_ops", "[nn.Conv2d, mm]"],
            r"^verify.allowed_torch_ops: 'nn.Conv2d' is no torch op the checker knows; write "
            r"names like 'matmul', 'conv2d', 'relu'",
        ),
        (["--data.families", "{a: 1}"], "data.families must be a list, not '{a: 1}'"),
        (["--data.validation_fraction", "0.7"], "data.validation_fraction must be between"),
        (["--verify.cuda_max_connections", "-1"], r"must be in \[0, 32\]"),
        (["--sampling.temperature", "0"], "sampling.temperature must be positive"),
        (["--sampling.top_p", "0"], r"sampling.top_p must be in \(0, 1\] \(1: off\), not 0.0"),
        (["--sampling.top_p", "1.5"], r"sampling.top_p must be in \(0, 1\]"),
        (["--sampling.top_k", "-1"], r"sampling.top_k must be >= 0 \(0: off\), not -1"),
        (["--sampling.max_new_tokens", "0"], "sampling.max_new_tokens must be >= 1"),
        (["--verify.backend", "slurm"], r"verify.backend must be one of \('local', 'ray'\)"),
        (
            ["--data.sft_source", "kernelbook"],
            r"data.sft_source must be one of \('auto', 'prepare', 'distill', 'builtin'\)",
        ),
        (["--verify.ray_address", "auto"], "set verify.backend to 'ray'"),
        (["--verify.ray_actors", "2"], "set verify.backend to 'ray'"),
        (["--verify.backend", "ray", "--verify.ray_actors", "-1"], "verify.ray_actors must be 0"),
        (["--verify.backend", "ray", "--verify.endpoint", "http://h:8765"], "give one of them"),
        (["--rl.overlap_reward", "true", "--rl.turns", "3"], "multi-turn rollouts verify inside"),
        (["--rl.overlap_reward", "true", "--rl.hierarchical", "true"], "rl.overlap_reward false"),
        (["--rl.overlap_reward", "true", "--rl.algo", "best-of-n"], "rl.algo grpo or rloo"),
        (["--rl.reward_lanes", "0"], r"rl.reward_lanes must be >= 1 or null"),
        (["--rl.update_gpu_alone", "true"], "set rl.overlap_reward true, or"),
        (["--rl.reward_nice", "20"], r"rl.reward_nice must be from 0 to 19 .*not 20"),
        (["--verify.nice", "-1"], r"verify.nice must be a whole number from 0 .*not -1"),
    ],
)
def test_bad_overrides_name_what_is_wrong(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, overrides)


def test_the_ray_backend_is_chosen_by_override():
    config = load_config(None, ["--verify.backend", "ray", "--verify.ray_address", "auto",
                                "--verify.ray_actors", "3"])  # fmt: skip
    assert (config.verify.backend, config.verify.ray_address, config.verify.ray_actors) == (
        "ray", "auto", 3)  # fmt: skip
    local = VerifyConfig()
    assert (local.backend, local.ray_address, local.ray_actors) == ("local", None, 0)
    assert load_config(None, ["--verify.backend", "ray"]).verify.ray_address is None


def test_unknown_names_in_a_yaml_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sft:\n  learning_rat: 1.0e-5\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown key sft.learning_rat"):
        load_config(bad)
    bad.write_text("optimizer:\n  lr: 1\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown section 'optimizer'"):
        load_config(bad)
    bad.write_text("- just a list\n")
    with pytest.raises(ValueError, match="top level must be a mapping"):
        load_config(bad)
    with pytest.raises(ValueError, match="no such file; give a YAML path or one of: .*tiny-cpu"):
        load_config("no-such-config")


def test_a_key_set_twice_in_a_yaml_file_is_refused(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("rl:\n  max_steps: 5\n  beta: 0.0\n  max_steps: 7\n")
    with pytest.raises(ValueError, match=r"twice.yaml.*'max_steps' is set twice \(lines 2 and 4\)"):
        load_config(twice)
    twice.write_text("rl:\n  max_steps: 5\nsft:\n  max_steps: 3\nrl:\n  beta: 0.1\n")
    with pytest.raises(ValueError, match=r"'rl' is set twice \(lines 1 and 5\)"):
        load_config(twice)
    twice.write_text("rl:\n  max_steps: 5\nsft:\n  max_steps: 3\n")  # one per section
    config = load_config(twice, ["--sft.bf16", "false", "--rl.bf16", "false"])
    assert (config.rl.max_steps, config.sft.max_steps) == (5, 3)


@pytest.mark.parametrize(
    "text, message",
    [
        ("sft:\n  max_steps: four\n", "sft.max_steps must be int, not 'four'"),
        ("lora:\n  r: 0\n", "lora.r must be >= 1"),  # a section's own check
        ("sampling:\n  top_p: 1.5\n", r"sampling.top_p must be in \(0, 1\]"),
        ("verify:\n  ray_actors: 2\n", "verify.ray_address and verify.ray_actors are set"),
    ],
)
def test_a_bad_value_in_a_config_file_names_the_file(tmp_path, text, message):
    """As an unknown key of the file does (`bad.yaml: unknown key ...`): with overrides
    or without, the file's own mistake is said with its path; an override's is not."""
    import re

    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    named = re.escape(f"{bad}: ") + message
    with pytest.raises(ValueError, match=named):
        load_config(bad)
    with pytest.raises(ValueError, match=named):  # beside an override of another field
        load_config(bad, ["--sft.learning_rate", "1e-5"])
    with pytest.raises(ValueError) as caught:  # an override's error: its own wording
        load_config(None, ["--sft.max_steps", "four"])
    assert str(caught.value) == "sft.max_steps must be int, not 'four'"
    with pytest.raises(ValueError) as caught:  # the file's value is fine; the override's not
        load_config(bad, ["--sft.max_steps", "4", "--lora.r", "4", "--sampling.top_p", "1",
                          "--verify.ray_actors", "0", "--lora.enabled", "maybe"])  # fmt: skip
    assert str(caught.value) == "lora.enabled must be bool, not 'maybe'"


def test_yaml_scalars_are_checked_and_converted(tmp_path):
    good = tmp_path / "c.yaml"
    good.write_text("sft:\n  device: cpu\n  bf16: false\n  learning_rate: 1e-5\n")
    assert load_config(good).sft.learning_rate == 1e-5  # YAML 1.1 reads 1e-5 as text
    good.write_text("sft:\n  device: cpu\n  bf16: false\n  max_steps: true\n")
    with pytest.raises(ValueError, match="sft.max_steps must be int, not True"):
        load_config(good)


@pytest.mark.parametrize(
    "overrides, cuda, names",
    [
        (
            ["--sft.load_in_8bit", "true", "--lora.enabled", "true"],
            False,
            ("sft.load_in_8bit", "sft.device"),
        ),
        (
            ["--sft.load_in_8bit", "true", "--sft.device", "cuda"],
            True,
            ("sft.load_in_8bit", "lora.enabled"),
        ),
        (["--sft.bf16", "true"], False, ("sft.bf16", "sft.device")),
        (["--sft.bf16", "true", "--sft.device", "auto"], False, ("sft.bf16", "sft.device")),
        (["--sft.device", "cuda"], False, ("sft.device", "no CUDA")),
        (
            ["--sft.max_length", "8192"],
            False,
            ("sft.max_length", "tiny_model.max_position_embeddings"),
        ),
        (
            ["--data.sft_source", "builtin", "--data.tasks", "", "--data.generated_tasks", "0"],
            False,
            ("data.tasks", "data.generated_tasks"),
        ),
    ],
)
def test_clashing_options_are_refused_up_front(overrides, cuda, names):
    with pytest.raises(ValueError) as e:
        load_config(None, overrides, cuda_available=cuda)
    for name in names:
        assert name in str(e.value)


def test_cuda_options_pass_where_cuda_is_present():
    config = load_config(
        None,
        [
            "--sft.device",
            "cuda",
            "--sft.bf16",
            "true",
            "--sft.load_in_8bit",
            "true",
            "--lora.enabled",
            "true",
        ],
        cuda_available=True,
    )
    assert config.sft.load_in_8bit and config.sft.bf16


def test_resolved_config_round_trips_and_diffs():
    config = load_config(None, ["--sft.max_steps", "3"])
    again = config_from_dict(asdict(config))
    assert again == config
    other = asdict(load_config(None, ["--sft.max_steps", "4"]))
    assert diff_configs(asdict(config), other) == ["sft.max_steps: 3 -> 4"]
    # A run recorded before data.kernelbook was removed.
    recorded = asdict(config)
    recorded["data"]["kernelbook"] = "GPUMODE/KernelBook"
    assert diff_configs(recorded, asdict(config)) == []


def test_parse_overrides_forms():
    assert parse_overrides(["--a.b", "1", "--c.d=x=y", "--e.f", "-2"]) == [
        ("a", "b", "1"),
        ("c", "d", "x=y"),
        ("e", "f", "-2"),
    ]


def test_split_overrides_takes_them_out_of_positional_arguments():
    # click hands `--verify.device cpu` to a command's positional parameters.
    tokens = ["--verify.device", "cpu", "builtin:level1", "--x.y=1", "a.py", "--sft.bf16"]
    assert split_overrides(tokens) == (
        ["builtin:level1", "a.py"],
        ["--verify.device", "cpu", "--x.y=1", "--sft.bf16"],
    )
    assert split_overrides(["--a.b", "--c.d", "1", "-"]) == (["-"], ["--a.b", "--c.d", "1"])


@pytest.mark.parametrize(
    "text, name",
    [
        ("data:\n  kernelbook: GPUMODE/KernelBook\n", "data.kernelbook"),
    ],
)
def test_a_removed_key_is_refused_saying_it_is_not_used(tmp_path, text, name):
    old = tmp_path / "old.yaml"
    old.write_text(text)
    with pytest.raises(ValueError) as e:
        load_config(old)
    assert f"old.yaml: {name} is not used by any command" in str(e.value)
    assert REMOVED[name] in str(e.value) and "remove it" in str(e.value)
    with pytest.raises(ValueError, match=f"override: {name} is not used by any command"):
        load_config(None, [f"--{name}", "x"])
    with pytest.raises(ValueError, match=f"{name} is not used"):  # an old run's manifest
        config_from_dict(yaml.safe_load(text))


def test_a_command_checks_only_the_clashes_of_what_it_uses():
    # qwen7b-1gpu trains on CUDA; `verify` or `prepare` with it on a laptop need not.
    with pytest.raises(ValueError, match="sft.device is 'cuda' but no CUDA"):
        load_config("qwen7b-1gpu", cuda_available=False)
    with pytest.raises(ValueError, match="sft.device is 'cuda' but no CUDA"):
        load_config("qwen7b-1gpu", cuda_available=False, stage="sft")
    for stage in ("verify", "tasks check", "prepare"):
        config = load_config(
            "qwen7b-1gpu", ["--verify.device", "cpu"], cuda_available=False, stage=stage
        )
        assert config.verify.device == "cpu" and config.sft.device == "cuda"
    with pytest.raises(ValueError, match="run.report_to lists 'none'"):
        load_config(None, ["--run.report_to", "none,wandb"], stage="verify")


def test_rl_trains_on_its_own_reward_scheme_else_the_verifiers():
    config = load_config(None, ["--verify.reward_scheme", "kevin", "--rl.reward_scheme", "null"])
    assert config.rl_reward_scheme == "kevin" and config.rl_verify.reward_scheme == "kevin"
    config = load_config(
        None, ["--verify.reward_scheme", "kevin", "--rl.reward_scheme", "tritonrl"]
    )
    assert config.rl_reward_scheme == "tritonrl"
    assert config.rl_verify.reward_scheme == "tritonrl" and config.verify.reward_scheme == "kevin"


def test_rl_times_rewards_under_its_own_timing_when_set():
    config = load_config(None, [])
    assert (config.rl_verify.trials, config.rl_verify.max_trials) == (50, 500)  # verify's
    keys = ["--rl.timing_trials", "20", "--rl.timing_max_trials", "60",
            "--rl.timing_target_rse", "0.03", "--rl.timing_max_seconds", "3"]  # fmt: skip
    config = load_config(None, keys)
    v = config.rl_verify
    assert (v.trials, v.max_trials, v.target_rse, v.timing_max_seconds) == (20, 60, 0.03, 3.0)
    assert (config.verify.trials, config.verify.max_trials) == (50, 500)  # eval keeps these
    for bad in ("0", "-2", "nan"):
        with pytest.raises(ValueError, match=f"rl.timing_target_rse must be positive.*{bad}"):
            load_config(None, ["--rl.timing_target_rse", bad])
    with pytest.raises(ValueError, match="takes 600 trials at least but 500 at most"):
        load_config(None, ["--rl.timing_trials", "600"])  # beyond verify.max_trials


def test_rls_reward_verifier_yields_the_cores_and_evals_does_not():
    config = load_config(None, [])
    assert (config.verify.nice, config.rl_verify.nice) == (0, 10)  # rl.reward_nice's default
    config = load_config(None, ["--rl.reward_nice", "3", "--verify.nice", "5"])
    assert (config.verify.nice, config.rl_verify.nice) == (5, 3)
    config = load_config(None, ["--rl.reward_nice", "null", "--verify.nice", "5"])
    assert config.rl_verify.nice == 5  # null: verify.nice


def test_the_reward_memo_is_a_count_of_programs():
    assert load_config(None, []).rl.reward_memo == 4096
    assert load_config(None, ["--rl.reward_memo", "0"]).rl.reward_memo == 0
    with pytest.raises(ValueError, match="rl.reward_memo must be >= 0 .*-1"):
        load_config(None, ["--rl.reward_memo", "-1"])


def test_the_qwen_config_times_rewards_lighter_than_eval():
    config = load_config("qwen-coder-1.5b-1gpu", [], cuda_available=True)
    assert config.rl_verify.max_trials < config.verify.max_trials
    assert config.rl_verify.target_rse > config.verify.target_rse


def test_rl_verifies_under_its_own_wall_clock_when_set():
    config = load_config(None, ["--verify.timeout_s", "120"])
    assert config.rl.verify_timeout_s is None and config.rl_verify.timeout_s == 120
    config = load_config(None, ["--verify.timeout_s", "120", "--rl.verify_timeout_s", "15"])
    assert config.rl_verify.timeout_s == 15 and config.verify.timeout_s == 120
    for bad in ("0", "-1", "nan", "inf"):  # a wall clock that never passes is no limit
        with pytest.raises(ValueError, match=f"rl.verify_timeout_s must be a positive, .*{bad}"):
            load_config(None, ["--rl.verify_timeout_s", bad])
        with pytest.raises(ValueError, match=f"verify.timeout_s must be a positive, .*{bad}"):
            load_config(None, ["--verify.timeout_s", bad])


def test_retire_after_is_a_count_of_answers():
    assert load_config(None, ["--curriculum.retire_after", "16"]).curriculum.retire_after == 16
    with pytest.raises(ValueError, match="curriculum.retire_after must be >= 0 .*not -1"):
        load_config(None, ["--curriculum.retire_after", "-1"])
    with pytest.raises(ValueError, match="curriculum.retire_after must be int, not '1.5'"):
        load_config(None, ["--curriculum.retire_after", "1.5"])


def test_family_tasks_must_be_positive():
    with pytest.raises(ValueError, match="data.family_tasks must be >= 1"):
        load_config(None, ["--data.family_tasks", "0"])
    config = load_config(None, ["--data.family_tasks", "7", "--data.families", '["norms"]'])
    assert (config.data.family_tasks, config.data.families) == (7, ["norms"])


# ------------------------------------------------------------------ the sampling section


def test_sampling_defaults_sample_the_whole_distribution():
    s = SamplingConfig()
    assert (s.temperature, s.top_p, s.top_k, s.max_new_tokens) == (0.8, 1.0, 0, 2048)
    assert s.whole_distribution and s.describe() == "temperature 0.8"
    narrow = load_config(None, ["--sampling.top_p", "0.95", "--sampling.top_k", "20"]).sampling
    assert not narrow.whole_distribution
    assert narrow.describe() == "temperature 0.8, top_p 0.95, top_k 20"


def test_every_shipped_config_sets_the_sampling_section_and_no_moved_key():
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert set(data["sampling"]) == {"temperature", "top_p", "top_k", "max_new_tokens"}
        assert not {"temperature", "max_completion_length"} & set(data.get("rl") or {}), path
    assert load_config("tiny-cpu").sampling.max_new_tokens == 64


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_a_moved_key_is_refused_naming_its_new_place(tmp_path, old, new):
    section, key = old.split(".")
    file = tmp_path / "old.yaml"
    file.write_text(f"{section}:\n  {key}: 7\n")
    with pytest.raises(ValueError) as e:
        load_config(file)
    new_section, new_key = new.split(".")
    assert str(e.value) == (
        f"{file}: {old} is now {new}: write it as `{new_section}: {{{new_key}: VALUE}}` in a "
        f"config file, or --{new} VALUE on the command line"
    )
    for override in ([f"--{old}", "7"], [f"--{old}=7"]):
        with pytest.raises(ValueError, match=f"^override: {old} is now {new}: .* --{new} VALUE"):
            load_config(None, override)


def _recorded_before_the_move(**rl) -> dict:
    """A run's manifest config as a tritonrl before the sampling section recorded it."""
    data = asdict(load_config(None))
    sampling = data.pop("sampling")
    data["rl"] |= {"temperature": sampling["temperature"],
                   "max_completion_length": sampling["max_new_tokens"], **rl}  # fmt: skip
    return data


def test_a_run_recorded_before_the_move_reads_at_the_new_names():
    old = _recorded_before_the_move(temperature=0.6, max_completion_length=99)
    config = config_from_dict(old, "run r")
    assert (config.sampling.temperature, config.sampling.max_new_tokens) == (0.6, 99)
    assert (config.sampling.top_p, config.sampling.top_k) == (1.0, 0)  # what was sampled then
    assert "temperature" in old["rl"]  # the record itself is not changed
    # `tritonrl rl` on such a run: its record is the base, an override changes the new name
    again = override_config(old, ["--sampling.temperature", "0.9"], "run r")
    assert (again.sampling.temperature, again.sampling.max_new_tokens) == (0.9, 99)
    with pytest.raises(ValueError, match="override: rl.temperature is now sampling.temperature"):
        override_config(old, ["--rl.temperature", "0.9"], "run r")
    # the same config, recorded before and after: no difference (an SFT resume goes on)
    assert diff_configs(old, asdict(config)) == []
    assert diff_configs(old, asdict(again)) == ["sampling.temperature: 0.6 -> 0.9"]


def test_resume_writes_a_run_recorded_before_the_move_at_the_new_names(tmp_path):
    from tritonrl.runs import Run
    from tritonrl.runs.resume import config_file

    run = Run.create(tmp_path / "run", _recorded_before_the_move(temperature=0.6))
    path = config_file(run)  # the file `tritonrl resume` hands the stage command
    assert "temperature" not in yaml.safe_load(path.read_text())["rl"]
    assert load_config(path).sampling.temperature == 0.6


def test_a_record_with_a_moved_key_and_its_new_name_set_apart_is_refused():
    old = _recorded_before_the_move(temperature=0.6)
    old["sampling"] = {"temperature": 0.7}
    with pytest.raises(ValueError, match=r"run r: rl.temperature \(0.6\) and sampling.temperature "
                       r"\(0.7\) are both set; .* keep sampling.temperature alone"):  # fmt: skip
        upgrade_recorded(old, "run r")
    old["sampling"] = {"temperature": 0.6}  # the same value twice: one setting
    assert upgrade_recorded(old)["sampling"]["temperature"] == 0.6
    old["sampling"] = None  # an empty section
    assert upgrade_recorded(old)["sampling"] == {"temperature": 0.6, "max_new_tokens": 64,
                                                 "top_p": 1.0, "top_k": 0}  # fmt: skip


def test_max_block_elements_is_a_count_up_to_tritons_own_limit():
    assert VerifyConfig().max_block_elements is None
    config = load_config(None, ["--verify.max_block_elements", "262144"])
    assert config.verify.max_block_elements == 262144
    assert config.rl_verify.max_block_elements == 262144
    for bad in (0, -4, 1 << 21, 2.5, True):
        with pytest.raises(ValueError, match=f"verify.max_block_elements must be .*{bad!r}"):
            VerifyConfig(max_block_elements=bad)


def test_partial_with_no_ops_named_allows_the_ops_every_prompt_names():
    from tritonrl.config import PARTIAL_TORCH_OPS
    from tritonrl.data.prompts import build_messages, prompt_settings

    config = load_config(None, ["--verify.policy", "partial"])
    assert config.verify.allowed_torch_ops == list(PARTIAL_TORCH_OPS)
    assert config.rl_verify.allowed_torch_ops == list(PARTIAL_TORCH_OPS)
    text = build_messages("x = 1\n", **prompt_settings(config))[-1]["content"]
    assert all(f"`{op}`" in text for op in PARTIAL_TORCH_OPS)  # what the verifier allows
    named = load_config(None, ["--verify.policy", "partial", "--verify.allowed_torch_ops", "mm"])
    assert named.verify.allowed_torch_ops == ["mm"]  # a list given is kept as it is
    assert VerifyConfig().allowed_torch_ops == []  # strict allows none
    # A run recorded partial with an empty list resumes without a difference.
    old = asdict(config)
    old["verify"]["allowed_torch_ops"] = []
    assert diff_configs(old, asdict(config_from_dict(old, "run r"))) == []


def test_allowed_torch_ops_takes_a_list_in_every_form_the_checks_match():
    for text in ("[mm, addmm]", "mm,addmm", "[torch.mm, aten::addmm]", "[F.relu]"):
        config = load_config(
            None, ["--verify.policy", "partial", "--verify.allowed_torch_ops", text]
        )
        assert len(config.verify.allowed_torch_ops) in (1, 2), text
    with pytest.raises(ValueError, match="'not an op' is no torch op"):
        VerifyConfig(policy="partial", allowed_torch_ops=["not an op"])
    with pytest.raises(ValueError, match="1 is no torch op"):
        VerifyConfig(policy="partial", allowed_torch_ops=[1])  # type: ignore[list-item]


def test_the_reward_process_is_one_of_three_and_a_child_verifies_on_this_machine():
    assert load_config(None, []).rl.reward_process == "auto"
    with pytest.raises(ValueError, match="rl.reward_process must be one of .*not 'forked'"):
        load_config(None, ["--rl.reward_process", "forked"])
    config = load_config(None, ["--rl.reward_process", "child", "--verify.backend", "ray"])
    said = "rl.reward_process child verifies on this machine's pool, not verify.backend 'ray'"
    with pytest.raises(ValueError, match=said):
        check_config(config, cuda_available=False, stage="rl")
    check_config(load_config(None, ["--rl.reward_process", "child"]), False, stage="rl")
