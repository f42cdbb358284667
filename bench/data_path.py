"""What moving one full-size KernelBench tensor costs: 4096 x 393216 float32 (6.4 GB),
the size of level 1's element-wise problems, between the GPU, host memory and the work
dir, by each route the verifier could take.

    python bench/data_path.py [--dir /tmp] [--gb 6.4]

Prints one line per route with its seconds: a pageable device-to-host copy (fresh host
memory, so page faults included), a pinned buffer's allocation and copy, the raw-file
write and read of `tritonrl.verify.tensorfile` (read whole; mapped then moved to the
GPU, as the worker does) against `torch.save`, and a host-to-device copy. Run it once
plainly and once with THP_MEM_ALLOC_ENABLE=1 (torch's host allocations in huge pages),
the setting `import tritonrl` makes before torch loads. Measures; asserts nothing. CUDA
only.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from tritonrl.verify import tensorfile


def _timed(label: str, fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    print(f"{label}: {time.perf_counter() - start:.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--gb", type=float, default=4096 * 393216 * 4 / 1e9)
    args = ap.parse_args()
    n = int(args.gb * 1e9 / 4)
    print(f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}, {n * 4 / 1e9:.1f} GB")
    x = torch.rand(n, device="cuda")
    host = _timed("pageable device-to-host copy", x.cpu)
    _timed("pageable device-to-host copy, again", x.cpu)
    buffers = [_timed("pinned allocation", lambda: torch.empty(n, pin_memory=True))]
    _timed("copy into the pinned buffer", lambda: buffers[0].copy_(x))
    buffers.clear()
    path, other = Path(args.dir) / "tensorfile.pt", Path(args.dir) / "torchsave.pt"
    try:
        _timed("tensorfile.save from the host", lambda: tensorfile.save([host], path))
        _timed("tensorfile.save from the GPU (pinned chunks)", lambda: tensorfile.save([x], path))
        _timed("tensorfile.load, read whole", lambda: tensorfile.load(path))
        _timed(
            "tensorfile.load mapped, to the GPU", lambda: tensorfile.load(path, mmap=True)[0].cuda()
        )
        _timed("torch.save from the host", lambda: torch.save(host, other))
    finally:
        for p in [path, other, *tensorfile.parts(path)]:
            p.unlink(missing_ok=True)
    _timed("pageable host-to-device copy", host.cuda)


if __name__ == "__main__":
    main()
