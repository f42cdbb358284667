"""Tests for `tritonrl.data.kernelbook` and `tritonrl.data.convert`: the fixture in
KernelBook's schema through real `datasets`, row conversion (the converted references
really run), de-duplication, the split, the summary, max-samples, errors, the builtin
source, the LLM labeller against a loopback server, and the `prepare` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from tritonrl.data.commands import register
from tritonrl.data.convert import code_key, convert_row, rename
from tritonrl.data.kernelbook import (
    KernelBookError,
    load_prepared_tasks,
    load_rows,
    prepare,
    split_ids,
)
from tritonrl.extract import extract_code, normalise_code
from tritonrl.tasks import families, load_builtin
from tritonrl.tasks.decontaminate import find_matches
from tritonrl.tasks.loaders import HELDOUT_BUILTIN
from tritonrl.tasks.shapes import instantiate

FIXTURE = Path(__file__).parent / "fixtures" / "kernelbook_fixture.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
COLUMNS = {"python_code", "triton_code", "entry_point", "module_name", "repo_name"}
COLUMNS |= {"synthetic", "uuid", "licenses"}
# What the fixture holds: 18 convertible rows, 3 duplicates, 8 broken rows (one per reason).
EXPECTED_DROPS = {
    "duplicate": 3,
    "reference_syntax_error": 1,
    "no_entry_class": 1,
    "no_get_inputs": 1,
    "no_new_class": 1,
    "solution_syntax_error": 1,
    "init_inputs_unsupported": 1,
    "missing_code": 1,
    "name_clash": 1,
}


def row(entry: str) -> dict:
    return next(r for r in ROWS if r["entry_point"] == entry)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The fixture prepared once with a validation share big enough to see both splits."""
    base = tmp_path_factory.mktemp("prepared")
    summary = prepare(
        str(FIXTURE), base / "out", val_fraction=0.2, seed=3, cache_dir=str(base / "hf")
    )
    return summary, base / "out"


# --------------------------------------------------------------------------- the fixture


def test_fixture_loads_through_datasets_with_kernelbook_columns(tmp_path):
    rows = load_rows(str(FIXTURE), cache_dir=str(tmp_path))
    assert set(rows.column_names) >= COLUMNS
    assert len(rows) == len(ROWS) == 29
    assert sum(r["synthetic"] for r in ROWS) == 3
    assert all("def get_inputs" in r["python_code"] for r in ROWS if r["entry_point"] != "NoInputs")


# --------------------------------------------------------------------------- conversion


def test_kwargs_become_positional_in_signature_order_with_defaults_between():
    task, _ = convert_row(row("ScaledTanh"))
    # __init__(self, dim, eps=1e-05, scale=1.0, bias=0.0) with {'dim': 4, 'scale': 2.0}
    assert "return [4, 1e-05, 2.0]" in task.source
    model = instantiate(task).model()
    assert (model.dim, model.eps, model.scale, model.bias) == (4, 1e-05, 2.0, 0.0)


def test_synthetic_rows_keep_the_locals_their_init_inputs_use():
    task, _ = convert_row(row("SynthModel_Gemm_Sigmoid_Scaling"))
    assert "in_features = 10\n    out_features = 20\n" in task.source
    assert "return [in_features, out_features, 0.5]" in task.source
    model = instantiate(task).model()
    assert model.gemm.weight.shape == (20, 10) and model.scaling_factor == 0.5


def test_classes_are_renamed_everywhere_and_task_helpers_leave_the_solution():
    task, example = convert_row(row("HardSwishBlock"))
    assert "class Model(nn.Module)" in task.source and "super(Model, self)" in task.source
    assert "HardSwishBlock" not in task.source
    assert "def hard_swish" in task.source and "class Activation" in task.source
    assert "class ModelNew(nn.Module)" in task.solution
    assert "super(ModelNew, self)" in task.solution and "HardSwishBlockNew" not in task.solution
    assert "def get_inputs" not in task.solution and "def get_init_inputs" not in task.solution
    assert task.id == task.origin == f"kernelbook:{row('HardSwishBlock')['uuid']}"
    assert extract_code(example["completion"][0]["content"]) == normalise_code(task.solution)


def test_rename_leaves_attributes_strings_and_comments_alone():
    source = (
        "class Swish(nn.Module):  # Swish stays in this comment\n"
        "    def __init__(self):\n"
        "        super(Swish, self).__init__()\n"
        "        self.Swish = 'Swish'\n"
        "        é = Swish\n"
    )
    renamed = rename(source, "Swish", "Model")
    assert renamed == (
        "class Model(nn.Module):  # Swish stays in this comment\n"
        "    def __init__(self):\n"
        "        super(Model, self).__init__()\n"
        "        self.Swish = 'Swish'\n"
        "        é = Model\n"
    )


def test_every_converted_reference_runs_on_the_cpu(prepared):
    _, out = prepared
    tasks = load_prepared_tasks(out / "tasks.jsonl")
    assert len(tasks) == 18
    for task in tasks:
        inst = instantiate(task)
        with torch.no_grad():
            result = inst.model(seed=0)(*inst.inputs(seed=0))
        assert isinstance(result, torch.Tensor), task.name


def test_sft_rows_hold_the_prompt_and_a_solution_that_extracts_exactly(prepared):
    _, out = prepared
    solutions = {t["id"]: t["solution"] for t in read_jsonl(out / "tasks.jsonl")}
    sources = {t["id"]: t["source"] for t in read_jsonl(out / "tasks.jsonl")}
    for split in ("train", "validation"):
        for r in read_jsonl(out / f"{split}.jsonl"):
            assert set(r) == {"prompt", "completion", "task_id", "level"}
            assert [m["role"] for m in r["prompt"]] == ["system", "user"]
            assert sources[r["task_id"]].strip() in r["prompt"][1]["content"]
            assert r["completion"][0]["role"] == "assistant"
            code = extract_code(r["completion"][0]["content"])
            assert code == normalise_code(solutions[r["task_id"]])


# --------------------------------------------------------------------------- summary, dedup, split


def test_summary_counts_every_row_and_reason(prepared):
    summary, out = prepared
    assert summary.rows_read == 29
    assert summary.dropped == EXPECTED_DROPS
    assert summary.kept == 18 == summary.train + summary.validation
    assert summary.validation == round(18 * 0.2)
    assert sum(summary.by_level.values()) == 18 and set(summary.by_level) <= {"1", "2", "3"}
    assert summary.by_level["3"] >= 1  # the residual MLP
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary.to_dict()))
    assert on_disk["drop_examples"]["init_inputs_unsupported"][0].endswith(
        "init keyword(s) ['temperature'] match no positional parameter of OddKwargs.__init__"
    )
    assert len(read_jsonl(out / "train.jsonl")) == summary.train
    assert len(read_jsonl(out / "validation.jsonl")) == summary.validation


def test_duplicates_differing_only_in_formatting_and_comments_are_dropped(prepared):
    _, out = prepared
    names = [t["name"] for t in read_jsonl(out / "tasks.jsonl")]
    assert len(names) == len(set(names))  # Swish, LinearReLU once each; SiLUAct (a Swish) gone
    assert "SiLUAct" not in names or "Swish" not in names
    a = convert_row(row("Swish"))[0].source
    b = convert_row(row("SiLUAct"))[0].source
    assert a != b and code_key(a) == code_key(b)
    assert code_key(a) != code_key(convert_row(row("Mish"))[0].source)


def test_split_is_deterministic_and_independent_of_row_order(prepared, tmp_path):
    summary, out = prepared
    again = prepare(
        str(FIXTURE), tmp_path / "again", val_fraction=0.2, seed=3, cache_dir=str(tmp_path)
    )
    for name in ("train.jsonl", "validation.jsonl", "tasks.jsonl"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()
    assert again.to_dict() | {"out_dir": "", "files": {}} == summary.to_dict() | {
        "out_dir": "",
        "files": {},
    }
    ids = [f"kernelbook:{i}" for i in range(40)]
    assert split_ids(ids, 0.25, seed=1) == split_ids(ids[::-1], 0.25, seed=1)
    assert len(split_ids(ids, 0.25, seed=1)) == 10
    assert split_ids(ids, 0.25, seed=1) != split_ids(ids, 0.25, seed=2)
    assert split_ids(ids[:1], 0.5, seed=0) == set() and split_ids(ids, 0.0, seed=0) == set()
    tasks = read_jsonl(out / "tasks.jsonl")
    val = {r["task_id"] for r in read_jsonl(out / "validation.jsonl")}
    assert {t["id"] for t in tasks if t["split"] == "validation"} == val
    assert val == split_ids([t["id"] for t in tasks], 0.2, seed=3)


def test_ids_of_one_group_land_in_one_split():
    ids = [f"t{i}" for i in range(20)]
    groups = {i: "same" for i in ids[:6]} | {"t6": "pair", "t7": "pair"}
    val = split_ids(ids, 0.25, seed=4, groups=groups)
    assert len(val) == 5 and val == split_ids(ids[::-1], 0.25, seed=4, groups=groups)
    assert set(ids[:6]).isdisjoint(val)  # six would overshoot five: the group trains
    for seed in range(20):
        val = split_ids(ids, 0.25, seed=seed, groups=groups)
        assert {"t6", "t7"} <= val or not {"t6", "t7"} & val
    one = {i: "all" for i in ids}
    assert split_ids(ids, 0.25, seed=0, groups=one) == set()  # no group leaves training one


def test_no_validation_task_has_a_copy_in_training(tmp_path):
    summary = prepare("builtin", tmp_path / "out", max_samples=120, val_fraction=0.2, seed=1)
    tasks = load_prepared_tasks(tmp_path / "out" / "tasks.jsonl")
    split = {r["id"]: r["split"] for r in read_jsonl(tmp_path / "out" / "tasks.jsonl")}
    train = [t for t in tasks if split[t.id] == "train"]
    val = [t for t in tasks if split[t.id] == "validation"]
    assert len(val) == summary.validation == round(120 * 0.2)
    assert find_matches(train, val) == []  # not even the same forward op sequence
    # without the groups the same tasks would have straddled the split
    plain = split_ids([t.id for t in tasks], 0.2, seed=1)
    assert find_matches([t for t in tasks if t.id not in plain],
                        [t for t in tasks if t.id in plain]) != []  # fmt: skip


def test_max_samples_caps_the_kept_examples(tmp_path):
    summary = prepare(str(FIXTURE), tmp_path / "out", max_samples=5, cache_dir=str(tmp_path))
    assert summary.kept == 5 and summary.train + summary.validation == 5
    assert summary.rows_read - sum(summary.dropped.values()) == 5
    assert len(read_jsonl(tmp_path / "out" / "tasks.jsonl")) == 5


def test_parquet_gives_the_same_tasks_as_jsonl(prepared, tmp_path):
    _, out = prepared
    rows = load_rows(str(FIXTURE), cache_dir=str(tmp_path / "hf"))
    rows.to_parquet(str(tmp_path / "kb" / "part-0.parquet"))
    prepare(
        str(tmp_path / "kb"), tmp_path / "out", val_fraction=0.2, seed=3, cache_dir=str(tmp_path)
    )
    assert (tmp_path / "out" / "tasks.jsonl").read_bytes() == (out / "tasks.jsonl").read_bytes()


# --------------------------------------------------------------------------- errors


def test_a_missing_path_is_named(tmp_path):
    with pytest.raises(KernelBookError, match="no such file or directory.*kernelbook, builtin"):
        prepare(str(tmp_path / "nope.jsonl"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_columns_are_named_and_nothing_already_written_is_lost(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "triton_code"}) + "\n" for r in ROWS)
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.jsonl").write_text("earlier work\n")
    with pytest.raises(KernelBookError, match=r"missing column\(s\) triton_code \(found: "):
        prepare(str(bad), out, cache_dir=str(tmp_path / "hf"))
    assert (out / "train.jsonl").read_text() == "earlier work\n"
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl"]


def test_a_folder_without_data_files_and_bad_arguments_are_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(KernelBookError, match="no .parquet, .jsonl or .json data file"):
        prepare(str(tmp_path), tmp_path / "out")
    with pytest.raises(KernelBookError, match="max_samples must be at least 1"):
        prepare("builtin", tmp_path / "out", max_samples=0)
    with pytest.raises(KernelBookError, match=r"val_fraction must be in \[0, 1\)"):
        prepare("builtin", tmp_path / "out", val_fraction=1.0)
    with pytest.raises(KernelBookError, match="policy must be one of strict, partial, not 'lax'"):
        prepare("builtin", tmp_path / "out", policy="lax")
    with pytest.raises(KernelBookError, match="use `heuristic` or `openai:MODEL_NAME`"):
        prepare("builtin", tmp_path / "out", labeler="claude")


def test_rows_that_convert_to_nothing_are_an_error(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(row("NoNewClass")) + "\n")
    with pytest.raises(KernelBookError, match="no usable rows.*no_new_class.*nothing written"):
        prepare(str(broken), tmp_path / "out", cache_dir=str(tmp_path / "hf"))
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- builtin source


def test_builtin_source_is_the_suite_then_generated_tasks(tmp_path):
    builtin = load_builtin("all").tasks
    summary = prepare("builtin", tmp_path / "out", max_samples=len(builtin) + 4, seed=7)
    tasks = read_jsonl(tmp_path / "out" / "tasks.jsonl")
    assert summary.kept == len(builtin) + 4 and not summary.dropped
    assert {t.id for t in builtin} <= {t["id"] for t in tasks}
    generated = [t for t in tasks if t["id"].startswith("generated:")]
    assert len(generated) == 4 and all(t["solution"] for t in tasks)
    levels = {t.id: t.level for t in builtin}
    assert all(t["level"] == levels[t["id"]] for t in tasks if t["id"] in levels)
    assert summary.by_level == {
        str(lv): sum(t["level"] == lv for t in tasks) for lv in sorted({t["level"] for t in tasks})
    }


def test_builtin_source_drops_the_heldout_tasks_and_draws_more_generated_ones(tmp_path):
    builtin = load_builtin("all").tasks
    held = {f"builtin:{i}" for i in HELDOUT_BUILTIN}
    n = len(builtin) + 4
    summary = prepare("builtin", tmp_path / "out", max_samples=n, seed=7,
                      decontaminate_against=["builtin:heldout"])  # fmt: skip
    tasks = read_jsonl(tmp_path / "out" / "tasks.jsonl")
    ids = {t["id"] for t in tasks}
    assert summary.kept == len(tasks) == n  # the generator made up for the dropped ones
    assert ids.isdisjoint(held) and {t.id for t in builtin} - held <= ids
    dropped = {m["task"] for m in summary.contaminated}
    assert held <= dropped and summary.dropped["contaminated"] == len(dropped)
    assert all(m["against"] in held for m in summary.contaminated)
    assert {"task": "builtin:level1/1_ReLU", "against": "builtin:level1/1_ReLU",
            "form": "program"}.items() <= summary.contaminated[0].items()  # fmt: skip
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["contaminated"] == summary.contaminated
    assert on_disk["decontaminated_against"] == ["builtin:heldout"]


def test_kernelbook_rows_equal_to_a_benchmark_task_are_dropped_and_named(prepared, tmp_path):
    _, out = prepared
    taken = load_prepared_tasks(out / "tasks.jsonl")[:2]
    bench = tmp_path / "bench" / "level1"  # a KernelBench-layout folder of two of the tasks
    bench.mkdir(parents=True)
    renamed = taken[1].source.replace("get_inputs():", "get_inputs():\n    # drawn here")
    (bench / "1_First.py").write_text(taken[0].source)
    (bench / "2_Second.py").write_text('"""A docstring of its own."""\n' + renamed)
    summary = prepare(str(FIXTURE), tmp_path / "out", val_fraction=0.2, seed=3,
                      cache_dir=str(tmp_path / "hf"), decontaminate_against=[str(bench.parent)],
                      decontaminate_form="program")  # fmt: skip
    kept = {t.id for t in load_prepared_tasks(tmp_path / "out" / "tasks.jsonl")}
    assert kept.isdisjoint({t.id for t in taken})
    assert summary.kept == prepared[0].kept - 2 and summary.dropped["contaminated"] == 2
    assert sorted((m["task"], m["against"], m["form"]) for m in summary.contaminated) == sorted(
        [(taken[0].id, "level1/1_First", "program"), (taken[1].id, "level1/2_Second", "program")]
    )


def test_a_decontamination_spec_that_cannot_be_loaded_is_named_before_anything_is_written(
    tmp_path,
):
    with pytest.raises(KernelBookError, match=r"data.decontaminate_against: .*nowhere"):
        prepare("builtin", tmp_path / "out", decontaminate_against=[str(tmp_path / "nowhere")])
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- families source


def test_families_source_is_training_tasks_of_each_family(tmp_path):
    summary = prepare("families", tmp_path / "out", seed=3, family_tasks=2)
    tasks = read_jsonl(tmp_path / "out" / "tasks.jsonl")
    assert summary.by_family == {name: 2 for name in families.FAMILIES}
    assert summary.kept == len(tasks) == 2 * len(families.FAMILIES) and not summary.dropped
    assert all(t["id"].startswith("fam:") and t["solution"] for t in tasks)
    assert not any(families.is_heldout(families.signature(t["id"])) for t in tasks)
    rows = read_jsonl(tmp_path / "out" / "train.jsonl") + read_jsonl(
        tmp_path / "out" / "validation.jsonl"
    )
    # Each prompt states the policy its solution needs: partial for the torch layer.
    for row in rows:
        partial = "Policy partial" in row["prompt"][-1]["content"]
        assert partial == row["task_id"].startswith("fam:fused:"), row["task_id"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["by_family"]["norms"] == 2


def test_prompts_name_the_torch_ops_the_verifier_allows_not_the_default_list(tmp_path):
    """A partial config with a narrower list: every prompt names that list, the fused
    family's too; a strict config's fused prompts name the default list."""
    out = tmp_path / "narrow"
    prepare("families", out, family_tasks=1, families=["fused", "norms"], policy="partial",
            allowed_torch_ops=["conv1d", "conv2d"])  # fmt: skip
    rows = read_jsonl(out / "train.jsonl") + read_jsonl(out / "validation.jsonl")
    assert {r["task_id"].split(":")[1] for r in rows} == {"fused", "norms"}
    for row in rows:
        text = row["prompt"][-1]["content"]
        assert "Policy partial" in text and "`conv2d`" in text
        assert "`matmul`" not in text, row["task_id"]  # of PARTIAL_TORCH_OPS only
    prepare("builtin", tmp_path / "kb", max_samples=3, policy="partial",
            allowed_torch_ops=["relu"])  # fmt: skip
    text = read_jsonl(tmp_path / "kb" / "train.jsonl")[0]["prompt"][-1]["content"]
    assert "`relu`" in text and "`matmul`" not in text
    prepare("families", tmp_path / "strict", family_tasks=1, families=["fused"])
    text = read_jsonl(tmp_path / "strict" / "train.jsonl")[0]["prompt"][-1]["content"]
    assert "Policy partial" in text and "`matmul`" in text


def test_families_source_options_are_checked(tmp_path):
    summary = prepare("families", tmp_path / "a", max_samples=9, family_tasks=5,
                      families=["matmul", "scans"])  # fmt: skip
    assert summary.by_family == {"matmul": 4, "scans": 4}
    with pytest.raises(KernelBookError, match="unknown \\['attention'\\]; the families are"):
        prepare("families", tmp_path / "b", families=["attention"])
    assert not (tmp_path / "b").exists()


def test_families_source_drops_the_tasks_equal_to_heldout_ones_and_splits_by_group(tmp_path):
    summary = prepare("families", tmp_path / "out", seed=0, family_tasks=24, val_fraction=0.25,
                      families=["softmax"], decontaminate_against=["builtin:heldout"])  # fmt: skip
    heldout = load_builtin("heldout").tasks
    dropped = {m["task"] for m in summary.contaminated}
    # the train split draws the held-out builtin softmax: once as the same program
    match = next(m for m in summary.contaminated if m["task"] == "fam:softmax:18")
    assert (match["against"], match["form"]) == ("builtin:level1/16_Softmax", "program")
    assert summary.dropped["contaminated"] == len(dropped) and dropped
    assert summary.by_family == {"softmax": 24 - len(dropped)} == {"softmax": summary.kept}
    tasks = load_prepared_tasks(tmp_path / "out" / "tasks.jsonl")
    assert dropped.isdisjoint(t.id for t in tasks) and find_matches(tasks, heldout) == []
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["contaminated"] == summary.contaminated
    # tasks of one forward op sequence stay on one side of the split
    split = {r["id"]: r["split"] for r in read_jsonl(tmp_path / "out" / "tasks.jsonl")}
    train = [t for t in tasks if split[t.id] == "train"]
    val = [t for t in tasks if split[t.id] == "validation"]
    assert val and len(val) == summary.validation and find_matches(train, val) == []
    plain = split_ids([t.id for t in tasks], 0.25, seed=0)  # without the groups they would not
    assert find_matches([t for t in tasks if t.id not in plain],
                        [t for t in tasks if t.id in plain]) != []  # fmt: skip


def test_prepare_command_prints_the_count_per_family(tmp_path):
    args = ["prepare", "--source", "families", "--out", str(tmp_path / "o"),
            "--data.family_tasks", "1", "--data.families", '["losses", "pooling"]']  # fmt: skip
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    assert "by family" in result.output and "losses" in result.output
    assert "2 examples" in result.output


# --------------------------------------------------------------------------- LLM labels


class _LevelServer(BaseHTTPRequestHandler):
    answer = "3"
    calls: list[str] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body["model"])
        data = json.dumps({"choices": [{"message": {"content": self.answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_llm_labeller_labels_through_an_openai_endpoint(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LevelServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        summary = prepare(
            str(FIXTURE), tmp_path / "out", max_samples=4, labeler="openai:judge",
            labeler_endpoint=url, cache_dir=str(tmp_path),
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert summary.by_level == {"3": 4} and summary.labeler == "openai:judge"
    assert _LevelServer.calls == ["judge"] * 4
    with pytest.raises(KernelBookError, match="LLM labeller: .*cannot reach the endpoint"):
        prepare(
            str(FIXTURE), tmp_path / "out2", max_samples=2, labeler="openai:judge",
            labeler_endpoint=url, cache_dir=str(tmp_path),
        )  # fmt: skip
    assert not (tmp_path / "out2").exists()


def test_llm_labeller_without_endpoint_says_where_to_set_one(tmp_path, monkeypatch):
    for var in ("TRITONRL_LABELER_ENDPOINT", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(KernelBookError, match="TRITONRL_LABELER_ENDPOINT or OPENAI_BASE_URL"):
        prepare(str(FIXTURE), tmp_path / "out", labeler="openai:judge")


# --------------------------------------------------------------------------- command


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def test_prepare_command_prints_json_summary_and_exits_2_on_bad_input(tmp_path):
    runner = CliRunner()
    args = ["prepare", "--source", "builtin", "--max-samples", "60", "--out", str(tmp_path / "o")]
    result = runner.invoke(_app(), [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kept"] == 60
    assert (tmp_path / "o" / "summary.json").is_file()
    result = runner.invoke(
        _app(), ["prepare", "--source", str(tmp_path / "x.parquet"), "--out", "o"]
    )
    assert result.exit_code == 2 and "no such file or directory" in result.output
    result = runner.invoke(_app(), ["prepare", "--source", "builtin"])
    assert result.exit_code == 2 and "--out DIR" in result.output


def test_prepare_command_drops_the_configured_tasks_and_says_which(tmp_path):
    args = ["prepare", "--source", "builtin", "--max-samples", "60", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(_app(), args)  # the default: the held-out builtin tasks
    assert result.exit_code == 0, result.output
    assert "(forward form):" in result.output
    assert "builtin:level1/1_ReLU = builtin:level1/1_ReLU (program)" in result.output
    again = CliRunner().invoke(_app(), [*args, "--data.decontaminate_against", "[]"])
    assert again.exit_code == 2 and "already holds a prepare's train.jsonl" in again.output
    assert "--force" in again.output  # nothing overwritten without it
    args = [*args, "--force"]
    result = CliRunner().invoke(_app(), [*args, "--data.decontaminate_against", "[]", "--json"])
    summary = json.loads(result.output)
    assert summary["contaminated"] == [] and "contaminated" not in summary["dropped"]
    assert {f"builtin:{i}" for i in HELDOUT_BUILTIN} <= {
        t["id"] for t in read_jsonl(tmp_path / "o" / "tasks.jsonl")
    }
    bad = [*args, "--data.decontaminate_against", "[gen:5:x]"]
    result = CliRunner().invoke(_app(), bad)
    assert result.exit_code == 2 and "data.decontaminate_against: gen:5:x" in result.output
    result = CliRunner().invoke(_app(), [*args, "--data.decontaminate_form", "tokens"])
    assert result.exit_code == 2 and "data.decontaminate_form must be one of" in result.output


def test_prepare_command_records_artifacts_in_a_run(tmp_path):
    runs = pytest.importorskip("tritonrl.runs")
    run_dir = tmp_path / "run"
    args = ["prepare", "--source", "builtin", "--max-samples", "60", "--run", str(run_dir)]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    run = runs.Run.open(run_dir)
    assert run.status("prepare") == "done"
    assert run.stage("prepare")["info"]["kept"] == 60
    for name in ("train", "validation", "tasks"):
        assert run.artifact("prepare", name) == run.path / "prepare" / f"{name}.jsonl"
    outside = ["--out", str(tmp_path / "elsewhere")]
    result = CliRunner().invoke(_app(), [*args, *outside])
    assert result.exit_code == 2 and "outside the run directory" in result.output


def test_prepare_takes_relative_out_and_run_paths_from_where_it_runs(tmp_path, monkeypatch):
    # `prepare --out runs/demo/data --run runs/demo`, both relative, as a user types them:
    # the data lands once in runs/demo/data (it was looked for in runs/demo/runs/demo/data)
    runs = pytest.importorskip("tritonrl.runs")
    monkeypatch.chdir(tmp_path)
    args = ["prepare", "--source", "builtin", "--max-samples", "60",
            "--out", "runs/demo/data", "--run", "runs/demo"]  # fmt: skip
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    run = runs.Run.open(tmp_path / "runs" / "demo")
    assert run.status("prepare") == "done"
    train = tmp_path / "runs" / "demo" / "data" / "train.jsonl"
    assert run.artifact("prepare", "train") == train and train.is_file()
    assert not (tmp_path / "runs" / "demo" / "runs").exists()


def _prepare_offline(tmp_path, **env) -> tuple[subprocess.CompletedProcess, float]:
    """`tritonrl prepare --source kernelbook` as a user runs it, the hub out of reach (a
    closed loopback port, so the test means the same with or without network) and an
    empty hub cache."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))},
        "HF_ENDPOINT": "http://127.0.0.1:1",
        "HF_HOME": str(tmp_path / "hf_home"),
        **env,
    }
    command = [sys.executable, "-m", "tritonrl", "prepare", "--source", "kernelbook"]
    started = time.monotonic()
    result = subprocess.run(
        [*command, "--out", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    "env, reason",
    [({}, "http://127.0.0.1:1 did not answer"), ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE")],
)
def test_kernelbook_out_of_reach_fails_at_once_with_one_message(tmp_path, env, reason):
    result, seconds = _prepare_offline(tmp_path, **env)
    assert result.returncode == 2, result.stderr
    assert seconds < 20, f"took {seconds:.0f}s (the hub client's retries take 23 s)"
    assert "Retry" not in result.stderr and "huggingface-cli" not in result.stderr
    assert "hf download GPUMODE/KernelBook --repo-type dataset" in result.stderr
    assert reason in result.stderr and "no copy is cached" in result.stderr
    assert result.stderr.count("error:") == 1
    assert not (tmp_path / "out").exists()


def test_a_downloaded_folder_is_read_through_its_subfolders(tmp_path):
    """`hf download --local-dir DIR` keeps the repository's layout (files in folders)."""
    (tmp_path / "dl" / "data").mkdir(parents=True)
    (tmp_path / "dl" / ".cache").mkdir()
    (tmp_path / "dl" / ".cache" / "ignored.json").write_text("{}")
    (tmp_path / "dl" / "README.md").write_text("card")
    (tmp_path / "dl" / "data" / "train.jsonl").write_text(FIXTURE.read_text())
    assert len(load_rows(str(tmp_path / "dl"))) == len(ROWS)


def test_rows_whose_solution_breaks_the_prompts_policy_are_dropped_and_said(tmp_path, caplog):
    """Partial with only mm and addmm: the fused family's solutions run nn.Conv1d/Conv2d
    in torch, which the static checks refuse under that policy; prepare drops them as
    `policy`, the family's count says 0, one warning names the family, the finding and
    the ops to allow. Allowing those ops keeps them."""
    out = tmp_path / "narrow"
    summary = prepare("families", out, family_tasks=2, families=["fused", "norms"],
                      policy="partial", allowed_torch_ops=["mm", "addmm"])  # fmt: skip
    assert summary.by_family == {"fused": 0, "norms": 2}
    assert summary.dropped == {"policy": 2}
    assert all("nn_compute_layer" in e for e in summary.drop_examples["policy"])
    tasks = read_jsonl(out / "tasks.jsonl")
    assert not any(t["id"].startswith("fam:fused:") for t in tasks)
    [warning] = summary.warnings
    assert warning.startswith("family fused: all its tasks dropped")
    assert "nn_compute_layer" in warning
    assert "--verify.allowed_torch_ops '[mm, addmm, conv" in warning
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"][-1] == warning
    assert json.loads((out / "summary.json").read_text())["warnings"] == [warning]
    ops = ["mm", "addmm", "conv1d", "conv2d"]
    kept = prepare("families", tmp_path / "wide", family_tasks=2, families=["fused"],
                   policy="partial", allowed_torch_ops=ops)  # fmt: skip
    assert kept.by_family == {"fused": 2} and not kept.dropped and not kept.warnings
