"""`tritonrl rl --help` (`tritonrl.train.commands`): what a resumed RL may change."""


def test_rl_help_names_every_section_and_key_a_resumed_rl_may_change():
    import re

    from typer.testing import CliRunner

    from tritonrl.cli import app
    from tritonrl.train.rl import RL_FREE_KEYS, RL_SECTIONS

    r = CliRunner().invoke(app, ["rl", "--help"], terminal_width=400)
    text = re.sub(r"[\s│]+", " ", r.output)  # the help box's wrapping and borders
    for section in RL_SECTIONS:
        assert f" {section}" in text, section
    for section, keys in RL_FREE_KEYS.items():
        for key in keys:
            assert f"{section}.{key}" in text, key


def test_accelerate_config_prints_each_shipped_config_that_accelerate_loads():
    from accelerate.commands.config.config_args import load_config_from_file
    from typer.testing import CliRunner

    from tritonrl.cli import app

    kinds = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp": "FSDP"}
    for name, kind in kinds.items():
        r = CliRunner().invoke(app, ["accelerate-config", name])
        assert r.exit_code == 0, r.output
        path = r.output.strip()
        assert path.endswith(f"{name}.yaml")
        loaded = load_config_from_file(path)  # what `accelerate launch --config_file` reads
        assert loaded.distributed_type.value == kind
        # --num_processes comes from the command line: accelerate asks for it
        assert loaded.num_processes == -1
    assert load_config_from_file(_path_of(app, "zero2")).deepspeed_config["zero_stage"] == 2
    zero3 = load_config_from_file(_path_of(app, "zero3")).deepspeed_config
    assert zero3["zero_stage"] == 3 and zero3["zero3_save_16bit_model"]
    fsdp = load_config_from_file(_path_of(app, "fsdp")).fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def _path_of(app, name: str) -> str:
    from typer.testing import CliRunner

    return CliRunner().invoke(app, ["accelerate-config", name]).output.strip()


def test_accelerate_config_names_the_shipped_ones_for_an_unknown_name():
    from typer.testing import CliRunner

    from tritonrl.cli import app

    r = CliRunner().invoke(app, ["accelerate-config", "zero4"])
    assert r.exit_code == 2
    assert "no accelerate config named 'zero4'" in r.output
    assert "ddp, fsdp, zero2, zero3" in r.output


def test_a_resumed_rl_keeps_the_settings_its_stage_trained_with(tmp_path, monkeypatch):
    """`tritonrl rl --run R --rl.max_steps 50` after an rl stage trained with fresh tasks
    and retirement went on with both off (the run's SFT config was the base; only a
    warning said so). The stage's recorded settings are the base now: the override raises
    the budget and nothing else changes, while an override given on purpose is taken."""
    from typer.testing import CliRunner

    import tritonrl.train.rl
    from tritonrl.cli import app
    from tritonrl.config import RL_SECTIONS
    from tritonrl.config_loader import config_to_dict, load_config
    from tritonrl.runs import Run, RunError

    run = Run.create(tmp_path / "run", config_to_dict(load_config(None, stage="sft")))
    run.start_stage("sft")
    (run.path / "sft" / "model").mkdir(parents=True)
    run.add_artifact("sft", "model", run.path / "sft" / "model")
    run.finish_stage("sft")
    trained = ["--rl.generated_tasks", "40", "--curriculum.retire_after", "4",
               "--curriculum.retire_unsolved_after", "4", "--rl.max_steps", "40"]  # fmt: skip
    ran = config_to_dict(load_config(None, trained, stage="rl"))
    run.start_stage("rl")
    run.set_step("rl", 39)
    run.set_info("rl", config={k: ran[k] for k in RL_SECTIONS})
    run.interrupt_stage("rl", "SIGTERM")

    seen = []

    def run_rl(config, run_dir):  # what the stage would train with; stop there
        seen.append(config)
        raise RunError("stopped by the test")

    monkeypatch.setattr(tritonrl.train.rl, "run_rl", run_rl)
    r = CliRunner().invoke(app, ["rl", "--run", str(run.path), "--rl.max_steps", "50"])
    assert r.exit_code == 2 and "stopped by the test" in r.output, r.output
    rl, curriculum = seen[-1].rl, seen[-1].curriculum
    assert (rl.max_steps, rl.generated_tasks) == (50, 40)
    assert (curriculum.retire_after, curriculum.retire_unsolved_after) == (4, 4)
    CliRunner().invoke(app, ["rl", "--run", str(run.path), "--curriculum.retire_after", "0"])
    assert seen[-1].curriculum.retire_after == 0 and seen[-1].rl.generated_tasks == 40
