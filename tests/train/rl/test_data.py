"""RL's prompts are the ones SFT trained on (a distilled run's too, their tasks loaded from
distill/tasks) and leave out the tasks of `data.decontaminate_against`, whatever SFT trained
on: a run whose config gained a benchmark after SFT does not train on it; with
`rl.pass_rates`, also the tasks the starting policy never or always solved. Fresh
generator tasks (`rl.generated_tasks`) join them, never one the run holds out, as many as
asked (a draw left out is replaced by a later seed's, within a bound). The
settings line the stage logs first names the filter, the reward's wall clock and the
retirement."""

import json

import pytest

from tritonrl.config_loader import config_to_dict, load_config
from tritonrl.data.prompts import sft_example
from tritonrl.runs import Run
from tritonrl.tasks import families, load_builtin
from tritonrl.tasks.decontaminate import Decontaminator
from tritonrl.tasks.generator import generate_tasks
from tritonrl.train.rl import check_against_run, settings_line
from tritonrl.train.rl.data import fresh_tasks, rl_prompts
from tritonrl.train.sft.data import sft_data_files, write_jsonl

pytest.importorskip("datasets")

IDS = ("level1/1_ReLU", "level1/3_Tanh", "level1/5_LeakyReLU", "level2/1_Gemm_Bias_ReLU")
BASE = ["--data.tasks", "builtin:all", "--data.generated_tasks", "0"]


@pytest.fixture
def run(tmp_path) -> Run:
    """A run whose SFT trained on four builtin tasks, two of them held out by default."""
    run = Run.open_or_create(tmp_path / "run")
    tasks = [load_builtin(i).tasks[0] for i in IDS]
    rows = [{"task_id": t.id, **sft_example(t.source, t.solution)} for t in tasks]
    run.start_stage("sft")
    path = write_jsonl(run.stage_dir("sft") / "train.jsonl", rows + rows[:1])
    run.add_artifact("sft", "train_data", path)
    return run


def test_rl_prompts_drop_the_tasks_equal_to_a_task_not_to_train_on(run, tmp_path):
    prompts, tasks, source = rl_prompts(run, load_config(None, BASE))
    assert source == "builtin"
    assert sorted(tasks) == ["builtin:level1/3_Tanh", "builtin:level1/5_LeakyReLU"]
    assert sorted(prompts["task_id"]) == sorted(tasks)

    prompts, tasks, _ = rl_prompts(run, load_config(None, [*BASE, "--data.decontaminate_against",
                                                           "[]"]))  # fmt: skip
    assert len(prompts) == 5 and len(tasks) == 4  # nothing left out: every row stays

    # A benchmark folder written here holding a copy of the Tanh task.
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    tanh = load_builtin("level1/3_Tanh").tasks[0]
    (tmp_path / "kb" / "level1" / "9_Tanh.py").write_text(tanh.source)
    against = f"[builtin:heldout, {tmp_path / 'kb'}]"
    config = load_config(None, [*BASE, "--data.decontaminate_against", against])
    assert sorted(rl_prompts(run, config)[1]) == ["builtin:level1/5_LeakyReLU"]


def test_rl_prompts_of_a_distilled_run_are_the_rows_sft_trained_on(distill_run):
    run = Run.open(distill_run)
    run.start_stage("sft")
    config = load_config(None, BASE)
    train, _, _ = sft_data_files(run, config)
    trained = [json.loads(line) for line in train.read_text().splitlines()]
    prompts, tasks, source = rl_prompts(run, config)
    assert source == "distill"
    assert list(prompts["task_id"]) == [r["task_id"] for r in trained]
    assert list(prompts["prompt"]) == [r["prompt"] for r in trained]
    (task,) = tasks.values()  # loaded from distill/tasks: the reward verifies against it
    assert task.id == trained[0]["task_id"] and task.solution
    assert task.source == load_builtin(task.id.removeprefix("builtin:")).tasks[0].source
    # a prepare recorded after SFT trained changes nothing: RL follows what SFT recorded
    prepared = run.stage_dir("prepare") / "train.jsonl"
    write_jsonl(prepared, [{"task_id": "x", **sft_example(task.source, task.solution)}])
    run.add_artifact("prepare", "train", prepared)
    assert rl_prompts(Run.open(run.path), config)[2] == "distill"


def test_rl_prompts_refuse_when_every_task_is_one_not_to_train_on(run):
    config = load_config(None, [*BASE, "--data.decontaminate_against", "[builtin:all]"])
    with pytest.raises(ValueError, match="every prompt's task equals a task of"):
        rl_prompts(run, config)


def test_rl_may_change_what_it_is_decontaminated_against_and_nothing_else_of_data(tmp_path):
    recorded = config_to_dict(load_config(None, BASE))
    for key in ("decontaminate_against", "decontaminate_form"):  # a run from before them
        del recorded["data"][key]
    run = Run.create(tmp_path / "old", recorded)
    against = f"[builtin:heldout, {tmp_path / 'kb'}]"
    check_against_run(run, load_config(None, [*BASE, "--data.decontaminate_against", against]))
    with pytest.raises(ValueError, match=r"differing: data.generated_tasks: 0 -> 3"):
        check_against_run(run, load_config(None, [*BASE, "--data.generated_tasks", "3"]))


def _answer(task: str, sample: int, correct: bool, **extra) -> str:
    verdict = {"correct": correct, "compiled": True, "error": None if correct else "wrong"}
    return json.dumps({"task": f"builtin:{task}", "sample": sample, "verdict": verdict,
                       "completion": "...", **extra})  # fmt: skip


def test_the_pass_rate_filter_keeps_the_tasks_solved_sometimes(run, tmp_path):
    """An eval folder of the SFT model on the training tasks: ReLU 0 of 2, Tanh 1 of 2
    (a second turn and a line written twice do not count), LeakyReLU 2 of 2 (then a line
    cut by a kill), the Gemm task not asked. Only Tanh is kept, and the run says why."""
    folder = tmp_path / "passrates"
    folder.mkdir()
    lines = [
        _answer("level1/1_ReLU", 0, False), _answer("level1/1_ReLU", 1, False),
        _answer("level1/3_Tanh", 0, True), _answer("level1/3_Tanh", 0, False),
        _answer("level1/3_Tanh", 1, False), _answer("level1/3_Tanh", 1, True, turn=2),
        _answer("level1/5_LeakyReLU", 0, True), _answer("level1/5_LeakyReLU", 1, True),
        _answer("level1/1_ReLU", 0, True)[:40],
    ]  # fmt: skip
    (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
    every = [*BASE, "--data.decontaminate_against", "[]"]
    config = load_config(None, [*every, "--rl.pass_rates", str(folder)])
    prompts, tasks, _ = rl_prompts(run, config)
    assert sorted(tasks) == ["builtin:level1/3_Tanh"] and list(prompts["task_id"]) == [
        "builtin:level1/3_Tanh"]  # fmt: skip
    info = Run.open(run.path).stage("rl")["info"]["pass_rate_filter"]
    assert (info["tasks"], info["kept"], info["below_min"], info["above_max"],
            info["not_in_file"]) == (4, 1, 1, 1, 1)  # fmt: skip

    # the samples.jsonl itself does as well; a wider range keeps the always-solved too
    wide = [*every, "--rl.pass_rates", str(folder / "samples.jsonl"), "--rl.pass_rate_max", "1"]
    assert sorted(rl_prompts(run, load_config(None, wide))[1]) == [
        "builtin:level1/3_Tanh", "builtin:level1/5_LeakyReLU"]  # fmt: skip

    # a later attempt without the filter trains on every task, and the run no longer
    # says a filter chose them
    assert len(rl_prompts(run, load_config(None, every))[1]) == 4
    assert Run.open(run.path).stage("rl")["info"]["pass_rate_filter"] is None


def test_the_pass_rate_filter_refuses_what_it_cannot_use(run, tmp_path):
    every = [*BASE, "--data.decontaminate_against", "[]"]
    with pytest.raises(ValueError, match=r"no samples.jsonl there; write one with `tritonrl "
                       r"eval --model RUN/sft/final --tasks train:RUN"):  # fmt: skip
        rl_prompts(run, load_config(None, [*every, "--rl.pass_rates", str(tmp_path / "none")]))
    file = tmp_path / "samples.jsonl"
    file.write_text(_answer("level1/3_Tanh", 0, True) + "\n" + json.dumps({"task": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"line 2 is not an eval answer"):
        rl_prompts(run, load_config(None, [*every, "--rl.pass_rates", str(file)]))
    file.write_text(_answer("level1/3_Tanh", 0, True) + "\n")  # solved every time: none kept
    with pytest.raises(ValueError, match=r"no training task's pass rate lies within "
                       r"\[0.01, 0.99\] \(0 below, 1 above\)"):  # fmt: skip
        rl_prompts(run, load_config(None, [*every, "--rl.pass_rates", str(file)]))
    file.write_text(_answer("level9/other", 0, True) + "\n")
    with pytest.raises(ValueError, match=r"none of the run's 4 training tasks is in it"):
        rl_prompts(run, load_config(None, [*every, "--rl.pass_rates", str(file)]))
    with pytest.raises(ValueError, match=r"rl.pass_rate_min and rl.pass_rate_max must"):
        load_config(None, ["--rl.pass_rate_min", "0.8", "--rl.pass_rate_max", "0.5"])


def _fresh_run(run, tmp_path):
    """The run of `run` holding out one of four generator tasks from seed 1000 (its SFT
    validation row), a benchmark folder with a copy of another; the config that asks RL
    for those four as fresh tasks."""
    fresh = generate_tasks(4, seed=1000)
    held = fresh[1]
    val = [{"task_id": held.id, **sft_example(held.source, held.solution)}]
    run.add_artifact("sft", "validation_data",
                     write_jsonl(run.stage_dir("sft") / "validation.jsonl", val))  # fmt: skip
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "7_Copy.py").write_text(fresh[2].source)
    args = ["--data.tasks", "builtin:all", "--data.generated_tasks", "2",
            "--data.generator_seed", "1000", "--data.decontaminate_against",
            f"[builtin:heldout, {tmp_path / 'kb'}]", "--rl.generated_tasks", "4",
            "--rl.generator_seed", "1000"]  # fmt: skip
    return fresh, args


def test_fresh_generator_tasks_join_the_prompts_but_never_a_held_out_one(run, tmp_path):
    fresh, args = _fresh_run(run, tmp_path)
    config = load_config(None, args)
    prompts, tasks, _ = rl_prompts(run, config)
    ids = {t.id for t in fresh}
    got = sorted(i for i in tasks if i in ids)
    assert fresh[1].id not in got  # the run holds it out: RL never trains on it
    assert fresh[2].id not in got  # equal to a task of data.decontaminate_against
    assert fresh[0].id in got and fresh[3].id in got
    assert "builtin:level1/3_Tanh" in tasks  # the SFT tasks stay
    kw = {"include_example": config.data.include_example, "policy": config.verify.policy,
          "allowed_torch_ops": config.verify.allowed_torch_ops or None}  # fmt: skip
    row = next(r for r in prompts if r["task_id"] == fresh[3].id)
    assert row["prompt"] == sft_example(fresh[3].source, fresh[3].solution, **kw)["prompt"]

    # none unless asked; the default seed starts past those SFT's generator tasks use
    assert not set(rl_prompts(run, load_config(None, args[:-4]))[1]) & ids
    later = load_config(None, args[:-2])  # rl.generated_tasks 4, the seed left null
    assert not set(rl_prompts(run, later)[1]) & ids
    with pytest.raises(ValueError, match=r"rl.generated_tasks must be >= 0"):
        load_config(None, ["--rl.generated_tasks", "-1"])


def test_fresh_tasks_left_out_are_replaced_until_n_distinct(run, tmp_path, caplog):
    """Two of the first four seeds' tasks are left out (one held out, one a benchmark's
    copy): later seeds fill their places, so RL gets the four it asked for, distinct, none
    equal to a task it must not train on, and the same four on every call."""
    fresh, args = _fresh_run(run, tmp_path)
    config = load_config(None, args)
    training = {t: load_builtin(t.removeprefix("builtin:")).tasks[0]
                for t in rl_prompts(run, load_config(None, args[:-4]))[1]}  # fmt: skip
    with caplog.at_level("WARNING"):
        got = fresh_tasks(run, config, training)
    assert len(got) == 4 and len({t.source for t in got}) == 4
    assert got[:2] == [fresh[0], fresh[3]]  # the first seeds' kept, in seed order
    excluded = [fresh[1], fresh[2], *load_builtin("heldout").tasks]
    never = Decontaminator(excluded, config.data.decontaminate_form)
    assert not [m for t in got for m in never.matches(t)]
    assert not {t.id for t in got} & set(training)
    assert "dropped" in caplog.text and "of the 4 asked" not in caplog.text
    assert [t.id for t in fresh_tasks(run, config, training)] == [t.id for t in got]
    # the prompts hold them all
    assert {t.id for t in got} <= set(rl_prompts(run, config)[1])


def test_fresh_tasks_settle_for_fewer_after_ten_draws_each_and_say_so(run, tmp_path, caplog):
    """Every seed's task is a training task's copy: after 10 x N more seeds RL goes on
    with what it found (none) and the warning says how many of how many."""
    fresh, args = _fresh_run(run, tmp_path)
    config = load_config(None, [*args[:-4], "--rl.generated_tasks", "2",
                                "--rl.generator_seed", "1000"])  # fmt: skip
    training = {t.id: t for t in generate_tasks(40, seed=1000)}  # seeds 1000 to 1021 at least
    with caplog.at_level("WARNING"):
        assert fresh_tasks(run, config, training) == []
    assert "0 fresh tasks (generator) of the 2 asked: draws 1000 to 1021" in caplog.text


def test_fresh_family_tasks_come_from_the_training_split_of_the_named_families(run, tmp_path):
    """`rl.fresh_source families:NAMES`: N distinct family tasks, the named families in
    turn, none of a held-out signature, none equal to a held-out or benchmark task, the
    same on every call; the prompts hold them. An unknown family is named at once."""
    fresh, args = _fresh_run(run, tmp_path)
    kb = tmp_path / "kb" / "level1"
    (kb / "8_Family.py").write_text(families.family_task("norms", 100_000).source)
    config = load_config(None, [*args[:-4], "--rl.generated_tasks", "6",
                                "--rl.fresh_source", "families:norms,softmax"])  # fmt: skip
    got = fresh_tasks(run, config, {})
    assert len(got) == 6 and len({t.source for t in got}) == 6
    names = [t.id.split(":")[1] for t in got]
    assert set(names) == {"norms", "softmax"}
    # in turn from seed 100000: norms' first is the benchmark's copy, left out
    assert [t.id for t in got[:3]] == ["fam:softmax:100000", "fam:norms:100001",
                                       "fam:softmax:100001"]  # fmt: skip
    assert all(not families.is_heldout(families.signature(t.id)) for t in got)
    assert [t.id for t in fresh_tasks(run, config, {})] == [t.id for t in got]
    assert {t.id for t in got} <= set(rl_prompts(run, config)[1])
    everything = load_config(None, [*args[:-4], "--rl.generated_tasks", "3",
                                    "--rl.fresh_source", "families"])  # fmt: skip
    assert len(fresh_tasks(run, everything, {})) == 3
    unknown = load_config(None, [*args[:-4], "--rl.generated_tasks", "3",
                                 "--rl.fresh_source", "families:norms,convs"])  # fmt: skip
    with pytest.raises(ValueError, match=r"unknown task families \['convs'\]; the families"):
        fresh_tasks(run, unknown, {})
    with pytest.raises(ValueError, match=r"rl.fresh_source must be generator, families or"):
        load_config(None, ["--rl.fresh_source", "kernelbook"])


def test_the_pass_rate_filter_filters_the_fresh_tasks_it_names_and_keeps_the_rest(
    run, tmp_path
):  # fmt: skip
    fresh, args = _fresh_run(run, tmp_path)
    rows = [_answer("level1/3_Tanh", 0, True), _answer("level1/3_Tanh", 1, False)]
    rows += [json.dumps({"task": fresh[0].id, "sample": i, "completion": "...",
                         "verdict": {"correct": True}}) for i in range(2)]  # fmt: skip
    (tmp_path / "samples.jsonl").write_text("\n".join(rows) + "\n")
    config = load_config(None, [*args, "--rl.pass_rates", str(tmp_path / "samples.jsonl")])
    prompts, tasks, _ = rl_prompts(run, config)
    # fresh[0] was solved 2 of 2; the two later seeds' tasks that replace fresh[1] and
    # fresh[2] (left out) are not in the file: kept
    later = [t.id for t in generate_tasks(6, seed=1000)[4:]]
    assert sorted(tasks) == sorted(["builtin:level1/3_Tanh", fresh[3].id, *later])
    info = Run.open(run.path).stage("rl")["info"]["pass_rate_filter"]
    assert (info["fresh"], info["fresh_unmeasured"], info["above_max"]) == (4, 3, 1)


def test_the_settings_line_names_the_reward_clock_timing_retirement_and_filter(tmp_path):
    line = settings_line(load_config("tiny-cpu", []))
    assert "reward staged with a 120s wall clock per candidate (verify.timeout_s)" in line
    assert "curriculum on (no retirement)" in line and "no pass-rate filter" in line
    assert "timed in 50-500 trials to an RSE of 0.01 within 20s" in line  # verify's
    chosen = ["--rl.verify_timeout_s", "10", "--curriculum.retire_after", "2",
              "--rl.pass_rates", str(tmp_path / "rates"), "--rl.pass_rate_max", "0.5",
              "--rl.timing_trials", "20", "--rl.timing_max_trials", "60"]  # fmt: skip
    line = settings_line(load_config("tiny-cpu", chosen))
    assert "a 10s wall clock per candidate (rl.verify_timeout_s)" in line
    assert "timed in 20-60 trials" in line
    assert "curriculum on (retire_after 2)" in line and "fresh generator" not in line
    both = ["--curriculum.retire_after", "16", "--curriculum.retire_unsolved_after", "8",
            "--rl.generated_tasks", "400"]  # fmt: skip
    fresh = settings_line(load_config("tiny-cpu", both))
    assert "curriculum on (retire_after 16, retire_unsolved_after 8)" in fresh
    assert "400 fresh generator tasks (rl.generated_tasks)" in fresh
    assert f"pass-rate filter {tmp_path / 'rates'} [0.01, 0.5]" in line
    off = settings_line(load_config("tiny-cpu", ["--curriculum.enabled", "false"]))
    assert "curriculum off" in off
    served = settings_line(load_config("tiny-cpu", ["--verify.endpoint", "http://127.0.0.1:9"]))
    assert ("reward staged, verified by the service at http://127.0.0.1:9 (verify.endpoint) "
            "under its own verify settings") in served  # fmt: skip
    assert "wall clock" not in served  # this process's verify settings do not apply
