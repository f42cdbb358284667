"""`tritonrl eval` on the command line: the tiny LoRA run on builtin tasks (2 samples),
a second run into the finished folder, another model or other settings refused there, an
API model's eval, --compare's table and JSON of both, and --turns."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from tritonrl.cli import app
from tritonrl.runs import Run

CPU = ["--verify.device", "cpu", "--sampling.max_new_tokens", "16"]


def _eval(*args: str):
    return CliRunner().invoke(app, ["eval", *args, *CPU], terminal_width=200)


@pytest.fixture(scope="module")
def evals(lora_run, tmp_path_factory):
    """(the run's eval folder, the first CLI result)."""
    out = tmp_path_factory.mktemp("evals") / "run"
    r = _eval("--model", str(lora_run), "--tasks", "builtin:level1", "--limit", "2",
              "--samples", "2", "--out", str(out))  # fmt: skip
    return out, r


def test_the_tiny_run_on_two_builtin_tasks(evals):
    out, r = evals
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["model"], summary["tasks"], summary["samples"]) == ("run/sft", 2, 2)
    o = summary["metrics"]["overall"]
    assert o["n"] == 4 and set(summary["metrics"]["levels"]) == {"1"}
    assert {"pass@1", "pass@2", "valid", "compiled", "correct", "flags"} <= set(o)
    assert o["fast_1"] is None and summary["versions"] and summary["config"]["verify"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(isinstance(row["truncated"], bool) for row in rows)
    assert summary["truncated"] == sum(row["truncated"] for row in rows)
    assert "eval of run/sft: 2 tasks x 2" in r.output and "note: " in r.output
    assert "Loading weights" not in r.output  # transformers' bar: eval's is the one shown


def test_compare_names_one_model_one_way_and_two_models_two_ways():
    """`final` and `final` named two models; `pipeline/rl` and `final` one (a run's eval
    and its rl/final's)."""
    from tritonrl.evaluate.commands import _model_labels

    def ev(name: str, path: str | None = None) -> dict:
        return {"model": name, "model_path": path, "fingerprint": path and "f"}

    runs = [ev("final", "/r/sft/final"), ev("final", "/r/rl/final"), ev("pipeline/rl",
            "/r/rl/final")]  # fmt: skip
    assert _model_labels(runs) == ["sft/final", "rl/final", "rl/final"]
    assert _model_labels([ev("run/sft", "/r/sft/final"), ev("openai:x@u")]) == [
        "run/sft", "openai:x@u"]  # fmt: skip
    a, b = "/w/runs/a/sft/final", "/w/runs/b/sft/final"
    assert _model_labels([ev("final", a), ev("final", b)]) == ["a/sft/final", "b/sft/final"]


def test_a_second_run_into_a_finished_folder_says_so(evals, lora_run):
    out, _ = evals
    before = (out / "samples.jsonl").read_text()
    r = _eval("--model", str(lora_run), "--tasks", "builtin:level1", "--limit", "2",
              "--samples", "2", "--out", str(out))  # fmt: skip
    assert r.exit_code == 0 and "already holds this finished evaluation" in r.output
    assert (out / "samples.jsonl").read_text() == before
    r = _eval("--model", "openai:x@http://127.0.0.1:9/v1", "--tasks", "builtin:level1",
              "--out", str(out))  # fmt: skip
    assert r.exit_code == 2 and "holds an evaluation of " in r.output
    assert "sft/final (files " in r.output and "openai:x@http://127.0.0.1:9/v1" in r.output


def _one(model, out, *more: str):
    return _eval("--model", str(model), "--tasks", "builtin:level1/1_ReLU", "--out", str(out),
                 *more)  # fmt: skip


def _refusal(r) -> str:
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: ") and "another --out" in line
    return line


def test_another_model_or_other_settings_are_refused_not_mixed_in(lora_run, tmp_path):
    """The run's SFT adapter (run/sft/final) and its base copied to base/final: both are
    `final`. Another model into a finished folder got "already holds this finished
    evaluation" and the first one's numbers; with more --samples its answers were mixed
    in. Now each is refused in one line naming both, before a model is loaded (so is the
    same files at another path, as an RL stage that changed no weight leaves them, and a
    model retrained in place), and --compare tells the two apart by path."""
    run = Run.open(lora_run)
    adapter = run.artifact("sft", "adapter")
    base = tmp_path / "base" / "final"
    shutil.copytree(run.artifact("tiny_model", "model"), base)
    assert adapter.name == base.name == "final"
    out = tmp_path / "evals" / "sft"
    assert _one(adapter, out).exit_code == 0
    before = (out / "samples.jsonl").read_text()
    line = _refusal(_one(base, out))
    assert "holds an evaluation of " in line and "this one is of " in line
    assert "sft/final (files " in line and "base/final (files " in line
    _refusal(_one(base, out, "--samples", "2"))
    shorter = CliRunner().invoke(app, ["eval", "--model", str(adapter), "--tasks",
                                       "builtin:level1/1_ReLU", "--out", str(out),
                                       "--max-tokens", "8", "--verify.device", "cpu"])  # fmt: skip
    assert "16 tokens); this one is of " in _refusal(shorter) and "8 tokens)" in shorter.output
    assert "greedy" in _refusal(_one(adapter, out, "--samples", "2"))
    assert (out / "samples.jsonl").read_text() == before  # nothing mixed in

    copy = tmp_path / "copy" / "final"
    shutil.copytree(adapter, copy)
    assert "(the same files at another path)" in _refusal(_one(copy, out))
    r = _one(adapter, out)
    assert r.exit_code == 0 and "already holds this finished evaluation" in r.output
    assert _one(copy, tmp_path / "evals" / "copy").exit_code == 0
    weights = copy / "adapter_model.safetensors"
    from safetensors.torch import load_file, save_file

    save_file({k: v + 0.01 for k, v in load_file(weights).items()}, weights)  # trained on
    line = _refusal(_one(copy, tmp_path / "evals" / "copy"))
    assert line.endswith("(its files have changed since): give another --out, never one "
                         "folder for both")  # fmt: skip

    other = tmp_path / "evals" / "base"
    assert _one(base, other).exit_code == 0
    r = CliRunner().invoke(app, ["eval", "--compare", str(out), str(other)], terminal_width=250)
    cells = [[c.strip() for c in x.replace("┃", "│").split("│")[1:-1]]
             for x in r.output.splitlines()]  # fmt: skip
    table = {c[0]: c[1:] for c in cells if c}
    assert table["model"] == ["sft/final", "base/final"]
    assert table["metric"] == ["sft", "base"] and table["sampling"] == ["greedy", "greedy"]


def test_an_out_that_is_a_file_is_refused_before_any_work(lora_run, tmp_path):
    """`--out FILE` loaded the model, then ended in a FileExistsError traceback."""
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    r = _one(lora_run, file)
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"error: --out {file} is a file, not a folder: give a folder "
                                "for samples.jsonl and summary.json")  # fmt: skip
    r = _one(lora_run, file / "eval")
    assert r.exit_code == 2 and f"{file} is a file, so no folder can be made there" in r.output
    assert file.read_text() == "mine"


def test_compare_puts_evaluations_side_by_side(evals, server, tmp_path):
    out, _ = evals
    api = tmp_path / "api"
    r = _eval("--model", f"openai:teacher@{server}", "--tasks", "builtin:level1/1_ReLU",
              "--samples", "2", "--out", str(api))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "2 flagged" in r.output  # the cheat, twice
    r = CliRunner().invoke(app, ["eval", "--compare", str(out), str(api)], terminal_width=250)
    assert r.exit_code == 0, r.output
    cells = [[c.strip() for c in x.split("│")[1:-1]] for x in r.output.splitlines()]
    table = {c[0]: c[1:] for c in cells if c}
    assert table["answers (n)"] == ["4", "2"] and table["flagged"] == ["0", "2"]
    assert table["tasks"] == ["2", "1"] and table["samples per task"] == ["2", "2"]
    assert "asked different tasks (run: 2, api: 1;" in r.output  # not the same questions
    assert table["model"][0] == "run/sft" and table["model"][1].startswith("openai:teacher@")
    same = CliRunner().invoke(app, ["eval", "--compare", str(out), str(out)], terminal_width=250)
    assert same.exit_code == 0 and "different tasks" not in same.output
    assert table["flag torch_compute"] == ["0", "2"]  # by category
    assert "pass@2" in table and "correct" in table and table["fast_1"] == ["-", "-"]
    assert "run/sft" in r.output and "openai:teacher" in r.output
    r = CliRunner().invoke(app, ["eval", "--compare", str(out), str(api), "--json"])
    rows = json.loads(r.output)
    assert rows[str(api)]["flags"] == {"no_triton_kernel": 2, "torch_compute": 2}
    assert rows[str(out)]["n"] == 4 and rows[str(out)]["correct L1"] == 0.0
    r = CliRunner().invoke(app, ["eval", "--compare", str(tmp_path)])
    assert r.exit_code == 2 and "no summary.json" in r.output


def test_an_api_model_gets_room_to_answer_and_cut_answers_are_counted(server, tmp_path):
    """The config's completion length is its own model's (64 tokens in tiny-cpu): an
    openai: model gets API_MAX_TOKENS unless --max-tokens says otherwise, and answers the
    server cut at the limit (finish_reason "length") are marked, counted and warned of."""
    from eval_loopback import Teacher

    from tritonrl.evaluate.commands import API_MAX_TOKENS

    Teacher.chars_per_token = 4  # this server honours max_tokens
    args = ["eval", "--model", f"openai:teacher@{server}", "--tasks", "builtin:level1/1_ReLU",
            "--verify.device", "cpu"]  # fmt: skip
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "room")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert [b["max_tokens"] for b in Teacher.bodies] == [API_MAX_TOKENS]
    summary = json.loads((tmp_path / "room" / "summary.json").read_text())
    assert summary["truncated"] == 0 and "token limit" not in r.output
    assert summary["config"]["sampling"]["max_new_tokens"] == API_MAX_TOKENS
    assert summary["metrics"]["overall"]["flagged"] == 1  # the whole cheat came back

    out = tmp_path / "cut"
    r = CliRunner().invoke(app, [*args, "--max-tokens", "8", "--out", str(out)],
                           terminal_width=200)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert Teacher.bodies[-1]["max_tokens"] == 8
    (row,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert row["truncated"] and len(row["completion"]) == 32
    assert json.loads((out / "summary.json").read_text())["truncated"] == 1
    assert "1 of 1 answers stopped at the token limit (8 new tokens)" in r.output
    assert "--max-tokens (eval) or --sampling.max_new_tokens (pipeline" in r.output
    r = CliRunner().invoke(app, [*args, "--max-tokens", "8", "--sampling.max_new_tokens", "9",
                                 "--out", str(tmp_path / "both")])  # fmt: skip
    assert r.exit_code == 2 and "give one of them" in r.output


def test_turns_on_the_command_line_count_correct_by_turn(learner, tmp_path):
    """`eval --turns 3` against a server that answers ReLU wrongly until it has read the
    verifier's feedback: correct@1 0, correct@2 1, said per turn; the second request held
    the feedback; the finished folder says so; --compare gives the turns and correct@t."""
    from eval_loopback import Learner

    args = ["eval", "--model", f"openai:learner@{learner}", "--tasks", "builtin:level1/1_ReLU",
            "--verify.device", "cpu", "--turns", "3", "--out", str(tmp_path / "t3")]  # fmt: skip
    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "t3" / "summary.json").read_text())
    assert summary["metrics"]["turns"]["1"]["correct"] == 0.0
    assert summary["metrics"]["turns"]["2"]["correct"] == 1.0
    assert "turn 1: asked 1, correct@1 0.000" in r.output
    assert "turn 2: asked 1, correct@2 1.000" in r.output
    assert summary["metrics"]["turns"]["2"]["repeated"] == 0.0  # it acted on the feedback
    assert "repeated 0.000" in r.output
    assert len(Learner.bodies) == 2
    feedback = Learner.bodies[1]["messages"][-1]
    assert feedback["role"] == "user" and "wrong output on input set" in feedback["content"]
    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 0 and "already holds this finished evaluation" in r.output
    assert len(Learner.bodies) == 2
    r = CliRunner().invoke(app, ["eval", "--compare", str(tmp_path / "t3"), "--json"])
    row = json.loads(r.output)[str(tmp_path / "t3")]
    assert (row["turns"], row["correct@1"], row["correct@2"], row["correct@3"]) == (3, 0, 1, 1)


def test_a_run_and_its_models_folder_are_one_model(lora_run):
    """`--model RUN` and `--model RUN/sft/final` load the same files: one identity (the
    run's tokenizer folder, its model's, was hashed twice, and the two were refused as
    one model whose files had changed)."""
    from tritonrl.evaluate.backends import model_identity

    by_run = model_identity(str(lora_run))
    by_folder = model_identity(str(Run.open(lora_run).artifact("sft", "adapter")))
    assert by_run["path"] == by_folder["path"] and by_run["name"] != by_folder["name"]
    assert by_run["fingerprint"] == by_folder["fingerprint"]


def test_a_device_that_is_not_here_is_one_line_before_any_work(lora_run, tmp_path):
    """`--device cuda` without CUDA ended in torch's 60-line traceback."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for device, said in (("cuda", "torch sees no CUDA device here"),
                         ("tpu", "--device must be auto, cpu or cuda")):  # fmt: skip
        r = CliRunner().invoke(app, ["eval", "--model", str(lora_run), "--tasks",
                                     "builtin:level1/1_ReLU", "--out", str(tmp_path / device),
                                     "--device", device])  # fmt: skip
        assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output
        assert not (tmp_path / device / "samples.jsonl").exists()


def test_an_endpoint_in_the_config_verifies_there_not_here(server, tmp_path):
    """`verify.endpoint` was read by the RL reward alone: eval verified locally beside it.
    With no `tritonrl serve` at the endpoint, eval stops naming it before the model is
    asked anything (the preflight), and so with a running service that refuses the token."""
    import socket

    from eval_loopback import Teacher

    from tritonrl.config import VerifyConfig
    from tritonrl.verify.pool.pool import VerifierPool
    from tritonrl.verify.service import VerifyService

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    args = ["eval", "--model", f"openai:teacher@{server}", "--tasks", "builtin:level1/1_ReLU",
            "--verify.device", "cpu", "--out", str(tmp_path / "e")]  # fmt: skip
    r = CliRunner().invoke(app, [*args, "--verify.endpoint", dead])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert f"{dead}/health: connection refused" in r.output and "tritonrl serve" in r.output
    assert Teacher.calls == []  # stopped before the model answered
    assert not (tmp_path / "e" / "summary.json").exists()

    (tmp_path / "token").write_text("not the server's")
    with VerifyService(VerifierPool(VerifyConfig(device="cpu"), 1), token="the server's") as sv:
        token = ["--verify.endpoint_token_file", str(tmp_path / "token")]
        r = CliRunner().invoke(app, [*args, "--verify.endpoint", sv.address, *token])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert f"{sv.address}/health: 401 bad token" in " ".join(r.output.split())
    assert Teacher.calls == []
