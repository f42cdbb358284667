"""A run's transfers: push (changed files only, seals after their checkpoint's files, the
manifest last, rotated checkpoints deleted after it), pull (a half-uploaded or corrupt
checkpoint skipped for the previous consistent one) and list_runs; against a real S3
server (SeaweedFS, tests/s3server.py) and file://. The store itself: test_store.py."""

import json
import logging
import os

import pytest

from tritonrl.runs import Run
from tritonrl.runs import checkpoint as ck
from tritonrl.runs.store import Store, StoreError, open_store
from tritonrl.runs.transfer import list_runs, pull, push

SEAL = ck.SEAL


@pytest.fixture
def bucket(s3_bucket):
    """`s3_bucket` (emptied and deleted after the test by the fixture itself)."""
    return s3_bucket


def _write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _run(root, name="demo") -> Run:
    run = Run.create(root / name, {"x": 1})
    _write(run.path / "prepare" / "train.jsonl", b'{"a": 1}\n' * 50)
    _write(run.path / "logs" / "sft.log", b"step 1\n")
    run.add_artifact("prepare", "train", run.path / "prepare" / "train.jsonl")
    return run


def _checkpoint(run: Run, step: int, stage="sft", record=True, sealed=True):
    folder = run.path / stage / "checkpoints" / f"checkpoint-{step}"
    _write(folder / "model.safetensors", os.urandom(3000))
    _write(folder / "trainer_state.json", json.dumps({"global_step": step}).encode())
    _write(folder / "sub" / "optimizer.pt", os.urandom(500))
    if sealed:
        ck.seal(folder)
    if record:
        run.start_stage(stage) if run.status(stage) == "pending" else None
        run.add_artifact(stage, "checkpoint", folder)
        run.set_step(stage, step)
    return folder


def _keys(client, bucket, prefix="runs/demo/") -> set[str]:
    found = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found |= {o["Key"][len(prefix) :] for o in page.get("Contents", [])}
    return found


def _local_files(root) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".sync" not in p.parts and p.name != ".manifest.lock"
    }


class Recording(Store):
    """A real store that also records the order of its writes and deletes."""

    def __init__(self, store: Store):
        super().__init__(store.url, store.fs, store.root)
        self.log: list[tuple[str, str]] = []

    def upload(self, local, rel):
        super().upload(local, rel)
        self.log.append(("up", rel))

    def upload_bytes(self, data, rel):
        super().upload_bytes(data, rel)
        self.log.append(("up", rel))

    def delete(self, rels):
        super().delete(rels)
        self.log += [("rm", rel) for rel in rels]


def test_a_second_push_uploads_nothing_and_a_changed_file_only_is_sent_again(s3, bucket, tmp_path):
    run = _run(tmp_path)
    _checkpoint(run, 2)
    url = f"s3://{bucket}/runs/demo"
    first = push(run.path, url)
    assert first.files == 7 and first.bytes > 3500  # 2 plain + 4 checkpoint + manifest
    client = s3.client()
    assert _keys(client, bucket) == {
        "manifest.json", "prepare/train.jsonl", "logs/sft.log",
        "sft/checkpoints/checkpoint-2/model.safetensors",
        "sft/checkpoints/checkpoint-2/trainer_state.json",
        "sft/checkpoints/checkpoint-2/sub/optimizer.pt",
        f"sft/checkpoints/checkpoint-2/{SEAL}",
    }  # fmt: skip
    again = push(run.path, url)
    assert (again.files, again.bytes, again.deleted) == (0, 0, 0)

    (run.path / "logs" / "sft.log").write_bytes(b"step 1\nstep 2\n")
    third = push(run.path, url)
    assert third.files == 1 and third.bytes == 14
    body = client.get_object(Bucket=bucket, Key="runs/demo/logs/sft.log")["Body"].read()
    assert body == b"step 1\nstep 2\n"


def test_push_order_seals_after_files_manifest_last_and_rotation_deletes_after_it(
    s3, bucket, tmp_path
):
    run = _run(tmp_path)
    _checkpoint(run, 2)
    _checkpoint(run, 4)
    _checkpoint(run, 6, record=False, sealed=False)  # still being written
    _write(run.path / "sft" / "checkpoints" / "tmp-checkpoint-8" / "model.safetensors", b"w")
    _write(run.path / "sft" / ".train.jsonl.123.tmp", b"half")
    _write(run.path / "rl" / "rounds" / "round-1" / "samples.jsonl", b"{}\n")  # not a checkpoint
    store = Recording(open_store(f"s3://{bucket}/runs/demo"))
    result = push(run.path, store)
    order = [rel for _, rel in store.log]
    assert order[-1] == "manifest.json"
    for step in (2, 4):
        folder = f"sft/checkpoints/checkpoint-{step}/"
        mine = [i for i, rel in enumerate(order) if rel.startswith(folder)]
        assert len(mine) == 4 and order[mine[-1]] == folder + SEAL
    assert result.unsealed == ["sft/checkpoints/checkpoint-6"]
    keys = _keys(s3.client(), bucket)
    assert "rl/rounds/round-1/samples.jsonl" in keys
    assert not [k for k in keys if "checkpoint-6" in k or "checkpoint-8" in k or ".tmp" in k]
    assert not [k for k in keys if k.startswith(".sync") or k == ".manifest.lock"]

    # The trainer finishes checkpoint-6 and rotates checkpoint-2 away (last 2 kept).
    ck.seal(run.path / "sft" / "checkpoints" / "checkpoint-6")
    run.add_artifact("sft", "checkpoint", run.path / "sft" / "checkpoints" / "checkpoint-6")
    for f in sorted((run.path / "sft" / "checkpoints" / "checkpoint-2").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    (run.path / "sft" / "checkpoints" / "checkpoint-2").rmdir()
    store.log.clear()
    result = push(run.path, store)
    assert result.deleted == 4
    manifest_at = store.log.index(("up", "manifest.json"))
    ups = [rel for kind, rel in store.log[:manifest_at] if kind == "up"]
    assert ups[-1] == f"sft/checkpoints/checkpoint-6/{SEAL}" and len(ups) == 4
    removed = [rel for kind, rel in store.log if kind == "rm"]
    assert {rel.split("/")[2] for rel in removed} == {"checkpoint-2"}
    assert all(store.log.index(("rm", rel)) > manifest_at for rel in removed)
    keys = _keys(s3.client(), bucket)
    assert not [k for k in keys if "checkpoint-2" in k]
    assert f"sft/checkpoints/checkpoint-6/{SEAL}" in keys


def test_a_checkpoint_the_manifest_still_names_is_not_deleted_from_the_store(tmp_path):
    run = _run(tmp_path / "here")
    folder = _checkpoint(run, 2)
    url = (tmp_path / "store" / "demo").as_uri()  # file://
    push(run.path, url)
    # Rotated away before its successor was recorded (save_total_limit=1): the manifest
    # that is up still names it, so the store keeps it until a manifest no longer does.
    for f in sorted(folder.rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    folder.rmdir()
    assert push(run.path, url).deleted == 0
    stored = tmp_path / "store" / "demo" / "sft" / "checkpoints" / "checkpoint-2"
    assert (stored / SEAL).is_file()
    _checkpoint(run, 4)
    assert push(run.path, url).deleted == 4
    assert not stored.exists()  # its emptied folders go too on a local store


def test_pull_onto_a_fresh_directory_reproduces_the_run_and_a_push_from_there_sends_nothing(
    s3, bucket, tmp_path
):
    run = _run(tmp_path / "machine-a")
    _checkpoint(run, 2)
    _checkpoint(run, 4)
    _write(run.path / "rl" / "rounds" / "round-1" / "samples.jsonl", b"{}\n")
    url = f"s3://{bucket}/runs/demo"
    push(run.path, url)
    fresh = tmp_path / "machine-b" / "restored"
    result = pull(url, fresh)
    assert result.skipped == [] and result.repointed == {}
    assert _local_files(fresh) == _local_files(run.path)
    restored = Run.open(fresh)
    assert restored.stage("sft")["step"] == 4
    assert restored.artifact("sft", "checkpoint") == fresh / "sft/checkpoints/checkpoint-4"
    again = push(fresh, url)
    assert (again.files, again.deleted) == (0, 0)
    with pytest.raises(ValueError, match="already holds a run"):
        pull(url, fresh)


@pytest.mark.parametrize("damage", ["no seal", "truncated file"])
def test_pull_skips_a_half_uploaded_checkpoint_for_the_previous_consistent_one(
    s3, bucket, tmp_path, caplog, damage
):
    run = _run(tmp_path / "machine-a")
    _checkpoint(run, 2)
    _checkpoint(run, 4)
    url = f"s3://{bucket}/runs/demo"
    push(run.path, url)
    client = s3.client()
    folder = "runs/demo/sft/checkpoints/checkpoint-4/"
    if damage == "no seal":  # the machine died before the seal went up
        client.delete_object(Bucket=bucket, Key=folder + SEAL)
    else:  # a seal beside a short file
        client.put_object(Bucket=bucket, Key=folder + "model.safetensors", Body=b"short")
    fresh = tmp_path / "machine-b" / "demo"
    with caplog.at_level(logging.WARNING, logger="tritonrl.runs.transfer"):
        result = pull(url, fresh)
    [(name, why)] = result.skipped
    assert name == "sft/checkpoints/checkpoint-4"
    assert ("not finished" if damage == "no seal" else "5 bytes") in why
    assert "checkpoint-4" in caplog.text and "checkpoint-2" in caplog.text
    assert not (fresh / "sft/checkpoints/checkpoint-4").exists()
    restored = Run.open(fresh)
    assert restored.stage("sft")["artifacts"]["checkpoint"] == "sft/checkpoints/checkpoint-2"
    assert restored.stage("sft")["step"] == 2
    assert ck.check(restored.artifact("sft", "checkpoint")) is None
    # The next push sends the repointed manifest, then deletes the bad copy there.
    pushed = push(fresh, url)
    assert pushed.files == 1 and pushed.deleted >= 2
    assert not [k for k in _keys(client, bucket) if "checkpoint-4" in k]
    stored = json.loads(client.get_object(Bucket=bucket, Key="runs/demo/manifest.json")
                        ["Body"].read())  # fmt: skip
    assert stored["stages"]["sft"]["step"] == 2


def test_pull_with_no_consistent_checkpoint_drops_it_and_the_stage_starts_over(tmp_path):
    run = _run(tmp_path / "here")
    folder = _checkpoint(run, 4)
    _write(folder / "model.safetensors", b"x" * 3000)  # same size, other bytes: corrupt
    url = str(tmp_path / "store" / "demo")  # a plain local path
    push(run.path, url)
    result = pull(url, tmp_path / "there" / "demo")
    assert result.skipped[0][0] == "sft/checkpoints/checkpoint-4"
    assert "SHA-256" in result.skipped[0][1]
    assert result.repointed == {"sft": None}
    sft = Run.open(tmp_path / "there" / "demo").stage("sft")
    assert "checkpoint" not in sft["artifacts"] and sft["step"] == 0


def test_list_runs_and_pull_of_a_url_without_a_run(s3, bucket, tmp_path):
    root = f"s3://{bucket}/runs"
    for name in ("alpha", "beta"):
        run = _run(tmp_path, name)
        _checkpoint(run, 2)
        push(run.path, open_store(root).run_url(name))
    s3.client().put_object(Bucket=bucket, Key="runs/notes/readme.txt", Body=b"not a run")
    found = list_runs(root)
    assert [r["name"] for r in found] == ["alpha", "beta"]
    assert found[0]["url"] == f"{root}/alpha"
    assert found[0]["stages"]["sft"] == {"status": "running", "step": 2}
    assert found[0]["created_at"] and found[0]["updated_at"]
    assert [r["url"] for r in list_runs(f"{root}/beta")] == [f"{root}/beta"]
    assert list_runs(f"s3://{bucket}/nothing-here") == []
    with pytest.raises(StoreError, match="runs there: .*alpha.*beta") as e:
        pull(f"{root}/gamma", tmp_path / "gamma")
    assert f"no run at {root}/gamma" in str(e.value)


def test_a_first_push_to_a_url_holding_another_run_is_refused(tmp_path):
    url = (tmp_path / "store" / "demo").as_uri()
    push(_run(tmp_path / "a").path, url)
    other = Run.create(tmp_path / "b" / "demo", {"x": 2})
    other.data["created_at"] = "2000-01-01T00:00:00+00:00"
    (other.path / "manifest.json").write_text(json.dumps(other.data))
    with pytest.raises(StoreError, match="holds another run"):
        push(other.path, url)


def test_a_local_store_path_is_made_absolute_and_a_file_url_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store("stores/x/")
    assert store.url == str(tmp_path / "stores" / "x") and (tmp_path / "stores" / "x").is_dir()
    assert store.run_url("demo") == str(tmp_path / "stores" / "x" / "demo")
    run = _run(tmp_path / "runs")
    url = (tmp_path / "stores" / "y").as_uri() + "/demo"
    push(run.path, url)
    assert [r["name"] for r in list_runs((tmp_path / "stores" / "y").as_uri())] == ["demo"]
    pull(url, tmp_path / "again")
    assert _local_files(tmp_path / "again") == _local_files(run.path)


def test_an_unfinished_pull_goes_on_and_a_directory_with_other_files_is_refused(tmp_path):
    run = _run(tmp_path / "here")
    _checkpoint(run, 2)
    url = (tmp_path / "store" / "demo").as_uri()
    push(run.path, url)
    there = tmp_path / "there" / "demo"
    pull(url, there)
    # As if the pull had died before its last file and the manifest (written last).
    (there / "manifest.json").unlink()
    (there / "sft/checkpoints/checkpoint-2/model.safetensors").unlink()
    again = pull(url, there)
    assert again.files == 1 and again.skipped == []
    assert _local_files(there) == _local_files(run.path)
    other = tmp_path / "other"
    _write(other / "notes.txt", b"mine")
    with pytest.raises(ValueError, match="not empty"):
        pull(url, other)
