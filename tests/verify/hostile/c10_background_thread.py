"""docs/hacks.md #10, background threads: forward returns at once, a thread does the work.

Trick: forward allocates the output, hands the launch to a long-lived worker thread and
returns immediately. A timer around forward measures almost nothing; by the time a
slow checker compares, the thread may have finished and the output is right. The
thread stays alive waiting for more jobs, like a real "async executor" would.

Expect: task=builtin:level1/1_ReLU static=threading runtime=background_thread
"""

import queue
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl

_JOBS = queue.Queue()


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def _serve():
    while True:
        x, y = _JOBS.get()
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)


_WORKER = []


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _WORKER:
            t = threading.Thread(target=_serve, daemon=True, name="prefetch")
            t.start()
            _WORKER.append(t)
        y = torch.empty_like(x)
        relu_kernel[(1,)](x, y, 1, BLOCK=16)  # one element now, the rest later
        _JOBS.put((x, y))
        return y
