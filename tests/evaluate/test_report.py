"""The report: Markdown and PNGs whose numbers are the files' (a run's manifest and log
histories, an eval folder's summary and samples with real verdicts)."""

import json
import struct

import pytest

from tritonrl.config import VerifyConfig
from tritonrl.evaluate.report import funnel_counts, load_source, write_report
from tritonrl.runs import Run
from tritonrl.tasks import load_builtin
from tritonrl.verify import verify

pytest.importorskip("matplotlib")
RELU = load_builtin("level1/1_ReLU").tasks[0]
CHEAT = ("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.relu(x)\n")  # fmt: skip


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def verdicts():
    config = VerifyConfig(device="cpu")
    good = verify(RELU, RELU.solution, config).to_dict()
    bad = verify(RELU, RELU.solution.replace("tl.maximum(x, 0.0)", "tl.abs(x)"), config).to_dict()
    cheat = verify(RELU, CHEAT, config).to_dict()
    junk = verify(RELU, "no code here", config).to_dict()
    assert good["correct"] and not bad["correct"] and cheat["flags"] and junk["stage"] == "extract"
    return good, bad, cheat, junk


def _run(tmp_path, verdicts):
    run = Run.create(tmp_path / "run", config={"rl": {"algo": "grpo"}})
    for stage in ("sft", "rl"):
        run.start_stage(stage)
        run.set_step(stage, 2)
        run.finish_stage(stage)
    sft = [{"loss": 3.0, "step": 1}, {"loss": 2.5, "step": 2}, {"eval_loss": 2.7, "step": 2}]
    rl = [{"reward": 0.1, "verify/correct": 0.0, "curriculum/level2_share": 0.1, "step": s}
          for s in (1, 2)]  # fmt: skip
    run.stage_dir("sft"), run.stage_dir("rl")  # created on first use
    (run.path / "sft" / "log_history.json").write_text(json.dumps(sft))
    run.add_artifact("sft", "log_history", run.path / "sft" / "log_history.json")
    (run.path / "rl" / "log_history.json").write_text(json.dumps(rl))
    good, bad, cheat, junk = verdicts
    rows = [{"step": 0, **v} for v in (good, bad, cheat, junk, junk)]
    (run.path / "rl" / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _eval_dir(path, verdicts, model, correct_rate):
    path.mkdir(parents=True)
    good, bad, cheat, _ = verdicts
    samples = [{"task": RELU.id, "level": 1, "sample": i, "completion": "...", "verdict": v,
                "reward": 0.0} for i, v in enumerate((good, bad, cheat))]  # fmt: skip
    (path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    overall = {"n": 3, "valid": 1.0, "compiled": 2 / 3, "correct": correct_rate, "fast_1": None,
               "fast_2": None, "geomean_speedup": None, "pass@1": correct_rate}  # fmt: skip
    summary = {"model": model, "metrics": {"overall": overall,
               "levels": {"1": {**overall}}}, "notes": ["fast_p: not timed (CPU)"]}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_the_funnel_counts_the_stages_each_candidate_reached(verdicts):
    good, bad, cheat, junk = verdicts
    counts = funnel_counts([good, bad, cheat, junk])
    # good: done; bad: failed correctness; cheat: stopped at static; junk: at extract
    assert counts == {"extract": 4, "static": 3, "compile": 2, "correctness": 2,
                      "performance": 1, "correct": 1}  # fmt: skip


def test_a_run_report_has_its_stages_curves_funnel_and_config(tmp_path, verdicts):
    run = _run(tmp_path, verdicts)
    path = write_report([run.path])
    assert path == run.path / "report" / "report.md"
    text = path.read_text()
    assert "| sft | done | 2 |" in text and "| rl | done | 2 |" in text
    assert "RL completions verified: 5." in text
    assert "| 5 | 3 | 2 | 2 | 1 | 1 |" in text  # the funnel, from completions.jsonl
    assert "algo: grpo" in text  # the recorded config
    assert "ran with" not in text  # rl recorded nothing of its own
    # rl continued with other settings than SFT recorded: the report names each difference
    run.set_info("rl", config={"rl": {"algo": "grpo", "max_steps": 4, "turns": 2}})
    text = write_report([run.path]).read_text()
    assert "rl ran with, where it differs from the config above:" in text
    assert "- `rl.max_steps: None -> 4`" in text and "- `rl.turns: None -> 2`" in text
    assert "rl.algo" not in text
    assert f"relative to the run directory `{run.path}`" in text
    assert "- sft log_history: `sft/log_history.json`" in text  # as the manifest names it
    for png in ("run_sft_loss.png", "run_rl_reward.png", "run_rl_funnel.png"):
        assert f"]({png})" in text
        width, height = _png_size(path.parent / png)
        assert width > 300 and height > 200


def test_a_run_report_says_what_rl_kept_retired_and_waited(tmp_path, verdicts):
    run = _run(tmp_path, verdicts)
    assert "tasks retired" not in write_report([run.path]).read_text()  # none recorded
    config = {"rl": {"verify_timeout_s": 10.0, "timing_trials": 20, "timing_max_trials": 60,
                     "timing_target_rse": 0.03, "timing_max_seconds": None},
              "curriculum": {"retire_after": 2, "retire_unsolved_after": 4}}  # fmt: skip
    kept = {"file": "runs/x/pass_rates", "tasks": 144, "kept": 40, "below_min": 90,
            "above_max": 14, "not_in_file": 0, "range": [0.01, 0.99]}  # fmt: skip
    run.set_info("rl", config=config, pass_rate_filter=kept)
    history = json.loads((run.path / "rl" / "log_history.json").read_text())
    history[-1]["curriculum/retired"] = 3.0
    history[-1]["curriculum/retired_unsolved"] = 1.0
    for i, h in enumerate(history):  # new level-1 tasks at every step, level 2 at none
        h["curriculum/unseen_level1_correct"] = [0.25, 0.5, 0.75, 1.0][i % 4]
        h["curriculum/unseen_level2_correct"] = -1.0
    (run.path / "rl" / "log_history.json").write_text(json.dumps(history))
    rates = [h["curriculum/unseen_level1_correct"] for h in history if "step" in h]
    text = write_report([run.path]).read_text()
    assert (
        "- prompts: the pass-rate filter (`runs/x/pass_rates`) kept 40 of 144 tasks "
        "within [0.01, 0.99]; 90 below, 14 above, 0 not in the file"
    ) in text
    assert "- reward wall clock: 10 s a candidate (`rl.verify_timeout_s`)" in text
    assert "- reward timing: trials 20, max_trials 60, target_rse 0.03 (`rl.timing_*`" in text
    assert ("- tasks retired: 3, 2 solved (`curriculum.retire_after` 2: the last 2 answers "
            "all correct); 1 unsolved (`curriculum.retire_unsolved_after` 4: the last 4 all "
            "wrong)") in text  # fmt: skip
    first, last = rates[:5], rates[-5:]
    assert (f"level 1 {100 * sum(first) / len(first):.0f}% -> "
            f"{100 * sum(last) / len(last):.0f}%") in text  # fmt: skip
    assert "level 2+" not in text  # no step drew a new level-2 task


def test_several_evaluations_side_by_side(tmp_path, verdicts):
    a = _eval_dir(tmp_path / "base", verdicts, "base-model", 0.0)
    b = _eval_dir(tmp_path / "rl", verdicts, "rl-model", 1 / 3)
    path = write_report([a, b], tmp_path / "out")
    text = path.read_text()
    assert "| base (base-model) | 3 | 1 | 0.667 | 0 | - | - | - | pass@1 0 |" in text
    assert "| rl (rl-model) | 3 | 1 | 0.667 | 0.333 | - | - | - | pass@1 0.333 |" in text
    assert "fast_p: not timed (CPU)" in text
    assert "](eval_funnel.png)" in text and "](correct_by_level.png)" in text
    assert "No speedup distribution: 2 correct samples but none was timed" in text
    _png_size(tmp_path / "out" / "correct_by_level.png")


def test_a_folder_that_is_neither_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="neither a run directory"):
        load_source(tmp_path)
    with pytest.raises(ValueError, match="at least one"):
        write_report([])


def test_an_out_that_is_a_file_is_one_line_naming_it(tmp_path, verdicts):
    """`report --out FILE` printed a raw errno ("[Errno 17] File exists")."""
    from typer.testing import CliRunner

    from tritonrl.cli import app

    a = _eval_dir(tmp_path / "base", verdicts, "base-model", 0.0)
    file = tmp_path / "report.md"
    file.write_text("mine")
    r = CliRunner().invoke(app, ["report", str(a), "--out", str(file)], terminal_width=300)
    assert r.exit_code == 2 and r.output.strip() == (
        f"error: --out {file} is a file, not a folder: give a folder for report.md and its plots"
    )
    assert file.read_text() == "mine" and not (a / "report").exists()


def test_the_report_says_what_a_plot_would_hide(tmp_path, verdicts):
    """Every rate 0 drew an empty correct-by-level plot (its y axis -0.04 to 0.04); a
    reward and a correct rate both 0 drew one line hidden under the other; two steps got
    ticks 1.0, 1.2 ... 2.0; answers cut at the token limit were counted in summary.json
    but not mentioned in the report."""
    a = _eval_dir(tmp_path / "base", verdicts, "base-model", 0.0)
    summary = json.loads((a / "summary.json").read_text())
    summary |= {"truncated": 2, "config": {"max_completion_length": 64}}
    (a / "summary.json").write_text(json.dumps(summary))
    text = write_report([a], tmp_path / "out").read_text()
    assert "No correct kernel at any level: every verified-correct rate is 0" in text
    assert not (tmp_path / "out" / "correct_by_level.png").exists()
    assert "- base (base-model): 2 of 3 answers stopped at the token limit (64 new tokens)" in text
    # the same from a summary of today's: the limit is its generation's (sampling.max_new_tokens)
    summary |= {"generation": {"greedy": False, "temperature": 0.8, "top_p": 1.0, "top_k": 0,
                               "max_tokens": 32},
                "config": {"sampling": {"max_new_tokens": 32}}}  # fmt: skip
    (a / "summary.json").write_text(json.dumps(summary))
    text = write_report([a], tmp_path / "out").read_text()
    assert "- base (base-model): 2 of 3 answers stopped at the token limit (32 new tokens)" in text

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tritonrl.evaluate.report import _series, line_figure

    rl = [{"reward": 0.0, "verify/correct": 0.0, "step": s} for s in (1, 2)]
    curves = {"reward": _series(rl, "reward"), "correct": _series(rl, "verify/correct")}
    fig = line_figure(plt, "RL", curves, "value")
    ax = fig.axes[0]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    styles = [(line.get_marker(), line.get_linestyle()) for line in ax.get_lines()]
    assert len(styles) == len(set(styles)) == 2  # both show where they are equal
    plt.close(fig)


def test_a_multi_turn_evaluation_gets_its_turns_table_and_plot(tmp_path, verdicts):
    path = _eval_dir(tmp_path / "t3", verdicts, "m", 1 / 3)
    summary = json.loads((path / "summary.json").read_text())
    summary["turns"] = 3
    summary["metrics"]["turns"] = {
        "1": {"answered": 3, "correct": 0.0, "fast_1": None, "best_speedup": None},
        "2": {"answered": 3, "correct": 1 / 3, "fast_1": None, "best_speedup": None},
        "3": {"answered": 2, "correct": 1 / 3, "fast_1": None, "best_speedup": None}}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    text = write_report([path], tmp_path / "out").read_text()
    assert "### By turn" in text
    assert "| t3 (m) | 1 | 3 | 0 | - | - |" in text and "| t3 (m) | 2 | 3 | 0.333 | - | - |" in text
    assert "](correct_by_turn.png)" in text
    _png_size(tmp_path / "out" / "correct_by_turn.png")
    one = _eval_dir(tmp_path / "t1", verdicts, "m", 1 / 3)
    assert "By turn" not in write_report([one], tmp_path / "out1").read_text()
