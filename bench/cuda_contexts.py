"""How fast one GPU creates CUDA contexts when several processes ask at once.

    python bench/cuda_contexts.py [--api torch|driver] [--counts 1,4,8,16]

Forks N children of one parent (torch imported, CUDA not initialised) that each create a
context at the same moment, through torch (`torch.zeros(1, device="cuda")`) or the driver
API alone (cuInit, the primary context, one allocation), and prints, per N, the range of
the children's context times and the contexts created per second until all have exited.
Run it with and without CUDA_DEVICE_MAX_CONNECTIONS=1 to see what one hardware queue per
process changes (`verify.cuda_max_connections`). Measures; asserts nothing. CUDA only.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time


def make_context(api: str) -> None:
    if api == "driver":
        cu = ctypes.CDLL("libcuda.so.1")
        ctx, ptr = ctypes.c_void_p(), ctypes.c_void_p()
        ok = cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        ok = ok and cu.cuCtxSetCurrent(ctx) == 0 and cu.cuMemAlloc_v2(ctypes.byref(ptr), 1024) == 0
        if not ok:
            os._exit(1)
    else:
        import torch

        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()


def at_once(n: int, api: str) -> str:
    r, w = os.pipe()
    start = time.perf_counter()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            t = time.perf_counter()
            make_context(api)
            os.write(w, f"{time.perf_counter() - t:.3f}\n".encode())
            os._exit(0)
        pids.append(pid)
    os.close(w)
    for pid in pids:
        os.waitpid(pid, 0)
    total = time.perf_counter() - start
    times = sorted(float(x) for x in os.read(r, 1 << 16).decode().split())
    os.close(r)
    queues = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "-")
    if len(times) < n:
        raise SystemExit(f"{n - len(times)} of {n} children created no CUDA context (a GPU?)")
    return (f"{api}, CUDA_DEVICE_MAX_CONNECTIONS={queues}, {n} at once: each "
            f"{times[0]:.3f} to {times[-1]:.3f} s, all exited after {total:.3f} s: "
            f"{n / total:.1f} contexts/s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--api", choices=("torch", "driver"), default="torch")
    ap.add_argument("--counts", default="1,4,8,16")
    args = ap.parse_args()
    if args.api == "torch":
        import torch  # noqa: F401 - imported once, before the forks, as in a zygote
    for n in map(int, args.counts.split(",")):
        print(at_once(n, args.api), flush=True)


if __name__ == "__main__":
    main()
