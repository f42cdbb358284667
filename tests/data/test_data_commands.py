"""`tritonrl prepare` as a user runs it (`tritonrl.data.commands`; `distill` is in
test_distill.py): a real subprocess, real exit codes."""

import json

from cli_process import tritonrl


def test_prepare_writes_the_prompts_eval_and_rl_build_for_the_config(tmp_path):
    # data.include_example decides the one-shot example for every stage of a run: SFT's
    # prompts from prepare must be the ones eval asks with (tiny-cpu: no example).
    from tritonrl.data.prompts import build_messages
    from tritonrl.tasks import load_builtin

    for flag, with_example in ((), False), (("--data.include_example", "true"), True):
        out = tmp_path / f"p{int(with_example)}"
        r = tritonrl("prepare", "--source", "builtin", "--out", str(out),
                     "--data.max_samples", "3", *flag)  # fmt: skip
        assert r.returncode == 0, r.stderr
        rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
        task = {t.id: t for t in load_builtin("all").tasks}[rows[0]["task_id"]]
        assert rows[0]["prompt"] == build_messages(task.source, include_example=with_example)


def test_prepare_takes_the_validation_fraction_from_the_config(tmp_path):
    def prepare(out: str, *args: str) -> dict:
        r = tritonrl("prepare", "--source", "builtin", "--out", str(tmp_path / out),
                     "--json", *args)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    # The embedded default (tiny-cpu): data.validation_fraction 0.1, as SFT splits.
    summary = prepare("default", "--data.max_samples", "20")
    assert (summary["val_fraction"], summary["kept"], summary["validation"]) == (0.1, 20, 2)
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  validation_fraction: 0.25\n  max_samples: 20\n")
    summary = prepare("file", "--config", str(config))
    assert (summary["val_fraction"], summary["kept"], summary["validation"]) == (0.25, 20, 5)
    summary = prepare("flag", "--config", str(config), "--val-fraction", "0.5")
    assert (summary["val_fraction"], summary["validation"]) == (0.5, 10)
    r = tritonrl("prepare", "--source", "builtin", "--out", str(tmp_path / "x"),
                 "--val-fraction", "0.2", "--data.validation_fraction", "0.3")  # fmt: skip
    assert r.returncode == 2 and "--val-fraction is short for" in r.stderr


def test_prepare_help_names_every_source_in_its_summary():
    # The summary said "KernelBook (or the builtin tasks)": `--source families` was missing.
    from typer.testing import CliRunner

    from tritonrl.cli import app

    r = CliRunner().invoke(app, ["prepare", "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    summary = " ".join(r.output.split("The share held out")[0].split())
    for source in ("KernelBook", "PATH", "builtin tasks", "task families"):
        assert source in summary, (source, summary)
    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "task families into SFT files and a task list" in listed  # one line, wide
