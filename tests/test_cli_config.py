"""`--config` and `--section.key` overrides on every stage command (`tritonrl.cli_config`):
a removed or moved key refused by each, before any work, and a bad value named with its
file; a real subprocess."""

from pathlib import Path

from cli_process import tritonrl

HANG = Path(__file__).parent / "verify" / "hostile" / "c24_hang_at_import.py"


def test_a_config_that_sets_a_removed_key_is_refused_by_every_command(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("data:\n  kernelbook: GPUMODE/KernelBook\n")
    for command in (["verify", "builtin:level1/1_ReLU", str(HANG)],
                    ["tasks", "check", "builtin:level1/1_ReLU"],
                    ["prepare", "--source", "builtin", "--out", str(tmp_path / "o")],
                    ["tiny-model", "--out", str(tmp_path / "m")]):  # fmt: skip
        r = tritonrl(*command, "--config", str(old))
        assert r.returncode == 2, (command, r.stderr)
        assert "old.yaml: data.kernelbook is not used by any command" in r.stderr, command
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "m").exists()
    r = tritonrl("prepare", "--source", "builtin", "--out", str(tmp_path / "o"),
                 "--data.kernelbook", "GPUMODE/KernelBook")  # fmt: skip
    assert r.returncode == 2 and "data.kernelbook is not used by any command" in r.stderr
    assert "prepare --source" in r.stderr


def test_a_key_that_moved_is_refused_by_every_command_naming_its_new_place(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("rl:\n  temperature: 0.7\n")
    new = "write it as `sampling: {temperature: VALUE}` in a config file, or --sampling.temperature"
    for command in (["verify", "builtin:level1/1_ReLU", str(HANG)],
                    ["tasks", "check", "builtin:level1/1_ReLU"],
                    ["prepare", "--source", "builtin", "--out", str(tmp_path / "o")],
                    ["eval", "--model", "m", "--tasks", "builtin:level1", "--out",
                     str(tmp_path / "e")]):  # fmt: skip
        r = tritonrl(*command, "--config", str(old))
        assert r.returncode == 2, (command, r.stderr)
        line = " ".join(r.stderr.split())
        assert "old.yaml: rl.temperature is now sampling.temperature" in line, command
        assert new in line and "Traceback" not in r.stderr, command
        r = tritonrl(*command, "--rl.max_completion_length", "64")
        assert r.returncode == 2, (command, r.stderr)
        assert "override: rl.max_completion_length is now sampling.max_new_tokens" in " ".join(
            r.stderr.split()), command  # fmt: skip
    assert not any((tmp_path / name).exists() for name in ("o", "e"))


def test_a_bad_value_in_a_config_file_is_said_with_the_files_name(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sft:\n  max_steps: four\n")
    r = tritonrl("sft", "--run", str(tmp_path / "run"), "--config", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"error: {bad}: sft.max_steps must be int, not 'four'" in " ".join(r.stderr.split())
    r = tritonrl("sft", "--run", str(tmp_path / "run"), "--sft.max_steps", "four")
    assert r.returncode == 2 and r.stderr.strip() == "error: sft.max_steps must be int, not 'four'"
    assert not (tmp_path / "run").exists()  # refused before any work


def test_a_bad_allowed_torch_ops_list_is_one_line_and_exit_2(tmp_path):
    """A malformed list, a mapping and an op name no check matches (`reluu`: torch has
    no such op; asked where the command starts) are each refused in one line, before
    any work, by prepare and verify alike."""
    out = tmp_path / "o"
    cases = {
        "[mm": "error: verify.allowed_torch_ops: '[mm' is not a YAML list; write a list as "
               "'[a, b]' or 'a,b'",
        "{a: 1}": "error: verify.allowed_torch_ops must be a list, not '{a: 1}'; write a list "
                  "as '[a, b]' or 'a,b'",
        "[reluu]": "error: verify.allowed_torch_ops: 'reluu' is no torch op the checker knows; "
                   "write names like 'matmul', 'conv2d', 'relu' (or 'torch.relu', 'F.relu', "
                   "'aten::mm')",
        "[not_an_op, torch.relu]": "error: verify.allowed_torch_ops: 'not_an_op' is no torch op",
    }  # fmt: skip
    for command in (["prepare", "--source", "families", "--out", str(out)],
                    ["verify", "builtin:level1/1_ReLU", str(HANG)]):  # fmt: skip
        for ops, message in cases.items():
            r = tritonrl(*command, "--verify.policy", "partial", "--verify.allowed_torch_ops", ops)
            assert r.returncode == 2, (command, ops, r.stderr)
            assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert r.stderr.strip().startswith(message), (command, ops, r.stderr)
    assert not out.exists()


def test_an_unknown_family_in_rl_fresh_source_stops_rl_before_any_work(tmp_path):
    """`rl.fresh_source families:NAMES` with a family that does not exist is one line
    naming it and the families, exit 2, before the run is touched."""
    run = tmp_path / "run"
    r = tritonrl("pipeline", "--run-dir", str(run), "--rl.generated_tasks", "4",
                 "--rl.fresh_source", "families:norms,convs")  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "unknown task families ['convs']; the families are matmul, " in r.stderr
    assert not run.exists()
