"""Tasks as verl's RL parquet: the rows, the file read back, and `tritonrl export-verl`."""

import pyarrow.parquet as pq

from cli_process import tritonrl
from tritonrl.config import VerifyConfig
from tritonrl.data.prompts import build_messages
from tritonrl.data.verl import verl_rows, write_parquet
from tritonrl.reward.adapters import _load_ground_truth
from tritonrl.tasks import Task, load_builtin

RELU = load_builtin("level1/1_ReLU").tasks[0]
OURS = Task("mine/scale", 1, "scale", RELU.source.replace("torch.relu(x)", "x * 2"), "test")


def test_rows_read_back_with_every_field(tmp_path):
    rows = verl_rows(
        [RELU, OURS], "validation", VerifyConfig(policy="partial", allowed_torch_ops=["mm"])
    )
    path = write_parquet(rows, tmp_path / "v" / "validation.parquet")
    back = pq.read_table(path).to_pylist()
    assert back == rows
    first, second = back
    assert first["data_source"] == "tritonrl" and first["ability"] == "triton"
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["prompt"] == build_messages(
        RELU.source, policy="partial", allowed_torch_ops=["mm"]
    )
    assert first["prompt"] != build_messages(RELU.source, policy="strict")
    assert first["reward_model"] == {"style": "rule", "ground_truth": RELU.id}
    assert first["extra_info"] == {
        "task_id": RELU.id, "level": 1, "split": "validation", "index": 0}  # fmt: skip
    # A task with no builtin id carries its reference; compute_score rebuilds it from that.
    assert second["reward_model"]["ground_truth"] == OURS.source
    assert _load_ground_truth(second["reward_model"]["ground_truth"]).source == OURS.source
    assert second["extra_info"]["task_id"] == "mine/scale"


def test_export_verl_command_writes_the_split_and_refuses_to_overwrite(tmp_path):
    r = tritonrl("export-verl", "--tasks", "builtin:level1/3_Tanh", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    table = pq.read_table(tmp_path / "train.parquet")
    assert table.num_rows == 1 and set(table.column_names) == {
        "data_source", "prompt", "ability", "reward_model", "extra_info"}  # fmt: skip
    r = tritonrl("export-verl", "--tasks", "builtin:level1/3_Tanh", "--out", str(tmp_path))
    assert r.returncode == 2 and "--force" in r.stderr


def test_export_verl_keeps_held_out_tasks_out_of_the_train_split(tmp_path):
    held = {t.id for t in load_builtin("heldout").tasks if t.level == 1}
    r = tritonrl("export-verl", "--tasks", "builtin:level1", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    train = {row["task_id"] for row in pq.read_table(tmp_path / "train.parquet")
             .column("extra_info").to_pylist()}  # fmt: skip
    assert len(held) == 8 and not train & held
    assert train | held == {t.id for t in load_builtin("level1").tasks}
    assert f"8 of {len(train) + 8} tasks dropped" in r.stderr and "builtin:heldout" in r.stderr
    # The validation split is the held-out tasks themselves: written whole.
    r = tritonrl("export-verl", "--tasks", "builtin:heldout", "--out", str(tmp_path),
                 "--split", "validation")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert pq.read_table(tmp_path / "validation.parquet").num_rows == 12
    # Every task held out: nothing to train on, and nothing written.
    r = tritonrl("export-verl", "--tasks", "builtin:level1/1_ReLU", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "nothing to train on" in r.stderr
    assert not (tmp_path / "x").exists()
