"""`verify --batch` cases: a kernel given as text or as a file, and the errors that say
which of the two a line gave."""

import json

from tritonrl.verify.batch import read_cases, result_row

RELU = "builtin:level1/1_ReLU"


def _cases(tmp_path, *objects, folder="cases"):
    """`objects` as a JSONL file in `tmp_path/folder`; its cases."""
    where = tmp_path / folder
    where.mkdir(exist_ok=True)
    path = where / "cases.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return read_cases(path)


def test_kernel_is_the_text_and_kernel_file_is_read_relative_to_the_jsonl_folder(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # not the JSONL file's folder
    (tmp_path / "cases" / "answers").mkdir(parents=True)
    (tmp_path / "cases" / "answers" / "relu.md").write_text("```python\nclass ModelNew: ...\n```")
    absolute = tmp_path / "abs.py"
    absolute.write_text("class ModelNew: ...\n")
    text, relative, by_abs = _cases(
        tmp_path,
        {"task": RELU, "kernel": "class ModelNew: ..."},
        {"task": RELU, "kernel_file": "answers/relu.md"},
        {"task": RELU, "kernel_file": str(absolute)},
    )
    assert [c.error for c in (text, relative, by_abs)] == [None, None, None]
    assert text.code == "class ModelNew: ..." and text.task.id == RELU
    assert relative.code == b"```python\nclass ModelNew: ...\n```"
    assert by_abs.code == b"class ModelNew: ...\n"
    row = result_row(relative, None)
    assert row["kernel_file"] == "answers/relu.md" and row["kernel"] is None
    assert row["task"] == RELU and row["line"] == 2
    assert "kernel_file" not in result_row(text, None)


def test_neither_or_both_kernel_fields_say_what_was_given_and_what_is_expected(tmp_path):
    neither, both, no_task = _cases(
        tmp_path,
        {"task": RELU, "code": "class ModelNew: ..."},
        {"task": RELU, "kernel": "x", "kernel_file": "x.py"},
        {"kernel_path": "x.py"},
    )
    assert neither.error == (
        "line 1: neither 'kernel' nor 'kernel_file' given (the line has 'task', 'code'); "
        "give 'kernel' (the completion text) or 'kernel_file' (a path to a file holding it)"
    )
    assert both.error.startswith("line 2: both 'kernel' and 'kernel_file' given; give one: ")
    assert no_task.error.startswith("line 3: missing 'task'; neither 'kernel' nor")
    assert "(the line has 'kernel_path')" in no_task.error
    assert result_row(both, None)["input_error"] == both.error


def test_a_kernel_that_is_the_path_of_a_file_suggests_kernel_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "answer.py").write_text("class ModelNew: ...\n")
    (tmp_path / "here.txt").write_text("class ModelNew: ...\n")
    beside, in_cwd, no_file, two_lines = _cases(
        tmp_path,
        {"task": RELU, "kernel": "answer.py"},
        {"task": RELU, "kernel": "here.txt"},
        {"task": RELU, "kernel": "missing.py"},
        {"task": RELU, "kernel": "# answer.py\nanswer.py"},
    )
    assert beside.error == (
        "line 1: 'kernel' is the completion text, but 'answer.py' is the path of a file; "
        'to verify that file give {"kernel_file": "answer.py"} (relative to the JSONL '
        "file's folder)"
    )
    # Found from the current directory only: the suggestion is a path that resolves.
    assert f'{{"kernel_file": "{tmp_path / "here.txt"}"}}' in in_cwd.error
    # No such file, or not one line: text, for the verifier to judge.
    assert no_file.error is None and two_lines.error is None


def test_unreadable_files_and_values_of_the_wrong_type_are_named(tmp_path):
    missing, not_text, bad_task = _cases(
        tmp_path,
        {"task": RELU, "kernel_file": "nope.py"},
        {"task": RELU, "kernel_file": ["a.py"]},
        {"task": 3, "kernel": "x"},
    )
    expected = tmp_path / "cases" / "nope.py"
    assert missing.error == (
        f"line 1: kernel_file 'nope.py': cannot read {expected}: No such file or directory"
    )
    assert missing.kernel_file == "nope.py"
    assert result_row(missing, None)["kernel_file"] == "nope.py"
    assert not_text.error == "line 2: 'kernel_file' must be a string, not list"
    assert bad_task.error == "line 3: 'task' must be a string, not int"
