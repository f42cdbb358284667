"""Multi-input testing: the input sets a candidate must pass, and their expected outputs,
built on the trusted side.

Per evaluation, with seeds drawn from the OS (never the common 0/42/1234 a kernel could
precompute for):

    tiny     shapes shrunk to a small budget        (the funnel's cheap first run)
    seed_a   the task's inputs, secret seed A       (full size on CUDA, CPU budget else;
             a task larger than `verify.full_max_elements` is shrunk to it, said in the
             set's note)
    seed_b   secret seed B, written INTO seed_a's buffers in place, so a kernel that
             caches results by pointer, shape or content returns stale outputs
    shifted  values rescaled and sign-flipped: x -> -1.7 x + 0.5 mean|x|, so a
             `torch.rand` task also sees negatives and other magnitudes
    odd      every size moved to an odd value (boundary masks, shape specialisation)
    <dtype>  the inputs in another dtype, only when the task module lists it in
             `DTYPES = ["float32", "float16", ...]`

The reference runs here, in the caller's process; its outputs never enter the
candidate's process. Integer inputs (indices, labels) are never transformed.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from tritonrl.astlock import AST_LOCK
from tritonrl.tasks.runtime import to_device
from tritonrl.tasks.shapes import instantiate
from tritonrl.tasks.task import Task
from tritonrl.verify.compare import compare_outputs

log = logging.getLogger(__name__)

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass(frozen=True)
class InputSet:
    name: str
    mode: str  # shape mode for tritonrl.tasks.shapes
    seed: int
    shift: bool = False
    dtype: torch.dtype | None = None
    refill_of: str | None = None  # write into that earlier set's buffers in place
    model_seed: int | None = None  # parameters' seed when not `seed` (a refill keeps its model)
    budget: int | None = None  # elements a `full` set may hold (None: as written)

    @property
    def param_seed(self) -> int:
        return self.seed if self.model_seed is None else self.model_seed


@dataclass
class PreparedSet:
    """An input set made concrete: what the worker gets and what the verdict compares."""

    spec: InputSet
    init_inputs: list
    inputs: list  # CPU tensors / Python values
    state_dict: dict[str, torch.Tensor]
    expected: Any  # reference outputs, CPU
    overrides: dict = field(default_factory=dict)
    note: str | None = None
    # Allocations this process's CUDA caching allocator refused while the reference's
    # outputs were made (any thread's: a library that catches one, as cuDNN does for a
    # workspace, computes another way; a wrong answer on this set is then the GPU's limit)
    pressure: int = 0
    # Why the reference disagreed with itself on this set (tiny sets are checked): a
    # mismatch is then the task's fault, and its verdict says so
    random_reference: str | None = None


def plan_input_sets(
    task: Task, device: str, count: int = 5, multi_input: bool = True, tiny_first: bool = True,
    full_max_elements: int = 0,
) -> list[InputSet]:  # fmt: skip
    """The input sets for one evaluation, in funnel order (tiny first unless switched off).
    `full_max_elements`: the most elements (inputs, parameters, outputs) a full-size set
    may hold; a task written larger is shrunk to it (0: no limit)."""
    sets = _plan(task, device, count, multi_input, full_max_elements or None)
    return sets if tiny_first else [s for s in sets if s.name != "tiny"]


def _plan(
    task: Task, device: str, count: int, multi_input: bool, budget: int | None
) -> list[InputSet]:
    seed = lambda: secrets.randbits(31)  # noqa: E731 - fresh secret seed per set

    # The parameters' seed is a secret of its own: the worker seeds torch's global RNG
    # with it before building ModelNew, and with the input seed there a candidate could
    # regenerate its inputs in __init__ and precompute the answers (docs/hacks.md #15).
    def mk(name: str, mode: str, **kw) -> InputSet:
        kw.setdefault("budget", budget if mode == "full" else None)
        return InputSet(name, mode, seed(), model_seed=kw.pop("model_seed", seed()), **kw)

    main = "full" if device == "cuda" else "small"
    if not multi_input:
        return [mk("tiny", "tiny"), mk("seed_a", main)]
    seed_a = mk("seed_a", main)
    sets = [
        mk("tiny", "tiny"),
        seed_a,
        mk("seed_b", main, refill_of="seed_a", model_seed=seed_a.param_seed),
        mk("shifted", main, shift=True),
        mk("odd", "odd"),
    ][: max(count, 2)]
    extra = 0
    while len(sets) < count:  # more sets on request: further secret seeds
        extra += 1
        sets.append(mk(f"seed_{extra + 2}", main))
    # Other dtypes the task declares come on top of the count: they test another thing.
    return sets + [mk(name, main, dtype=_DTYPES[name]) for name in _declared_dtypes(task)]


def timing_check_set(seed_a: InputSet) -> InputSet:
    """Fresh secret inputs shaped like `seed_a`, written into its buffers after timing:
    the call that follows the timed loop must compute them (docs/hacks.md #7, #8, #16)."""
    return InputSet(
        "timing_check", seed_a.mode, secrets.randbits(31), refill_of=seed_a.name,
        model_seed=seed_a.param_seed, budget=seed_a.budget,
    )  # fmt: skip


def _declared_dtypes(task: Task) -> list[str]:
    import ast

    with AST_LOCK:  # lanes plan their sets at once; CPython 3.11's parser is not safe
        tree = ast.parse(task.source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DTYPES" for t in node.targets
        ):
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [n for n in names if n in _DTYPES]
    return []


def _float_tensors_map(obj: Any, fn) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj) if obj.is_floating_point() else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_float_tensors_map(x, fn) for x in obj)
    return obj


def _shift(t: torch.Tensor) -> torch.Tensor:
    return t * -1.7 + 0.5 * t.abs().mean()


def _finite(out: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return not out.is_floating_point() or bool(torch.isfinite(out).all())
    if isinstance(out, (list, tuple)):
        return all(_finite(x) for x in out)
    return True


def _build_reference(inst, init, seed, dtype, state=None):
    """The reference model under the parameters' seed (torch's global RNG: under
    TRUSTED_LOCK), with `state` loaded when given, and its state."""
    torch.manual_seed(seed)
    model = inst.module.Model(*init)
    if dtype is not None:
        model = model.to(dtype)
    if state is not None:
        model.load_state_dict(state)
    return model, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _forward(model, inputs):
    """The reference's outputs for `inputs` (on their device); no RNG, so outside the
    lock: the lanes' threads run their references side by side."""
    args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        return model(*args)


# The trusted side's work that is not thread-safe runs under one lock when verifications
# run in threads of one process (the pool's lanes, the trainer adapters): inputs and
# parameters come from torch's global RNG under a seed, and CPython 3.11's `ast.parse`
# can fail with "AST constructor recursion depth mismatch" when threads parse at once
# (gh-106905). The reference's forward pass needs neither and runs outside it.
TRUSTED_LOCK = threading.Lock()


def prepare_set(
    task: Task, spec: InputSet, device: str, gpu=contextlib.nullcontext,
    model_state: dict[str, torch.Tensor] | None = None,
) -> PreparedSet:  # fmt: skip
    """Build inputs and expected outputs for one set (raises if the reference fails).
    `gpu`: a context held around the reference's passes on the device (the pool's gate).
    `model_state`: the parameters of the set this one is refilled into (`refill_of`: the
    worker keeps that set's model), loaded rather than rebuilt from the seed, so they are
    the same whatever another thread did to torch's global generator meanwhile."""
    if spec.refill_of and model_state is None:
        raise ValueError(f"input set {spec.name} refills {spec.refill_of}: pass its model_state")
    ooms = cuda_ooms() if device == "cuda" else 0
    with TRUSTED_LOCK:
        inst = instantiate(task, spec.mode, spec.budget)
        init = inst.init_inputs()
        model, state = _build_reference(inst, init, spec.param_seed, spec.dtype, model_state)
    note = None
    if spec.mode == "full" and inst.overrides:
        note = (
            f"sizes {dict(inst.overrides)} instead of the task's own: it is larger than "
            f"verify.full_max_elements ({spec.budget})"
        )
    # Drawn on the device: beside other lanes' checks, never while one times. The gate
    # first, then the lock: a timing phase that holds the gate may wait for the lock.
    with gpu() if device == "cuda" else contextlib.nullcontext(), TRUSTED_LOCK:
        inputs = _draw_inputs(inst, spec, device)
    if spec.shift:
        # the drawn inputs go before the reference's pass, which clones its arguments: a
        # full-size problem's set is then on the device twice, not three times
        inputs = _float_tensors_map(inputs, _shift)
        with gpu():
            expected = _forward(model.to(device), inputs)
        if not _finite(expected):  # e.g. log/sqrt tasks: keep the signs, scale magnitudes
            del inputs, expected
            with gpu() if device == "cuda" else contextlib.nullcontext(), TRUSTED_LOCK:
                inputs = _draw_inputs(inst, spec, device)  # the same draw: the same seed
            inputs = _float_tensors_map(inputs, lambda t: t * 3.0)
            why = "sign flip gives non-finite reference outputs; magnitudes scaled x3 instead"
            note = f"{note}; {why}" if note else why
            with TRUSTED_LOCK:  # a fresh model: the first forward may have changed its state
                model, state = _build_reference(
                    inst, init, spec.param_seed, spec.dtype, model_state
                )
            with gpu():
                expected = _forward(model.to(device), inputs)
    else:
        with gpu():
            expected = _forward(model.to(device), inputs)
    disagrees = None
    if spec.mode == "tiny":  # the cheap first set: does the reference agree with itself?
        with gpu():
            again = _forward(model, inputs)
        if (why := compare_outputs(expected, again)) is not None:
            disagrees = (
                f"the task's reference is not deterministic: run twice on the same inputs it "
                f"gave different outputs ({why}), so no candidate can match it. A random op "
                "in forward (nn.Dropout in training mode, torch.randn) is the task's fault: "
                "make the model deterministic (self.eval() in __init__, dropout p=0, or its "
                "random tensors from get_inputs)"
            )
        del again
    # The worker gets the inputs through a file and the verdict compares on the host:
    # both leave the device once, now.
    inputs, expected = to_device(inputs, "cpu"), _to_host(expected)
    pressure = cuda_ooms() - ooms if device == "cuda" else 0
    return PreparedSet(
        spec, init, inputs, state, expected, dict(inst.overrides), note, pressure, disagrees
    )


def cuda_ooms() -> int:
    """Allocations this process's CUDA caching allocator has refused on the current
    device (raised as out-of-memory errors, caught or not); 0 before CUDA is used."""
    if not torch.cuda.is_initialized():
        return 0
    return int(torch.cuda.memory_stats().get("num_ooms", 0))


def _draw_inputs(inst, spec: InputSet, device: str) -> list:
    """The set's inputs under its seed, drawn on `device` (torch's global RNG: under
    TRUSTED_LOCK). On CUDA the task's `get_inputs` runs with CUDA as the default device,
    so a full-size KernelBench problem's GB of random inputs are drawn in milliseconds
    instead of a minute on one CPU core; a task whose `get_inputs` cannot run so is
    drawn on the CPU and moved."""
    if device == "cuda":
        try:
            with torch.device("cuda"):
                inputs = inst.inputs(spec.seed)
        except Exception as e:  # noqa: BLE001 - the CPU draw below says if it is the task
            log.debug("%s: drawing inputs on the GPU failed (%s); drawing on the CPU", inst, e)
            inputs = to_device(inst.inputs(spec.seed), "cuda")
    else:
        inputs = inst.inputs(spec.seed)
    if spec.dtype is not None:
        inputs = _float_tensors_map(inputs, lambda t: t.to(spec.dtype))
    return inputs


def widened_reference(task: Task, s: PreparedSet, device: str) -> Any:
    """The reference's outputs for set `s` computed in float64: the same parameters and
    inputs, float32 ones widened (the second look at a float32 near miss,
    `compare.compare_outputs`). An output the forward does not widen comes back as it is,
    and the comparison then keeps its first verdict. The caller holds the GPU gate's
    shared side, as for any reference pass. A set whose inputs were dropped once written
    for the worker is drawn again (the same seed, the same inputs)."""
    inputs = s.inputs
    if inputs is None:
        inputs = prepare_set(task, s.spec, device, model_state=s.state_dict).inputs
    with TRUSTED_LOCK:
        inst = instantiate(task, s.spec.mode, s.spec.budget)
        model, _ = _build_reference(
            inst, s.init_inputs, s.spec.param_seed, s.spec.dtype, s.state_dict
        )
    model = model.to(torch.float64).to(device)
    wide = _float_tensors_map(inputs, lambda t: t.double() if t.dtype == torch.float32 else t)
    return _to_host(_forward(model, to_device(wide, device)))


def _to_host(out: Any) -> Any:
    """Every tensor of an output, detached, on the CPU (other values as they are)."""
    if isinstance(out, torch.Tensor):
        return out.detach().cpu()
    if isinstance(out, (list, tuple)):
        return type(out)(_to_host(x) for x in out)
    return out
