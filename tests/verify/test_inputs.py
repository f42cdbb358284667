"""The trusted side's input sets (`tritonrl.verify.inputs`): a set refilled into another's
buffers keeps that set's parameters whatever other threads do with torch's global random
generator, and the worker's memory and file limits follow the sets' sizes."""

import threading

import pytest
import torch

from tritonrl.config import VerifyConfig
from tritonrl.tasks.loaders import load_builtin, load_source
from tritonrl.verify import refcache, verify
from tritonrl.verify.funnel import prepare
from tritonrl.verify.inputs import InputSet, plan_input_sets, prepare_set, timing_check_set


def _gemm_task():
    return load_builtin("level2/1_Gemm_Bias_ReLU").tasks[0]


def test_refilled_sets_keep_their_parameters_while_other_threads_reseed():
    """Lanes prepare jobs while other threads of the process (a lane timing a reference,
    a trainer) seed and draw from torch's global generator. seed_b is written into
    seed_a's buffers and the worker keeps seed_a's model for it, so its expected outputs
    must come from seed_a's parameters; rebuilt from the seed, they came from whatever
    state the generator was in (an honest kernel then read as `output_caching`)."""
    task = _gemm_task()
    config = VerifyConfig(device="cpu", num_input_sets=3)
    stop = threading.Event()

    def reseed():  # what a thread timing a reference, or a trainer, does
        while not stop.is_set():
            torch.manual_seed(7)
            torch.rand(64)

    def time_references():  # the reference-time measurement's model build, on the CPU
        main = prepare_set(task, InputSet("seed_a", "small", 5, model_seed=6), "cpu")
        while not stop.is_set():
            refcache.reference_model(task, main, "cpu")

    prepared, errors = [], []

    def lane():
        try:
            for _ in range(6):
                prepared.append(prepare(task, task.solution, config))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    noise = [threading.Thread(target=reseed) for _ in range(2)]
    noise.append(threading.Thread(target=time_references))
    lanes = [threading.Thread(target=lane) for _ in range(3)]
    for t in noise + lanes:
        t.start()
    for t in lanes:
        t.join()
    stop.set()
    for t in noise:
        t.join()
    assert not errors
    assert len(prepared) == 18
    for p in prepared:
        assert p.sets is not None, p.result.error
        sets = {s.spec.name: s for s in p.sets}
        a, b = sets["seed_a"], sets["seed_b"]
        assert b.spec.refill_of == "seed_a"
        for k, v in a.state_dict.items():
            assert torch.equal(v, b.state_dict[k]), f"seed_b's {k} is not seed_a's"
        model = task_model(task, a)
        with torch.no_grad():
            assert torch.equal(model(*b.inputs), b.expected)


def task_model(task, prepared):
    from tritonrl.tasks.shapes import instantiate

    inst = instantiate(task, prepared.spec.mode)
    model = inst.module.Model(*prepared.init_inputs)
    model.load_state_dict(prepared.state_dict)
    return model


def test_timing_check_set_keeps_the_main_sets_parameters():
    task = _gemm_task()
    main = prepare_set(task, InputSet("seed_a", "small", 11, model_seed=12), "cpu")
    torch.manual_seed(99)  # whatever the generator holds, the check set uses main's model
    check = prepare_set(task, timing_check_set(main.spec), "cpu", model_state=main.state_dict)
    for k, v in main.state_dict.items():
        assert torch.equal(v, check.state_dict[k])


LOG_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log(x)


batch_size = 4
dim = 64


def get_inputs():
    return [torch.rand(batch_size, dim) + 0.1]


def get_init_inputs():
    return []
"""


def test_a_shifted_set_the_reference_cannot_take_is_the_drawn_set_scaled(tmp_path):
    """A shifted set flips signs; log(x) of a negative is NaN, so the set falls back to
    the same draw times 3 (the drawn inputs are redrawn from the seed, not kept beside
    the shifted ones: on a GPU a full-size set is then held twice, not three times)."""
    path = tmp_path / "1_Log.py"
    path.write_text(LOG_TASK)
    task = load_source(str(path)).tasks[0]
    plain = prepare_set(task, InputSet("seed_b", "small", 11), "cpu")
    shifted = prepare_set(task, InputSet("shifted", "small", 11, shift=True), "cpu")
    assert shifted.note and "x3" in shifted.note
    assert torch.equal(shifted.inputs[0], plain.inputs[0] * 3.0)
    assert torch.allclose(shifted.expected, torch.log(plain.inputs[0] * 3.0))
    assert torch.isfinite(shifted.expected).all()


DROPOUT_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)  # left in training mode: a new mask every call

    def forward(self, x):
        return torch.softmax(self.drop(x * 2.0), dim=1)


batch_size = 16
dim = 256
p = 0.25


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [p]
"""


def test_a_reference_that_disagrees_with_itself_is_named_as_the_task_fault(tmp_path):
    """A reference whose outputs are random (dropout in training mode) fails every input
    set for every candidate, its own copy included (KernelBench's
    66_Matmul_Dropout_Softmax on an H100): the tiny set runs it twice, and a candidate's
    mismatch then says the task is at fault (the candidate still compiled and ran)."""
    path = tmp_path / "1_Dropout_Softmax.py"
    path.write_text(DROPOUT_TASK)
    task = load_source(str(path)).tasks[0]
    tiny = prepare_set(task, InputSet("tiny", "tiny", 3), "cpu")
    assert tiny.random_reference and "not deterministic" in tiny.random_reference
    assert "self.eval()" in tiny.random_reference
    assert prepare_set(task, InputSet("seed_a", "small", 3), "cpu").random_reference is None
    config = VerifyConfig(device="cpu", static_checks=False)  # the reference as candidate
    copy = DROPOUT_TASK + "\n\nclass ModelNew(Model):\n    pass\n"
    result = verify(task, copy, config)
    assert result.compiled and not result.correct
    assert result.error.startswith("input set tiny: ")
    assert "the task's reference is not deterministic" in result.error
    fixed = DROPOUT_TASK.replace("self.drop = nn.Dropout(p)", "self.drop = nn.Dropout(p)\n"
                                 "        self.eval()")  # fmt: skip
    path.write_text(fixed)
    task = load_source(str(path)).tasks[0]
    assert prepare_set(task, InputSet("tiny", "tiny", 3), "cpu").random_reference is None
    again = verify(task, fixed + "\n\nclass ModelNew(Model):\n    pass\n", config)
    # every set matched (a torch-only copy is still flagged by the run-time checks)
    assert again.input_sets and all(s.ok for s in again.input_sets), again.error


HUGE_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x)

batch_size = 4096
dim = 393216

def get_inputs():
    return [torch.randn(batch_size, dim)]
"""


def test_full_size_sets_larger_than_the_limit_are_shrunk_and_say_so(tmp_path):
    """KernelBench's newer problems hold up to 14 GiB of float32 a set; several prepared
    at once (each kept on the host) killed an evaluation. A full set over
    `verify.full_max_elements` is planned smaller, and its note names the sizes used."""
    path = tmp_path / "1_Huge_Sigmoid.py"
    path.write_text(HUGE_TASK)
    task = load_source(str(path)).tasks[0]
    limit = 1 << 20
    specs = plan_input_sets(task, "cuda", 5, full_max_elements=limit)
    assert {s.name: s.budget for s in specs if s.mode == "full"} == dict.fromkeys(
        ("seed_a", "seed_b", "shifted"), limit
    )
    assert all(s.budget is None for s in specs if s.mode != "full")
    assert timing_check_set(specs[1]).budget == limit
    assert all(s.budget is None for s in plan_input_sets(task, "cuda", 5))
    seed_a = next(s for s in specs if s.name == "seed_a")
    prepared = prepare_set(task, seed_a, "cpu")  # the full-size plan, run on the CPU
    x = prepared.inputs[0]
    assert 2 * x.numel() <= limit and x.numel() > limit // 8
    assert torch.equal(prepared.expected, torch.sigmoid(x))
    assert prepared.note and "verify.full_max_elements" in prepared.note
    assert "batch_size" in prepared.note and "dim" in prepared.note
    with pytest.raises(ValueError, match="full_max_elements"):
        VerifyConfig(full_max_elements=-1)
