"""Output comparison for the verifier: the per-dtype tolerances, the element-wise check
of a candidate's outputs against the reference's (tensors, or a worker's outputs still in
their files, read a chunk at a time), how much of a wrong output holds another set's
answer (`stale_share`: a cached result), and which device a run uses.

What it does NOT do: run anything, or decide a verdict (the funnel does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# (atol, rtol) per dtype: |out - ref| <= atol + rtol * |ref| (+ the allowance below)
# element-wise.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}

# The accumulation-order allowance, per dtype: every element may also differ by this
# share of the reference output's mean |value|. Summing the same float32 products in
# another order (a blocked matmul, a split reduction) moves each output by a rounding
# error that grows with what was summed, not with the output itself: an element that
# cancels to near 0 at the end of a long sum then misses atol + rtol * |ref| however
# honest the kernel. Measured on the CPU (summing over K = 4,096-65,536 in blocks of 64
# against one torch.matmul): at most 6e-6 of the mean |output|; products taken in TF32
# or float16 err by about 3e-4 of it, bfloat16 by 2e-3, and still fail everywhere.
ORDER_ALLOWANCE: dict[torch.dtype, float] = {torch.float32: 2.5e-5}

# A float32 output that still misses, by at most NEAR_MISS of the reference's largest
# |value|, gets a second look when the caller can give the reference's outputs in float64
# (`widened`): the allowance is then ORDER_FACTOR times the float32 reference's own worst
# rounding error on that set, measured against float64, and the candidate is held to the
# float64 outputs. That error has passed through whatever followed the sum (an epilogue
# that shrinks its outputs shrinks it too), which the share of the mean |output| above
# cannot know; a TF32, float16 or bfloat16 product errs by hundreds of times more.
NEAR_MISS = 1e-3
ORDER_FACTOR = 4.0


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when a GPU is visible, else `cpu`."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; use auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device")
    return device


def flatten_outputs(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)):
        return [y for x in out for y in flatten_outputs(x)]
    return [out]


def compare_outputs(ref: Any, new: Any, widened: Callable[[], Any] | None = None) -> str | None:
    """None when `new` matches `ref` within the per-dtype tolerance, else the reason.
    `widened`: gives the reference's outputs computed in float64 (called at most once,
    only for a float32 near miss; see NEAR_MISS)."""
    refs, news = flatten_outputs(ref), flatten_outputs(new)
    wide: list[Any] = []

    def widened_output(i: int) -> Any:
        if not wide:
            wide.append(flatten_outputs(widened()) if widened is not None else [])
        return wide[0][i] if i < len(wide[0]) else None

    if len(refs) != len(news):
        return f"expected {len(refs)} outputs, got {len(news)}"
    for i, (r, n) in enumerate(zip(refs, news, strict=False)):
        if not isinstance(r, torch.Tensor):
            if r != n:
                return f"output {i}: expected {r!r}, got {n!r}"
            continue
        if type(n) is not torch.Tensor and not getattr(n, "is_raw_file_tensor", False):
            return f"output {i}: expected a torch.Tensor, got {type(n).__name__}"
        if n.shape != r.shape:
            return f"output {i}: shape {tuple(n.shape)}, expected {tuple(r.shape)}"
        if n.dtype != r.dtype:
            return f"output {i}: dtype {n.dtype}, expected {r.dtype}"
        atol, rtol = TOLERANCES.get(r.dtype, (0.0, 0.0))
        share = ORDER_ALLOWANCE.get(r.dtype, 0.0)
        order = share * _mean_abs(r) if share else 0.0
        reason, worst = _compare_tensor(r, n, atol + order, rtol)
        near = reason and widened is not None and r.dtype == torch.float32
        if near and worst < float("inf") and worst <= NEAR_MISS * _max_abs(r):
            reason = _against_float64(r, n, widened_output(i), atol + order, rtol) and reason
        if reason:
            return f"output {i}: {reason}"
    return None


def _against_float64(r: torch.Tensor, n: Any, r64: Any, atol: float, rtol: float) -> str | None:
    """The second look at a float32 near miss: `n` against the float64 outputs `r64`,
    allowed `atol` plus ORDER_FACTOR times the float32 reference `r`'s own worst error.
    None when it passes; a reason when it does not, or when `r64` is not a float64 tensor
    of `r`'s shape (the task's forward did not widen)."""
    if not (isinstance(r64, torch.Tensor) and r64.dtype == torch.float64 and r64.shape == r.shape):
        return "no float64 reference"
    own = _compare_tensor(r64, r, 0.0, 0.0)[1]  # the float32 reference's worst error
    return _compare_tensor(r64, n, atol + ORDER_FACTOR * own, rtol)[0]


COMPARE_CHUNK = 1 << 24  # elements compared at a time: bounded memory for GB outputs


def _compare_tensor(r: torch.Tensor, n: Any, atol: float, rtol: float) -> tuple[str | None, float]:
    """Element-wise |n - r| <= atol + rtol |r| in float64, a chunk at a time (on the GPU
    when there is one and the tensor is large, where a host pass over GBs takes seconds):
    (None or the reason, the largest error of an element that failed, NaN references
    aside). `n` is a tensor, or a worker's output still in its file (`verify.tensorfile`),
    read a chunk at a time into one buffer."""
    device = _device_for(r)
    rf = r.detach().reshape(-1)
    chunk = _reader(n, rf.numel())
    bad_total, worst, ref_nan = 0, 0.0, 0
    for start in range(0, rf.numel(), COMPARE_CHUNK):
        k = min(COMPARE_CHUNK, rf.numel() - start)
        r64 = rf[start : start + k].to(device).double()
        n64 = chunk(start, k).to(device).double()
        r_nan, n_nan = torch.isnan(r64), torch.isnan(n64)
        if n_nan.any() and not torch.equal(n_nan, r_nan):
            return "NaN where the reference has none", float("inf")
        err = (n64 - r64).abs()
        # a finite reference value within the tolerance; any other only by equality (an
        # infinity by the same one, as torch.allclose has it: rtol x inf allows anything)
        close = torch.isfinite(r64) & (err <= atol + rtol * r64.abs())
        bad = ~((r_nan & n_nan) | (n64 == r64) | close)
        count = int(bad.sum())
        if count:
            bad_total += count
            ref_nan += int((bad & r_nan).sum())  # an error of NaN: no size to report
            sized = err[bad & ~r_nan]
            if sized.numel():
                worst = max(worst, sized.max().item())
    if bad_total:
        nan = f"; the reference is NaN at {ref_nan} of them" if ref_nan else ""
        return (
            f"{bad_total} of {r.numel()} elements differ "
            f"(max abs error {worst:.3g}, atol {atol:.3g}, rtol {rtol:.3g}){nan}"
        ), worst  # a NaN reference's elements aside: the float64 look may settle them
    return None, 0.0


def _max_abs(r: torch.Tensor) -> float:
    """The largest finite |value| of `r` (0 when none is finite), a chunk at a time."""
    device = _device_for(r)
    rf = r.detach().reshape(-1)
    top = 0.0
    for start in range(0, rf.numel(), COMPARE_CHUNK):
        r64 = rf[start : start + COMPARE_CHUNK].to(device).double().abs()
        r64[~torch.isfinite(r64)] = 0.0
        top = max(top, float(r64.max())) if r64.numel() else top
    return top


def _mean_abs(r: torch.Tensor) -> float:
    """The mean |value| of `r`'s finite elements, in float64, a chunk at a time."""
    device = _device_for(r)
    rf = r.detach().reshape(-1)
    total, count = 0.0, 0
    for start in range(0, rf.numel(), COMPARE_CHUNK):
        r64 = rf[start : start + COMPARE_CHUNK].to(device).double()
        finite = torch.isfinite(r64)
        total += float(r64.abs()[finite].sum())
        count += int(finite.sum())
    return total / count if count else 0.0


def _device_for(r: torch.Tensor) -> str:
    """Where a comparison runs: on the GPU when there is one and the tensor is large."""
    return "cuda" if r.numel() > COMPARE_CHUNK // 4 and torch.cuda.is_available() else "cpu"


def _reader(n: Any, numel: int):
    """`chunk(start, k)`: elements [start, start + k) of `n` flattened (a tensor, or a
    worker's output in its file, read into one reused buffer)."""
    if getattr(n, "is_raw_file_tensor", False):
        buffer = torch.empty(min(COMPARE_CHUNK, numel), dtype=n.dtype)
        return lambda start, k: n.read(start, buffer[:k])
    nf = n.detach().reshape(-1)
    return lambda start, k: nf[start : start + k]


def stale_share(stale: Any, fresh: Any, new: Any) -> float | None:
    """Of the elements where the answers `stale` and `fresh` (reference outputs of two
    sets of the same shapes) differ beyond the tolerance, the share where `new` (the
    candidate's outputs for the fresh set, tensors or still in their files) holds the
    stale answer within it. Near 1 for a cached result returned again; near 0 for a
    kernel that computed the fresh inputs, however inexactly. None when the shapes do
    not line up or the two answers do not differ anywhere."""
    stales, freshes, news = (flatten_outputs(x) for x in (stale, fresh, new))
    if not len(stales) == len(freshes) == len(news):
        return None
    hits = differ = 0
    for a, b, n in zip(stales, freshes, news, strict=True):
        if not all(isinstance(x, torch.Tensor) for x in (a, b)) or not (
            isinstance(n, torch.Tensor) or getattr(n, "is_raw_file_tensor", False)
        ):
            continue
        if not a.shape == b.shape == n.shape or not a.dtype == b.dtype == n.dtype:
            return None
        atol, rtol = TOLERANCES.get(b.dtype, (0.0, 0.0))
        device = _device_for(b)
        af, bf = a.detach().reshape(-1), b.detach().reshape(-1)
        chunk = _reader(n, bf.numel())
        for start in range(0, bf.numel(), COMPARE_CHUNK):
            k = min(COMPARE_CHUNK, bf.numel() - start)
            a64 = af[start : start + k].to(device).double()
            b64 = bf[start : start + k].to(device).double()
            n64 = chunk(start, k).to(device).double()
            apart = ~((a64 - b64).abs() <= atol + rtol * b64.abs())
            held = (n64 - a64).abs() <= atol + rtol * a64.abs()
            differ += int(apart.sum())
            hits += int((apart & held).sum())
    return hits / differ if differ else None
