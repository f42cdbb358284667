"""SFT for real on the CPU: the tiny model trained by TRL's SFTTrainer in a run directory.

Full-parameter SFT with the tiny-cpu config (the loss must fall, the model must reload
and generate), LoRA SFT on `prepare` files (the adapter reloads with PeftModel), a
failure recorded in the manifest, and a resume after SIGKILL from the recorded checkpoint.
Where the examples come from (`data.sft_source`): prepare's files, the answers `tritonrl
distill --run` recorded, or the builtin suite.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict

import pytest
from typer.testing import CliRunner

from tritonrl.config_loader import load_config
from tritonrl.data.heldout import heldout_tasks
from tritonrl.data.kernelbook import task_record
from tritonrl.data.prompts import build_prompt, sft_example
from tritonrl.runs import ArtifactNotFound, Run, RunError
from tritonrl.tasks import load_builtin
from tritonrl.tasks.decontaminate import drop_matches, find_matches
from tritonrl.tasks.generator import generate_tasks
from tritonrl.tasks.loaders import HELDOUT_BUILTIN
from tritonrl.train.sft import load_sft_model, run_sft
from tritonrl.train.sft.data import (
    builtin_examples,
    read_examples,
    sft_data_files,
    split_rows,
    training_tasks,
    write_jsonl,
)

transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")
peft = pytest.importorskip("peft")
log = logging.getLogger(__name__)

# The tiny-cpu config, cut to a size that trains in well under a minute on 2 cores.
SMALL = ["--data.generated_tasks", "20", "--tiny_model.generated_tasks", "50"]


def _generate(model, tokenizer, n: int = 6) -> str:
    import torch

    task = load_builtin("level1/1_ReLU").tasks[0]
    inputs = tokenizer(
        build_prompt(task.source, tokenizer, include_example=False), return_tensors="pt"
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + n
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :])


@pytest.mark.slow  # trains a model
def test_full_parameter_sft_on_the_cpu(tmp_path, train_app):
    run_dir = tmp_path / "run"
    started = time.monotonic()
    args = ["sft", "--run", str(run_dir), "--sft.max_steps", "12", "--sft.eval_steps", "6", *SMALL]
    result = CliRunner().invoke(train_app, args)
    seconds = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert seconds < 150, f"SFT took {seconds:.0f}s"

    run = Run.open(run_dir)
    sft = run.stage("sft")
    assert sft["status"] == "done" and sft["step"] == 12 and sft["error"] is None
    assert run.stage("tiny_model")["status"] == "done"
    info = sft["info"]
    assert info["data_source"] == "builtin" and info["lora"] is False
    # the builtin suite and 20 generator tasks, less those equal to a held-out builtin task
    pool = load_builtin("all").tasks + generate_tasks(20, seed=0)
    n_tasks = len(drop_matches(pool, load_builtin("heldout").tasks)[0])
    assert info["train_examples"] + info["validation_examples"] == n_tasks
    history = json.loads(run.artifact("sft", "log_history").read_text())
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 12
    log.warning("SFT %.0fs, loss %.3f -> %.3f", seconds, losses[0], losses[-1])
    assert losses[-1] < losses[0] - 0.5, losses
    assert info["first_loss"] == losses[0] and info["last_loss"] == losses[-1]
    evals = [h for h in history if "eval_loss" in h]
    assert [h["step"] for h in evals] == [6, 12] and info["eval_loss"] == evals[-1]["eval_loss"]
    assert evals[-1]["eval_loss"] < losses[0]

    checkpoints = sorted(p.name for p in (run_dir / "sft/checkpoints").glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-10", "checkpoint-12"]  # every 2 steps, last 2 kept
    assert run.artifact("sft", "checkpoint") == run_dir / "sft/checkpoints/checkpoint-12"
    assert list(run.artifact("sft", "tensorboard").glob("events.out.tfevents.*"))
    assert not (run_dir / "sft/checkpoints/runs").exists()  # no stray default log dir

    # Our model card, not TRL's boilerplate ("fine-tuned version of [None]").
    model_dir = run.artifact("sft", "model")
    card = (model_dir / "README.md").read_text()
    assert "tritonrl" in card and "tiny from-scratch model" in card and "[None]" not in card
    assert "- steps: 12" in card and "full-parameter" in card
    assert "- data: builtin (" in card
    assert "- steps: 12" in (run_dir / "sft/checkpoints/checkpoint-12/README.md").read_text()
    assert not (run_dir / "sft/checkpoints/README.md").exists()
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run.artifact("sft", "tokenizer"))
    _generate(model, tokenizer)
    model, tokenizer = load_sft_model(run_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    _generate(model, tokenizer)

    again = CliRunner().invoke(train_app, args)
    assert again.exit_code == 2 and "already done" in again.output


def _prepare_stage(run: Run, n_train: int = 6, n_val: int = 2) -> None:
    """What `tritonrl prepare` records: prompt/completion JSONL files."""
    tasks = generate_tasks(n_train + n_val, seed=500)
    rows = [sft_example(t.source, t.solution, include_example=False) for t in tasks]
    run.start_stage("prepare")
    d = run.stage_dir("prepare")
    run.add_artifact("prepare", "train", write_jsonl(d / "train.jsonl", rows[:n_train]))
    run.add_artifact("prepare", "validation", write_jsonl(d / "validation.jsonl", rows[n_train:]))
    run.finish_stage("prepare")


@pytest.mark.slow  # trains a model
def test_lora_sft_on_prepared_examples(tmp_path):
    overrides = [
        "--lora.enabled",
        "true",
        "--sft.max_steps",
        "4",
        "--sft.learning_rate",
        "5e-3",
        "--run.report_to",
        "[none]",
        *SMALL,
    ]
    config = load_config(None, overrides)
    run = Run.create(tmp_path / "run", asdict(config))
    _prepare_stage(run)
    result = run_sft(config, run.path)
    assert result.lora and result.steps == 4

    run = Run.open(run.path)
    info = run.stage("sft")["info"]
    assert info["data_source"] == "prepare"
    assert (info["train_examples"], info["validation_examples"]) == (6, 2)
    assert not run.has_artifact("sft", "model") and not run.has_artifact("sft", "tensorboard")
    adapter = run.artifact("sft", "adapter")
    assert (adapter / "adapter_config.json").is_file()
    assert not (adapter / "model.safetensors").exists()  # the adapter only

    base = transformers.AutoModelForCausalLM.from_pretrained(run.artifact("tiny_model", "model"))
    model = peft.PeftModel.from_pretrained(base, adapter)
    trained = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert trained and any(p.abs().sum() > 0 for p in trained)  # B starts at zero
    tokenizer = transformers.AutoTokenizer.from_pretrained(run.artifact("sft", "tokenizer"))
    _generate(model, tokenizer)
    loaded, _ = load_sft_model(run)
    assert isinstance(loaded, peft.PeftModel)

    # Training longer continues the done stage from its last checkpoint.
    longer = run_sft(load_config(None, [*overrides, "--sft.max_steps", "6"]), run.path)
    assert longer.steps == 6 and longer.resumed_from == "sft/checkpoints/checkpoint-4"
    run = Run.open(run.path)
    sft = run.stage("sft")
    assert sft["status"] == "done" and sft["step"] == 6 and run.config["sft"]["max_steps"] == 6
    assert sft["info"]["resumed_from_checkpoint"] == "sft/checkpoints/checkpoint-4"
    history = json.loads(run.artifact("sft", "log_history").read_text())
    assert [h["step"] for h in history if "loss" in h] == [1, 2, 3, 4, 5, 6]
    assert run.artifact("sft", "checkpoint").name == "checkpoint-6"
    # Anything but a larger budget is still refused, with what differs.
    with pytest.raises(ValueError, match=r"different config; differing: sft.max_steps: 6 -> 5"):
        run_sft(load_config(None, [*overrides, "--sft.max_steps", "5"]), run.path)
    changed = [*overrides, "--sft.max_steps", "8", "--sft.learning_rate", "1e-3"]
    with pytest.raises(ValueError, match=r"differing: sft.learning_rate: 0.005 -> 0.001"):
        run_sft(load_config(None, changed), run.path)
    assert Run.open(run.path).stage("sft")["status"] == "done"


def test_missing_prepare_files_fail_the_stage_with_a_clear_error(tmp_path):
    config = load_config(None, ["--data.sft_source", "prepare"])
    with pytest.raises(ArtifactNotFound, match="no artifact prepare/train"):
        run_sft(config, tmp_path / "run")
    sft = Run.open(tmp_path / "run").stage("sft")
    assert sft["status"] == "failed" and "prepare/train" in sft["error"]
    assert not (tmp_path / "run" / "tiny_model").exists()  # failed before building models


KILLED = textwrap.dedent(
    """
    import sys
    from tritonrl.config_loader import load_config
    from tritonrl.train.sft import run_sft
    run_sft(load_config(None, sys.argv[2:]), sys.argv[1])
    """
)


@pytest.mark.slow  # trains a model
def test_resume_after_a_kill_continues_from_the_recorded_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["--sft.max_steps", "8", "--run.report_to", "[none]", *SMALL]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(run_dir), *overrides],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if Run.open(run_dir).has_artifact("sft", "checkpoint"):
                    break
            except RunError:
                pass
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    run = Run.open(run_dir)
    assert run.stage("sft")["status"] == "running"  # killed: nobody marked it
    checkpoint = run.stage("sft")["artifacts"]["checkpoint"]
    done_before = int(checkpoint.rsplit("-", 1)[1])
    assert done_before < 8

    result = run_sft(load_config(None, overrides), run_dir)
    assert result.steps == 8
    sft = Run.open(run_dir).stage("sft")
    assert sft["status"] == "done" and sft["info"]["resumed_from_checkpoint"] == checkpoint
    with pytest.raises(RunError):
        run_sft(load_config(None, overrides), run_dir)


def test_builtin_examples_split_and_files(tmp_path):
    config = load_config(None, ["--data.tasks", "builtin:level1", "--data.generated_tasks", "4",
                                "--data.decontaminate_against", "[]"])  # fmt: skip
    rows = builtin_examples(config)
    n_level1 = len(load_builtin("level1").tasks)
    assert len(rows) == n_level1 + 4
    assert all(r["completion"][0]["role"] == "assistant" for r in rows)
    train, val = split_rows(rows, 0.1, seed=0)
    assert len(val) == round(0.1 * len(rows)) and len(train) == len(rows) - len(val)
    assert {r["task_id"] for r in train}.isdisjoint({r["task_id"] for r in val})
    assert split_rows(rows, 0.1, seed=0) == (train, val)
    path = write_jsonl(tmp_path / "t.jsonl", train)
    assert read_examples(path) == [
        {"prompt": r["prompt"], "completion": r["completion"]} for r in train
    ]


def test_split_rows_keeps_a_group_on_one_side():
    rows = [{"task_id": f"t{i}"} for i in range(10)]
    groups = {"t0": "g", "t1": "g", "t2": "g", "t3": "h", "t4": "h"}
    for seed in range(10):
        train, val = split_rows(rows, 0.3, seed, groups)
        assert len(val) == 3 and len(train) == 7
        ids = {r["task_id"] for r in val}
        assert {"t0", "t1", "t2"} <= ids or not {"t0", "t1", "t2"} & ids
        assert {"t3", "t4"} <= ids or not {"t3", "t4"} & ids
    assert split_rows(rows, 0.3, 5) == split_rows(rows, 0.3, 5, {})  # no groups: as before


def test_the_sft_split_from_tasks_puts_no_copy_of_a_validation_task_in_training(tmp_path):
    config = load_config(None, ["--data.generated_tasks", "80",
                                "--data.validation_fraction", "0.25"])  # fmt: skip
    run = Run.create(tmp_path / "run", config)
    train, val, source = sft_data_files(run, config)
    assert source == "builtin"
    by_id = {t.id: t for t in training_tasks(config)}
    ids = [[json.loads(line)["task_id"] for line in f.read_text().splitlines()]
           for f in (train, val)]  # fmt: skip
    assert len(ids[1]) == round(len(by_id) * 0.25)
    tasks = [[by_id[i] for i in side] for side in ids]
    assert find_matches(tasks[0], tasks[1]) == []


def test_builtin_examples_leave_out_the_tasks_of_data_decontaminate_against(tmp_path, caplog):
    # A KernelBench-layout folder written here: a copy of the builtin Tanh task (renamed).
    tanh = load_builtin("level1/3_Tanh").tasks[0]
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    copy = "# a copy\n" + tanh.source.replace("batch_size", "rows")
    (tmp_path / "kb" / "level1" / "7_Tanh.py").write_text(copy)
    overrides = ["--data.tasks", "builtin:level1", "--data.generated_tasks", "0"]
    default = {r["task_id"] for r in builtin_examples(load_config(None, overrides))}
    held = {f"builtin:{i}" for i in HELDOUT_BUILTIN if i.startswith("level1/")}
    level1 = {t.id for t in load_builtin("level1").tasks}
    assert default == level1 - held  # the default: the held-out builtin tasks
    against = f"[{tmp_path / 'kb'}, builtin:heldout]"
    config = load_config(None, [*overrides, "--data.decontaminate_against", against])
    with caplog.at_level(logging.WARNING):
        rows = builtin_examples(config)
    assert {r["task_id"] for r in rows} == level1 - held - {tanh.id}
    assert f"{tanh.id} = level1/7_Tanh (program)" in caplog.text
    config = load_config(None, [*overrides, "--data.decontaminate_against", "[nowhere/kb]"])
    with pytest.raises(ValueError, match="data.decontaminate_against: nowhere/kb"):
        builtin_examples(config)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"bad.jsonl:2: not JSON"),
        ('{"prompt": []}', r"bad.jsonl:2: an SFT example needs 'prompt' and 'completion'"),
        (
            '{"prompt": [{"role": "user", "content": "q"}], "completion": "a"}',
            r"bad.jsonl:2: 'completion' must be a non-empty list",
        ),
        (
            '{"prompt": [{"role": "user", "content": "q"}], '
            '"completion": [{"role": "user", "content": "a"}]}',
            r"bad.jsonl:2: the completion must end with an assistant message",
        ),
    ],
)
def test_bad_example_files_name_the_line(tmp_path, line, message):
    relu = load_builtin("level1/1_ReLU").tasks[0]
    good = json.dumps(sft_example(relu.source, relu.solution))
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(ValueError, match=message):
        read_examples(path)


# --------------------------------------------------------------------------- distill

# the tasks the teacher of `distill_run` (tests/conftest.py) answered correctly, twice each
DISTILLED = ("builtin:level1/3_Tanh", "builtin:level1/5_LeakyReLU")


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _key(row: dict) -> tuple[str, str]:
    return row["task_id"], row["completion"][-1]["content"]


def test_sft_trains_on_the_answers_distill_recorded_in_the_run(distill_run, caplog):
    run = Run.open(distill_run)
    distilled = _jsonl(run.artifact("distill", "train"))
    assert sorted({r["task_id"] for r in distilled}) == sorted(DISTILLED)
    run.start_stage("sft")
    with caplog.at_level(logging.INFO, logger="tritonrl"):
        train, val, source = sft_data_files(run, load_config(None, []))  # auto
    assert source == "distill"
    train_rows, val_rows = _jsonl(train), _jsonl(val)
    # every distilled answer, split by task: both answers of one task on one side
    assert sorted(map(_key, train_rows + val_rows)) == sorted(map(_key, distilled))
    train_ids, val_ids = ({r["task_id"] for r in rows} for rows in (train_rows, val_rows))
    assert len(train_ids) == len(val_ids) == 1 and train_ids | val_ids == set(DISTILLED)
    assert read_examples(train) == [{"prompt": r["prompt"], "completion": r["completion"]}
                                    for r in train_rows]  # fmt: skip
    assert "SFT examples from distill/train.jsonl (distill): 2 train, 2 validation" in caplog.text
    assert "SFT trains on sft/data/train.jsonl (validation: sft/data/validation.jsonl)" in (
        caplog.text)  # fmt: skip
    run = Run.open(run.path)
    assert run.stage("sft")["info"]["data_source"] == "distill"
    # evaluation's held-out tasks are the ones SFT held out, loaded from distill/tasks
    assert [t.id for t in heldout_tasks(run, load_config(None, []))] == sorted(val_ids)
    # the same again (a resumed stage): the files already recorded
    assert sft_data_files(run, load_config(None, ["--data.sft_source", "distill"])) == (
        train, val, "distill")  # fmt: skip


def test_with_prepare_and_distill_recorded_auto_takes_prepare_and_says_so(distill_run, caplog):
    run = Run.open(distill_run)
    _prepare_stage(run)
    with caplog.at_level(logging.INFO, logger="tritonrl"):
        train, _, source = sft_data_files(run, load_config(None, []))
    assert (source, train) == ("prepare", run.artifact("prepare", "train"))
    assert "records both prepare's and distill's files" in caplog.text
    assert "distill/train.jsonl is left out (set data.sft_source distill" in caplog.text
    assert "SFT trains on prepare/train.jsonl (validation: prepare/validation.jsonl)" in (
        caplog.text)  # fmt: skip
    # data.sft_source distill takes the distilled answers instead
    train, _, source = sft_data_files(run, load_config(None, ["--data.sft_source", "distill"]))
    assert source == "distill" and {r["task_id"] for r in _jsonl(train)} <= set(DISTILLED)


def test_sft_source_distill_without_a_distill_file_is_one_clear_line(train_app, tmp_path):
    args = ["sft", "--run", str(tmp_path / "run"), "--data.sft_source", "distill"]
    result = CliRunner().invoke(train_app, args, terminal_width=300)
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == (
        f"error: data.sft_source is distill but run {tmp_path / 'run'} records no distill "
        f"file: run `tritonrl distill --run {tmp_path / 'run'} --endpoint URL --model NAME` "
        "first"
    )
    assert Run.open(tmp_path / "run").stage("sft")["status"] == "failed"
    assert not (tmp_path / "run" / "tiny_model").exists()  # failed before building models


def _old_distill(run: Run, ids: list[str]) -> None:
    """What `tritonrl distill --run` recorded before it wrote distill/tasks: train only."""
    tasks = [load_builtin(i).tasks[0] for i in ids]
    rows = [{**sft_example(t.source, t.solution), "task_id": t.id, "level": t.level,
             "variation": 0, "model": "teacher", "reward": 1.0} for t in tasks]  # fmt: skip
    run.start_stage("distill")
    path = write_jsonl(run.stage_dir("distill") / "train.jsonl", rows)
    run.add_artifact("distill", "train", path)
    run.finish_stage("distill")


def test_an_older_distill_without_its_task_list_loads_builtin_ids_as_specs(tmp_path):
    config = load_config(None, ["--data.validation_fraction", "0"])
    run = Run.create(tmp_path / "run", config)
    _old_distill(run, ["level1/3_Tanh", "level1/6_Softplus"])
    run.start_stage("sft")
    train, val, source = sft_data_files(run, config)
    assert source == "distill" and val is None
    assert {r["task_id"] for r in _jsonl(train)} == {
        "builtin:level1/3_Tanh", "builtin:level1/6_Softplus"}  # fmt: skip

    other = Run.create(tmp_path / "other", config)
    _old_distill(other, ["level1/3_Tanh"])
    rows = _jsonl(other.artifact("distill", "train"))
    rows[0]["task_id"] = "level1/3_Tanh"  # a folder's id: no task spec on its own
    write_jsonl(other.artifact("distill", "train"), rows)
    other.start_stage("sft")
    with pytest.raises(ValueError, match=r"records no distill/tasks and task id "
                       r"'level1/3_Tanh' .* is no task spec: distill again"):  # fmt: skip
        sft_data_files(other, config)


def test_distilled_rows_of_a_task_not_to_train_on_are_left_out(tmp_path):
    config = load_config(None, ["--data.validation_fraction", "0"])
    run = Run.create(tmp_path / "run", config)
    _old_distill(run, ["level1/1_ReLU", "level1/3_Tanh"])  # ReLU is held out by default
    d = run.stage_dir("distill")
    tasks = [load_builtin(i).tasks[0] for i in ("level1/1_ReLU", "level1/3_Tanh")]
    run.add_artifact(
        "distill", "tasks", write_jsonl(d / "tasks.jsonl", [task_record(t) for t in tasks])
    )
    run.start_stage("sft")
    train, _, _ = sft_data_files(run, config)
    assert [r["task_id"] for r in _jsonl(train)] == ["builtin:level1/3_Tanh"]


@pytest.mark.slow  # trains a model
def test_sft_run_trains_on_the_distilled_answers(distill_run, train_app, caplog):
    args = ["sft", "--run", str(distill_run), "--sft.max_steps", "2", *SMALL]
    with caplog.at_level(logging.INFO, logger="tritonrl"):
        result = CliRunner().invoke(train_app, args)
    assert result.exit_code == 0, result.output
    assert "SFT trains on sft/data/train.jsonl" in caplog.text
    info = Run.open(distill_run).stage("sft")["info"]
    assert info["data_source"] == "distill"
    assert (info["train_examples"], info["validation_examples"]) == (2, 2)
    card = (Run.open(distill_run).artifact("sft", "model") / "README.md").read_text()
    assert "- data: distill (2 train, 2 validation examples)" in card


def test_examples_longer_than_max_length_are_counted_as_the_trainer_tokenizes_them(tmp_path):
    """`long_examples` counts what TRL's SFTTrainer would cut at sft.max_length: the
    lengths it gives are those of the trainer's own tokenized dataset."""
    import datasets
    from trl import SFTConfig, SFTTrainer

    from tritonrl.config import TinyModelConfig
    from tritonrl.models.tiny import init_model, train_tokenizer
    from tritonrl.train.sft.data import long_examples

    tasks = generate_tasks(4, seed=7)
    rows = [sft_example(t.source, t.solution, include_example=False) for t in tasks]
    rows[1]["completion"][-1]["content"] += "\n# a long remark" * 200  # one much longer
    tokenizer = train_tokenizer(iter([t.source + t.solution for t in tasks]), vocab_size=512)
    small = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                            intermediate_size=64)  # fmt: skip
    model = init_model(tokenizer, small)

    args = SFTConfig(output_dir=str(tmp_path), max_length=None, use_cpu=True, report_to=[])
    trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer,
                         train_dataset=datasets.Dataset.from_list(rows))  # fmt: skip
    lengths = sorted(len(ids) for ids in trainer.train_dataset["input_ids"])
    assert lengths[-1] > 2 * lengths[-2]  # the long one
    assert long_examples(rows, tokenizer, lengths[-1]) == (0, lengths[-1])
    assert long_examples(rows, tokenizer, lengths[-1] - 1) == (1, lengths[-1])
    assert long_examples(rows, tokenizer, lengths[0] - 1) == (4, lengths[-1])
    assert long_examples(rows, tokenizer, lengths[1] - 1) == (3, lengths[-1])
