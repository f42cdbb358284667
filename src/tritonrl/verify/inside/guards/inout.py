"""Checks on what goes into and comes out of a candidate's forward.

`snapshot_inputs` / `inputs_mutated` (docs/hacks.md #6, input mutation: values bit for bit,
shapes, strides, storage, non-tensor arguments), `refill_` (#7 output caching by
pointer, #8 cross-call deferral: same buffers, new data), `check_output_types` (#11 lazy
outputs, and `output_aliases_input`: returning an input or a view of one).

What it does NOT do: compare outputs with the reference (the trusted side does that,
from data the candidate never touched), or look inside outputs that are not tensors
beyond their type.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


def nested_leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of nested lists/tuples/dicts; paths look like "0", "1.2"."""
    if isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from nested_leaves(x, f"{path}.{i}" if path else str(i))
    elif isinstance(obj, dict):
        for k, x in obj.items():
            yield from nested_leaves(x, f"{path}.{k}" if path else str(k))
    else:
        yield path or "0", obj


@dataclass(frozen=True)
class _Saved:
    path: str
    value: Any  # a detached clone for tensors, a deep copy otherwise
    meta: tuple | None  # (shape, stride, dtype, device, data_ptr, storage_offset)


def _meta(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr(), t.storage_offset())


def snapshot_inputs(inputs: Any, host: Any = None) -> list[_Saved]:
    """Copies of the inputs to compare with after the call (docs/hacks.md #6, input mutation).

    `host`: the inputs' source on the host, shaped like `inputs` (the data the worker
    just copied onto the device). A device tensor whose source has its shape and dtype
    is saved as that source, not as a clone on the device: a full-size problem's input
    is GBs that the device would otherwise hold twice while the candidate runs."""
    sources = [x for _, x in nested_leaves(host)] if host is not None else []
    leaves = list(nested_leaves(inputs))
    if len(sources) != len(leaves):
        sources = [None] * len(leaves)
    saved = []
    for (path, x), src in zip(leaves, sources, strict=True):
        if isinstance(x, torch.Tensor):
            value = src if _host_copy_of(src, x) else x.detach().clone()
            saved.append(_Saved(path, value, _meta(x)))
        else:
            saved.append(_Saved(path, copy.deepcopy(x), None))
    return saved


def _host_copy_of(src: Any, x: torch.Tensor) -> bool:
    """Can `src` stand for `x`'s values (same shape and dtype, on the host, `x` not)?"""
    return (
        isinstance(src, torch.Tensor)
        and src.device.type == "cpu"
        and x.device.type != "cpu"
        and src.shape == x.shape
        and src.dtype == x.dtype
    )


SAME_BITS_CHUNK = 64 << 20  # bytes compared at a time across devices


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality; across devices a chunk at a time (`b` is never copied to
    `a`'s device whole)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    a8 = a.detach().contiguous().reshape(-1).view(torch.uint8)
    b8 = b.detach().contiguous().reshape(-1).view(torch.uint8)
    if a8.device == b8.device:
        return bool(torch.equal(a8, b8))
    for start in range(0, a8.numel(), SAME_BITS_CHUNK):
        chunk = slice(start, start + SAME_BITS_CHUNK)
        if not torch.equal(a8[chunk], b8[chunk].to(a8.device)):
            return False
    return True


def inputs_mutated(snapshot: list[_Saved], inputs: Any) -> list[str]:
    """What changed in `inputs` since `snapshot` (docs/hacks.md #6): values (compared bit for
    bit, so NaNs count), shape, strides, storage (set_ / .data swaps), non-tensor args."""
    leaves = list(nested_leaves(inputs))
    if len(leaves) != len(snapshot):
        return [f"input_mutation: {len(snapshot)} inputs became {len(leaves)}"]
    problems = []
    for saved, (path, x) in zip(snapshot, leaves, strict=True):
        if saved.meta is None:
            if not _equal_plain(saved.value, x):
                problems.append(f"input_mutation: input {path} changed")
            continue
        if not isinstance(x, torch.Tensor):
            problems.append(f"input_mutation: input {path} is no longer a tensor")
        elif _meta(x) != saved.meta:
            problems.append(f"input_mutation: input {path} storage/shape/strides changed")
        elif not _same_bits(x, saved.value):
            problems.append(f"input_mutation: input {path} values changed")
    return problems


def _equal_plain(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # comparisons of odd objects: treat as changed
        return False


def refill_(inputs: Any, source: Any) -> Any:
    """Refill the input tensors in place, same buffers, with new data (docs/hacks.md #7 output
    caching by pointer, #8 cross-call deferral: a cached or skipped result is now wrong).

    `source` is either new data shaped like `inputs` (the trusted side generated it and
    computes the reference on it: copied in), or a `torch.Generator` / int seed: then
    the data stays in the inputs' domain: floats are permuted and scaled by a factor in
    [0.5, 1) per element (signs, zeros and bounds like [0, 1] are kept; sums change),
    integers are redrawn within their old [min, max] (indices stay valid), bools are
    redrawn. Non-tensor inputs are left alone. Returns `inputs`.
    """
    targets = [x for _, x in nested_leaves(inputs)]
    if isinstance(source, (torch.Generator, int)):
        g = torch.Generator().manual_seed(source) if isinstance(source, int) else source
        new = [_fresh_like(x, g) if _refillable(x) else None for x in targets]
    else:
        new = [x for _, x in nested_leaves(source)]
        if len(new) != len(targets):
            raise ValueError(f"refill_: {len(new)} new values for {len(targets)} inputs")
    with torch.no_grad():
        for x, value in zip(targets, new, strict=True):
            if _refillable(x) and isinstance(value, torch.Tensor):
                x.copy_(value)  # straight from the host: no second copy on the device
    return inputs


def _refillable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.numel() > 0


def _fresh_like(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    flat = x.detach().reshape(-1).cpu()
    n = flat.numel()
    if x.dtype == torch.bool:
        new = torch.rand(n, generator=g) < 0.5
    elif x.dtype.is_floating_point or x.dtype.is_complex:
        perm = torch.randperm(n, generator=g)
        factor = 0.5 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64)
        new = (flat[perm].to(torch.complex128 if x.dtype.is_complex else torch.float64)
               * factor).to(x.dtype)  # fmt: skip
    else:
        lo, hi = int(flat.min()), int(flat.max())
        new = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64).to(x.dtype)
    return new.reshape(x.shape)


# ----- outputs ------------------------------------------------------------------------


def check_output_types(outputs: Any, inputs: Any) -> list[str]:
    """Outputs must be exactly `torch.Tensor` with plain strided storage, no instance
    attributes (overridden methods), no lazy conj/neg bits, and no storage shared with an
    input (docs/hacks.md #11 lazy outputs; `output_aliases_input`: returning an input or a
    view of one). Python scalars and None pass."""
    input_storages = {
        t.untyped_storage().data_ptr(): path
        for path, t in nested_leaves(inputs)
        if isinstance(t, torch.Tensor) and t.numel() > 0
    }
    problems: list[str] = []
    for path, out in nested_leaves(outputs):
        if out is None or type(out) in (int, float, bool):
            continue
        if type(out) is not torch.Tensor:
            problems.append(f"output_type: output {path} is {type(out).__qualname__}, "
                            "not exactly torch.Tensor")  # fmt: skip
            continue
        problems += [f"output_type: output {path} {p}" for p in _tensor_oddities(out)]
        if out.numel() > 0 and out.untyped_storage().data_ptr() in input_storages:
            src = input_storages[out.untyped_storage().data_ptr()]
            problems.append(f"output_aliases_input: output {path} shares storage with input {src}")
    return problems


def _tensor_oddities(t: torch.Tensor) -> list[str]:
    odd = []
    attrs = sorted(vars(t)) if hasattr(t, "__dict__") else []
    if attrs:
        odd.append(f"carries instance attributes {attrs}")
    if t.layout != torch.strided or t.is_sparse or t.is_quantized or t.is_meta:
        odd.append(f"has layout {t.layout} (need plain strided storage)")
    if getattr(t, "is_nested", False):
        odd.append("is a nested tensor")
    if t.is_conj() or t.is_neg():
        odd.append("has a lazy conj/neg bit")
    if type(t.untyped_storage()) is not torch.UntypedStorage:
        odd.append(f"has storage {type(t.untyped_storage()).__qualname__}")
    return odd
