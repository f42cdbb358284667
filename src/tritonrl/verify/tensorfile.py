"""Tensors passed between the trusted side and the worker through the work dir.

`save(obj, path)` writes `obj` (tensors in nested lists, tuples and dicts, plus plain
values) as a small `torch.save` header at `path` and every tensor of at least
`RAW_MIN_BYTES` as raw bytes beside it (`path.0`, `path.1`, ...): a full-size KernelBench
problem moves several GB per input set, and `torch.save` checksums and copies every byte
on the way. A GPU tensor is written through a small pinned buffer, a chunk at a time,
never as a whole host copy (which costs seconds of page faults per GB and as much host
memory as the tensor). `load(path, mmap=...)` rebuilds the object; with `mmap` the raw
tensors are private mappings of their files (pages read when used; the caller may unlink
the names); with `lazy` they are `RawTensor`s, read a chunk at a time by whoever
consumes them (the output comparison).

The worker's files are untrusted: the header is read with `weights_only`, a raw part's
dtype must be one of `DTYPES`, its shape non-negative integers and its file exactly the
size they give, and the trusted side reads (never maps) them, so a worker cannot change
or truncate a tensor under it. What it does NOT do: compress, or keep strides (raw
tensors come back contiguous).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import torch

RAW_MIN_BYTES = 1 << 20
CHUNK_BYTES = 64 << 20  # the pinned staging buffer a GPU tensor is written through
DTYPES = {
    name: getattr(torch, name)
    for name in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
                 "int64", "uint8", "bool", "complex64", "complex128")
}  # fmt: skip
_MARK = "__tritonrl_raw__"
_STAGING: list[torch.Tensor] = []  # one pinned buffer per process, made on first use
_STAGING_LOCK = threading.Lock()


def save(obj: Any, path: Path) -> None:
    raws: list[torch.Tensor] = []

    def strip(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            name = str(x.dtype).removeprefix("torch.")
            if x.layout == torch.strided and name in DTYPES and _nbytes(x) >= RAW_MIN_BYTES:
                raws.append(x)
                return {_MARK: len(raws) - 1, "shape": list(x.shape), "dtype": name}
            return x.detach().cpu()  # small: in the header, on the host
        if isinstance(x, (list, tuple)):
            return type(x)(strip(v) for v in x)
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        return x

    header = strip(obj)
    for i, t in enumerate(raws):
        with open(f"{path}.{i}", "wb") as f:
            _write_raw(t, f)
    torch.save({"header": header, "raw": len(raws)}, path)  # last: the parts exist


def _write_raw(t: torch.Tensor, f) -> None:
    data = t.detach().reshape(-1).contiguous().view(torch.uint8)
    if data.device.type == "cpu":
        f.write(memoryview(data.numpy()))
        return
    with _STAGING_LOCK:
        if not _STAGING:
            _STAGING.append(torch.empty(CHUNK_BYTES, dtype=torch.uint8, pin_memory=True))
        stage = _STAGING[0]
        for start in range(0, data.numel(), CHUNK_BYTES):
            n = min(CHUNK_BYTES, data.numel() - start)
            stage[:n].copy_(data[start : start + n])
            f.write(memoryview(stage[:n].numpy()))


class RawTensor:
    """A raw part not read yet (`load(..., lazy=True)`): its shape and dtype, and its
    elements a range at a time (`read`). The file is the worker's: a read that comes up
    short raises ValueError."""

    is_raw_file_tensor = True  # what the output comparison looks for

    def __init__(self, file: Path, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.file, self.shape, self.dtype = file, torch.Size(shape), dtype

    def numel(self) -> int:
        return math.prod(self.shape)

    def read(self, start: int, out: torch.Tensor) -> torch.Tensor:
        """Elements [start, start + len(out)) of the flattened tensor, read into `out`
        (a 1-D tensor of this dtype, reused across calls)."""
        size = out.element_size()
        with open(self.file, "rb") as f:
            f.seek(start * size)
            if f.readinto(memoryview(out.view(torch.uint8).numpy())) != out.numel() * size:
                raise ValueError(f"{self.file.name} ended early")
        return out


def load(path: Path, mmap: bool = False, lazy: bool = False) -> Any:
    """`save`'s object; raises ValueError (or OSError) for a malformed or forged file."""
    data = torch.load(path, weights_only=True)
    if not isinstance(data, dict) or not isinstance(data.get("raw"), int):
        raise ValueError("not a tensor file")

    def fill(x: Any) -> Any:
        if isinstance(x, dict) and _MARK in x:
            return _raw(path, x, data["raw"], mmap, lazy)
        if isinstance(x, (list, tuple)):
            return type(x)(fill(v) for v in x)
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        return x

    return fill(data.get("header"))


def parts(path: Path) -> list[Path]:
    """The raw files beside `path` (to delete with it)."""
    return sorted(Path(path).parent.glob(Path(path).name + ".*"))


def _raw(path: Path, mark: dict, count: int, mmap: bool, lazy: bool) -> torch.Tensor | RawTensor:
    index, shape, dtype = mark.get(_MARK), mark.get("shape"), DTYPES.get(mark.get("dtype"))
    if not (isinstance(index, int) and 0 <= index < count and dtype is not None):
        raise ValueError("malformed raw tensor entry")
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise ValueError("malformed raw tensor shape")
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    file = Path(f"{path}.{index}")
    if file.stat().st_size != nbytes:
        raise ValueError(f"raw tensor file of {file.stat().st_size} bytes, expected {nbytes}")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    if lazy:
        return RawTensor(file, tuple(shape), dtype)
    if mmap:
        flat = torch.from_file(str(file), shared=False, size=nbytes, dtype=torch.uint8)
    else:
        flat = torch.empty(nbytes, dtype=torch.uint8)
        with open(file, "rb") as f:
            if f.readinto(memoryview(flat.numpy())) != nbytes:
                raise ValueError("raw tensor file ended early")
    return flat.view(dtype).reshape(shape)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
