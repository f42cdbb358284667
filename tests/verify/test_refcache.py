"""The reference-timing cache (`tritonrl.verify.refcache`): where it lives, what its key
follows, that an unreadable file is set aside and never trusted, that only a usable
entry is a hit, and that the reference model built for timing has the set's parameters.

Measuring needs a GPU (`test_reference_time_alone_is_cached` in test_timing.py); here
the device's name stands in for one, and everything else is the real cache on disk.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tritonrl.tasks.loaders import load_builtin
from tritonrl.verify import refcache
from tritonrl.verify.inputs import InputSet, plan_input_sets, prepare_set

RELU = load_builtin("level1/1_ReLU").tasks[0]
GRAPHS_OFF = SimpleNamespace(graphs=False)  # the one timing option the key reads


@pytest.fixture(scope="module")
def seed_a():
    spec = next(s for s in plan_input_sets(RELU, "cpu") if s.name == "seed_a")
    return prepare_set(RELU, spec, "cpu")


@pytest.fixture
def on_an_h100(monkeypatch):
    """The name `torch.cuda` gives the device; the cache asks it for nothing else."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100")


def test_reference_cache_key_follows_task_shapes_and_device(tmp_path):
    relu = RELU
    spec = next(s for s in plan_input_sets(relu, "cpu") if s.name == "seed_a")
    odd = next(s for s in plan_input_sets(relu, "cpu") if s.name == "odd")
    a, b = prepare_set(relu, spec, "cpu"), prepare_set(relu, odd, "cpu")
    key = refcache.cache_key(relu, a, "H100", False)
    assert key == refcache.cache_key(relu, a, "H100", False)
    assert len({key, refcache.cache_key(relu, b, "H100", False),
                refcache.cache_key(relu, a, "A100", False),
                refcache.cache_key(relu, a, "H100", True)}) == 4  # fmt: skip
    bad = tmp_path / "ref_times.json"
    bad.write_text("{not json")
    assert refcache._load(bad) == {} and not bad.exists()  # set aside, never trusted
    assert refcache.resolve_path("off") is None


def test_the_key_follows_the_tasks_source(seed_a):
    edited = dataclasses.replace(RELU, source=RELU.source + "\n# edited\n")
    assert refcache.cache_key(edited, seed_a, "H100", False) != refcache.cache_key(
        RELU, seed_a, "H100", False
    )


def test_the_file_lives_in_the_users_cache_unless_named(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = tmp_path / "tritonrl" / "ref_times.json"
    assert refcache.default_path() == expected
    assert refcache.resolve_path("") == refcache.resolve_path("auto") == expected
    assert refcache.resolve_path("/data/ref.json") == Path("/data/ref.json")


def test_a_stored_entry_is_a_hit_without_any_gpu_work(tmp_path, seed_a, on_an_h100):
    path = tmp_path / "ref.json"
    key = refcache.cache_key(RELU, seed_a, "NVIDIA H100", False)
    entry = {"mean": 0.25, "median": 0.24, "n": 50, "task": RELU.id}
    path.write_text(json.dumps({key: entry}))
    assert refcache.cached_time(RELU, seed_a, GRAPHS_OFF, path) == entry
    # reference_time would measure on a miss (a GPU): a hit returns before that
    assert refcache.reference_time(RELU, seed_a, GRAPHS_OFF, path) == (entry, True)
    # another device, or graphs on, is another key: no hit
    assert refcache.cached_time(RELU, seed_a, SimpleNamespace(graphs=True), path) is None


@pytest.mark.parametrize(
    "stored", [{"mean": 0.0}, {"mean": -1.0}, {"median": 0.2}, [0.25], "0.25"], ids=repr
)
def test_an_entry_without_a_positive_mean_is_not_a_hit(tmp_path, seed_a, on_an_h100, stored):
    path = tmp_path / "ref.json"
    key = refcache.cache_key(RELU, seed_a, "NVIDIA H100", False)
    path.write_text(json.dumps({key: stored}))
    assert refcache.cached_time(RELU, seed_a, GRAPHS_OFF, path) is None
    assert path.exists()  # a readable file is kept: only that entry is unusable


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\x00\x01"], ids=repr)
def test_an_unreadable_file_is_set_aside_and_nothing_is_read_from_it(
    tmp_path, seed_a, on_an_h100, text
):
    path = tmp_path / "ref.json"
    path.write_text(text)
    assert refcache.cached_time(RELU, seed_a, GRAPHS_OFF, path) is None
    assert not path.exists() and path.with_suffix(".corrupt").read_text() == text


def test_no_file_no_cache(tmp_path, seed_a, on_an_h100):
    assert refcache.cached_time(RELU, seed_a, GRAPHS_OFF, None) is None
    assert refcache.cached_time(RELU, seed_a, GRAPHS_OFF, tmp_path / "absent.json") is None
    assert not (tmp_path / "absent.json").exists()


def test_reference_model_for_timing_has_the_sets_parameters():
    task = load_builtin("level2/1_Gemm_Bias_ReLU").tasks[0]
    main = prepare_set(task, InputSet("seed_a", "small", 3, model_seed=4), "cpu")
    torch.manual_seed(1)
    model = refcache.reference_model(task, main, "cpu")
    for k, v in model.state_dict().items():
        assert torch.equal(v, main.state_dict[k])
