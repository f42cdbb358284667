"""The evaluation against a loopback OpenAI-compatible server (honest kernels for one
task, a torch cheat for another, prose for a third) through the real verifier pool;
resuming an interrupted eval; the sampling section in the requests and in what an
evaluation is (an older folder's record included); task sources; turns of feedback
against a server that learns from it, resumed mid-turn, and one turn as before."""

import json

import pytest
from eval_loopback import OTHERS, RELU, WRONG_RELU, Learner, Teacher

from tritonrl.config_loader import load_config
from tritonrl.evaluate.backends import ApiModel
from tritonrl.evaluate.identity import eval_identity
from tritonrl.evaluate.runner import eval_tasks, evaluate, finished
from tritonrl.runs import Run

CPU = ["--verify.device", "cpu"]


def test_an_api_model_is_measured_by_the_same_verifier(server, tmp_path):
    config = load_config(None, CPU)
    tasks = [RELU, *OTHERS]
    summary = evaluate(ApiModel("teacher", server), tasks, 2, tmp_path / "ev", config)
    o = summary["metrics"]["overall"]
    assert summary["model"] == f"openai:teacher@{server}"
    assert set(Teacher.calls) == {("/v1/chat/completions", "teacher")} and len(Teacher.calls) == 6
    assert (o["n"], o["tasks"]) == (6, 3)
    assert o["correct"] == pytest.approx(2 / 6)  # the honest task, twice
    assert o["pass@1"] == pytest.approx(1 / 3) and o["pass@2"] == pytest.approx(1 / 3)
    assert o["flagged"] == 2 and o["flags"].get("torch_compute") == 2  # the cheat, twice
    assert o["valid"] == pytest.approx(4 / 6)  # the prose has no code
    assert o["fast_1"] is None and o["fast_2"] is None  # nothing timed on the CPU
    assert any("null, not 0" in n for n in summary["notes"])
    assert any("count as 1.0" in n for n in summary["notes"])  # the noise rule
    rows = [json.loads(x) for x in (tmp_path / "ev/samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {"task", "level", "sample", "prompt", "completion", "verdict",
                               "reward"} <= set(rows[0])  # fmt: skip
    assert rows[0]["prompt"][-1]["role"] == "user"
    cheat = [r for r in rows if r["task"] == RELU.id]
    assert all(r["reward"] == 0.0 and "torch_compute" in r["verdict"]["flags"] for r in cheat)
    honest = [r for r in rows if r["task"] == OTHERS[0].id]
    assert all(r["verdict"]["correct"] and r["reward"] > 0 for r in honest)
    model = ApiModel("teacher", server)
    assert finished(tmp_path / "ev", eval_identity(model.identity, 2, config), tasks, 2) == summary


def test_an_interrupted_eval_continues_where_it_stopped(server, tmp_path):
    config = load_config(None, CPU)
    out, model = tmp_path / "ev", ApiModel("teacher", server)
    evaluate(model, [RELU, OTHERS[0]], 2, out, config)
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 4
    keep = [x for x in lines if json.loads(x)["task"] == RELU.id]
    cut = [x for x in lines if json.loads(x)["task"] == OTHERS[0].id][0]
    (out / "samples.jsonl").write_text("\n".join(keep) + "\n" + cut[:40])  # killed mid-line
    (out / "summary.json").unlink()
    assert finished(out, eval_identity(model.identity, 2, config), [RELU, OTHERS[0]], 2) is None
    Teacher.calls = []
    summary = evaluate(model, [RELU, OTHERS[0]], 2, out, config)
    assert len(Teacher.calls) == 2  # only the task with missing samples is asked again
    o = summary["metrics"]["overall"]
    assert o["n"] == 4 and o["correct"] == 0.5 and o["pass@1"] == 0.5
    with pytest.raises(ValueError, match="holds an evaluation of openai:teacher@.* this one is "
                       "of openai:other@"):  # fmt: skip
        evaluate(ApiModel("other", server), [RELU], 2, out, config)


def test_an_eval_interrupted_mid_verification_keeps_what_was_verified(server, tmp_path):
    """Ctrl-C after the second answer was written, the rest of the batch still being
    verified: those two rows are in samples.jsonl, and the rerun asks only the four
    (task, sample) pairs it lacks, writes each as it is verified (the progress moves
    one answer at a time) and counts every pair once."""
    config = load_config(None, CPU)
    out, model, tasks = tmp_path / "ev", ApiModel("teacher", server), [RELU, *OTHERS]
    seen: list[tuple[int, int]] = []

    def interrupt(done: int, total: int) -> None:
        seen.append((done, total))
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate(model, tasks, 2, out, config, progress=interrupt)
    assert seen == [(0, 6), (1, 6), (2, 6)]  # one batch of six: written as verified
    kept = (out / "samples.jsonl").read_text().splitlines()
    first = [json.loads(x) for x in kept]
    assert len(first) == 2 and all("stage" in r["verdict"] for r in first)
    assert not (out / "summary.json").exists()
    lacking: dict[str, int] = {t.id: 2 for t in tasks}
    for r in first:
        lacking[r["task"]] -= 1
    Teacher.calls, Teacher.bodies, seen[:] = [], [], []
    summary = evaluate(model, tasks, 2, out, config, progress=lambda *p: seen.append(p))
    asked = {t.id: sum(t.source.strip() in b["messages"][-1]["content"] for b in Teacher.bodies)
             for t in tasks}  # fmt: skip
    assert asked == lacking and len(Teacher.calls) == 4
    assert seen == [(n, 6) for n in range(2, 7)]
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert lines[:2] == kept and len(lines) == 6
    pairs = {(json.loads(x)["task"], json.loads(x)["sample"]) for x in lines}
    assert pairs == {(t.id, i) for t in tasks for i in range(2)}
    o = summary["metrics"]["overall"]
    assert (o["n"], o["tasks"]) == (6, 3) and o["correct"] == pytest.approx(2 / 6)
    assert finished(out, eval_identity(model.identity, 2, config), tasks, 2) == summary


def test_more_samples_ask_only_the_missing_ones_each_once(server, tmp_path):
    """From 2 samples to 3: one new answer a task, drawn as the first two were (at the
    temperature, not greedy as a lone answer is), and each (task, sample) once in the file
    (all were asked again and appended: 5 rows a task, the summary saying 3)."""
    config = load_config(None, CPU)
    out, model, tasks = tmp_path / "ev", ApiModel("teacher", server), [RELU, *OTHERS]
    evaluate(model, tasks, 2, out, config)
    Teacher.calls, Teacher.bodies = [], []
    summary = evaluate(model, tasks, 3, out, config)
    assert len(Teacher.calls) == 3
    assert {b["temperature"] for b in Teacher.bodies} == {config.sampling.temperature}
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    pairs = [(r["task"], r["sample"]) for r in rows]
    assert len(pairs) == len(set(pairs)) == 9 and {i for _, i in pairs} == {0, 1, 2}
    assert summary["metrics"]["overall"]["n"] == 9 and summary["samples"] == 3
    assert finished(out, eval_identity(model.identity, 3, config), tasks, 3) == summary
    Teacher.calls = []
    assert evaluate(model, tasks, 3, out, config)["metrics"] == summary["metrics"]
    assert Teacher.calls == []  # nothing missing: nothing asked


def test_tasks_from_generated_sources_levels_limits_and_a_run(lora_run):
    tasks = eval_tasks(["builtin:all", "gen:3:7"], levels=[1], limit=4)
    assert len(tasks) == 4 and all(t.level == 1 for t in tasks)
    gen = eval_tasks(["gen:3:7"])
    assert len(gen) == 3 and gen[0].id != eval_tasks(["gen:3:0"])[0].id  # another seed
    with pytest.raises(ValueError, match="no tasks"):
        eval_tasks(["builtin:level1"], levels=[4])
    held_out = eval_tasks([f"run:{lora_run}"])
    validation = Run.open(lora_run).artifact("sft", "validation_data").read_text()
    ids = {json.loads(x)["task_id"] for x in validation.splitlines() if x.strip()}
    assert held_out and {t.id for t in held_out} == ids
    trained = eval_tasks([f"run:{lora_run}".replace("run:", "train:")])
    train = Run.open(lora_run).artifact("sft", "train_data").read_text()
    train_ids = {json.loads(x)["task_id"] for x in train.splitlines() if x.strip()}
    assert trained and {t.id for t in trained} == train_ids and not train_ids & ids


def test_the_sampling_section_reaches_the_request_and_names_the_evaluation(server, tmp_path):
    """An API model is asked with the section's temperature, and top_p and top_k only
    where they narrow the distribution (a greedy lone answer: temperature 0 alone); an
    evaluation with other top_p or top_k is another evaluation, refused in its folder."""
    model, tasks = ApiModel("teacher", server), [RELU]
    evaluate(model, tasks, 2, tmp_path / "whole", load_config(None, CPU))
    assert [set(b) - {"model", "messages", "seed"} for b in Teacher.bodies] == [
        {"temperature", "max_tokens"}] * 2  # fmt: skip
    Teacher.bodies = []
    narrow = load_config(None, [*CPU, "--sampling.top_p", "0.9", "--sampling.top_k", "5",
                                "--sampling.temperature", "0.6"])  # fmt: skip
    summary = evaluate(model, tasks, 2, tmp_path / "narrow", narrow)
    assert {(b["temperature"], b["top_p"], b["top_k"]) for b in Teacher.bodies} == {(0.6, 0.9, 5)}
    assert summary["config"]["sampling"] == {"temperature": 0.6, "top_p": 0.9, "top_k": 5,
                                             "max_new_tokens": 64}  # fmt: skip
    Teacher.bodies = []
    evaluate(model, tasks, 1, tmp_path / "greedy", narrow)
    assert [(b["temperature"], "top_p" in b, "top_k" in b) for b in Teacher.bodies] == [
        (0.0, False, False)]  # fmt: skip
    refused = (
        r"holds an evaluation of .*temperature 0.6, top_p 0.9, top_k 5, 64 tokens\); "
        r"this one is of .*temperature 0.8, 64 tokens\)"
    )
    with pytest.raises(ValueError, match=refused):
        evaluate(model, tasks, 2, tmp_path / "narrow", load_config(None, CPU))


def test_a_folder_from_before_top_p_and_top_k_still_goes_on_and_compares(server, tmp_path,
                                                                          capsys):  # fmt: skip
    """eval.json and summary.json written when the temperature was the only sampling
    setting (`rl.temperature`; `max_completion_length` in the summary's config): the same
    evaluation at top_p 1 and top_k off goes on in it, another is refused naming both,
    and --compare names its sampling and token limit."""
    from tritonrl.evaluate.commands import compare

    config, model, out = load_config(None, CPU), ApiModel("teacher", server), tmp_path / "old"
    evaluate(model, [RELU], 2, out, config)
    for name in ("eval.json", "summary.json"):
        data = json.loads((out / name).read_text())
        for key in ("top_p", "top_k"):
            del data["generation"][key]
        if name == "summary.json":
            data["config"] = {"verify": data["config"]["verify"], "temperature": 0.8,
                              "max_completion_length": 64}  # fmt: skip
        (out / name).write_text(json.dumps(data))
    old = json.loads((out / "summary.json").read_text())
    assert finished(out, eval_identity(model.identity, 2, config), [RELU], 2) == old
    narrow = load_config(None, [*CPU, "--sampling.top_k", "5"])
    with pytest.raises(ValueError, match=r"temperature 0.8, 64 tokens\); this one is of .*"
                       r"temperature 0.8, top_k 5, 64 tokens\)"):  # fmt: skip
        evaluate(model, [RELU], 2, out, narrow)
    Teacher.calls = []
    more = evaluate(model, [RELU, OTHERS[0]], 2, out, config)  # one task more: asked alone
    assert len(Teacher.calls) == 2 and more["tasks"] == 2
    (out / "summary.json").write_text(json.dumps(old))
    compare([out], as_json=True)
    row = json.loads(capsys.readouterr().out)[str(out)]
    assert (row["sampling"], row["max tokens"]) == ("temperature 0.8", 64)


def test_turns_give_the_model_the_verdict_and_count_correct_by_turn(learner, tmp_path):
    """Three turns against a model that answers ReLU wrongly until it reads the feedback:
    correct@1 = 0, correct@2 = 1, and the conversation ends there (a correct answer the
    CPU cannot time asks for nothing more); turn 2's request holds turn 1's answer and
    the verifier's words on it; every row says its turn and its whole conversation."""
    config, model = load_config(None, CPU), ApiModel("learner", learner)
    summary = evaluate(model, [RELU], 1, tmp_path / "ev", config, turns=3)
    turns = summary["metrics"]["turns"]
    assert [turns[t]["correct"] for t in ("1", "2", "3")] == [0.0, 1.0, 1.0]
    assert [turns[t]["answered"] for t in ("1", "2", "3")] == [1, 1, 0]
    assert turns["2"]["fast_1"] is None and turns["2"]["best_speedup"] is None  # untimed
    assert summary["turns"] == 3 and summary["answers"] == 2
    assert summary["metrics"]["overall"]["correct"] == 1.0  # the conversation's best answer
    assert len(Learner.bodies) == 2
    first, second = (b["messages"] for b in Learner.bodies)
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[:2] == first and WRONG_RELU.strip() in second[2]["content"]
    said = second[3]["content"]
    assert said.startswith("Your answer was verified. Result: wrong output on input set `tiny`")
    assert "max abs error" in said and "OUTPUT CONTRACT" in said
    rows = [json.loads(x) for x in (tmp_path / "ev/samples.jsonl").read_text().splitlines()]
    assert [(r["turn"], r["verdict"]["correct"]) for r in rows] == [(1, False), (2, True)]
    assert rows[1]["prompt"] == second  # the conversation before the answer, as asked
    ident = json.loads((tmp_path / "ev/eval.json").read_text())
    assert ident["generation"]["turns"] == 3
    assert finished(tmp_path / "ev", eval_identity(model.identity, 1, config, 3), [RELU], 1,
                    3) == summary  # fmt: skip
    with pytest.raises(ValueError, match=r"this one is of openai:learner.* 64 tokens\)"):
        evaluate(model, [RELU], 1, tmp_path / "ev", config)  # one turn is another evaluation


def test_an_eval_cut_mid_turn_goes_on_from_the_turns_it_has(learner, tmp_path):
    """Killed after turn 1 was written and while turn 2 was (a cut line): the rerun asks
    only turn 2 of the conversation that goes on, none of the finished ones again. The
    progress moves an answer at a time through the turns too."""
    config, model = load_config(None, CPU), ApiModel("learner", learner)
    out, tasks, seen = tmp_path / "ev", [RELU, OTHERS[0]], []
    evaluate(model, tasks, 2, out, config, progress=lambda *p: seen.append(p), turns=3)
    assert len(Learner.bodies) == 6  # 4 first answers, 2 second ones for ReLU's samples
    assert seen == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4), (5, 6), (6, 6)]
    lines = (out / "samples.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert sorted((r["task"] == RELU.id, r["turn"]) for r in rows) == [
        (False, 1), (False, 1), (True, 1), (True, 1), (True, 2), (True, 2)]  # fmt: skip
    kept = [x for x, r in zip(lines, rows, strict=True) if r["turn"] == 1]
    cut = next(x for x, r in zip(lines, rows, strict=True) if r["turn"] == 2)
    second = next(x for x, r in zip(lines, rows, strict=True) if r["turn"] == 2 and x != cut)
    (out / "samples.jsonl").write_text("\n".join([*kept, second]) + "\n" + cut[:60])
    (out / "summary.json").unlink()
    ident = eval_identity(model.identity, 2, config, 3)
    assert finished(out, ident, tasks, 2, 3) is None
    Learner.bodies = []
    summary = evaluate(model, tasks, 2, out, config, turns=3)
    assert len(Learner.bodies) == 1 and len(Learner.bodies[0]["messages"]) == 4
    turns = summary["metrics"]["turns"]
    assert [turns[t]["correct"] for t in ("1", "2", "3")] == [0.5, 1.0, 1.0]
    assert summary["metrics"]["overall"]["pass@1"] == 1.0
    assert finished(out, ident, tasks, 2, 3) == summary


def test_one_turn_writes_what_it_wrote_before_turns(server, tmp_path):
    """turns=1 (the default): no `turn` in the rows, no turns in eval.json or the summary."""
    config = load_config(None, CPU)
    summary = evaluate(ApiModel("teacher", server), [RELU], 1, tmp_path / "ev", config)
    row = json.loads((tmp_path / "ev/samples.jsonl").read_text().splitlines()[0])
    assert list(row) == ["model", "task", "level", "sample", "prompt", "completion",
                         "truncated", "verdict", "reward"]  # fmt: skip
    assert "turns" not in json.loads((tmp_path / "ev/eval.json").read_text())["generation"]
    assert "turns" not in summary and "turns" not in summary["metrics"]
    with pytest.raises(ValueError, match="turns must be 1 or more"):
        evaluate(ApiModel("teacher", server), [RELU], 1, tmp_path / "ev", config, turns=0)
