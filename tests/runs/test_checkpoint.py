"""Checkpoint seals: a checkpoint counts only when sealed and every file matches."""

from tritonrl.runs import checkpoint as ck


def _make(folder, files):
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def test_a_sealed_checkpoint_is_consistent_and_records_every_file(tmp_path):
    folder = _make(tmp_path / "checkpoint-4", {"model.bin": b"w" * 100, "sub/opt.pt": b"o"})
    record = ck.seal(folder)
    assert record["step"] == 4
    assert set(record["files"]) == {"model.bin", "sub/opt.pt"}
    assert record["files"]["model.bin"]["size"] == 100
    assert ck.check(folder) is None


def test_an_unsealed_truncated_or_altered_checkpoint_says_why(tmp_path):
    folder = _make(tmp_path / "checkpoint-2", {"model.bin": b"w" * 100})
    assert "not finished" in ck.check(folder)
    ck.seal(folder)
    (folder / "model.bin").write_bytes(b"w" * 99)
    assert "99 bytes" in ck.check(folder)
    (folder / "model.bin").write_bytes(b"x" * 100)
    assert "SHA-256" in ck.check(folder)
    assert ck.check(folder, hashes=False) is None  # the quick look sees sizes only
    (folder / "model.bin").unlink()
    assert "missing" in ck.check(folder)


def test_checkpoint_folder_names():
    assert ck.step_of("rl/checkpoint-12") == 12
    assert ck.step_of("rl/checkpoints/round-3") == 3
    assert ck.step_of("rl/final") is None
