"""Pooling family: 1-D and 2-D max and average pooling with a kernel size, stride and
padding (`nn.MaxPool1d`, `nn.AvgPool1d`, `nn.MaxPool2d`, `nn.AvgPool2d`; average pooling
counts the padding, PyTorch's default).

Signature: `pooling:<1d|2d>:<max|avg>:<pad|nopad>`. Held out: `HELDOUT` (2-D average and
1-D max pooling, padded or not).

The solution is one kernel: each program computes a tile of outputs (rows x output
positions in 1-D, a rows x columns tile of one plane's outputs in 2-D, both indexed by
aranges, with no per-lane `//` or `%`), with the window unrolled (`tl.static_range`
over the constexpr kernel size) and the padding handled by masks (`-inf` for max, 0 for
average); without padding a valid output's window lies inside the input, so its loads
carry only the output mask (`PAD` is a constexpr: the bounds tests are compiled out).
One read of each input window and one write: the same memory traffic as PyTorch's
kernels (less for max pooling: eager CUDA computes it with indices and writes them, int64),
so parity or better is the expectation; overlapping windows (stride < kernel size)
re-read inputs through the cache.

Where it cannot reach eager PyTorch: in the reward's measure, which times each call with
its launch inside (as KernelBench's harness does). On the GPU alone the kernel beats
eager's at nearly every draw; but a Triton call costs some tens of microseconds more
than an eager PyTorch call, and at these sizes the kernel runs for about as long, so the
launch decides. The figures are in docs/benchmarks.md ("Task families' solutions through
the verifier").
"""

from __future__ import annotations

import random

from tritonrl.tasks.families.base import Drawn, launch, reference_source, size, solution_source

NAME = "pooling"
POLICY = "strict"
# Whole programs: the padding is a constant of the reference, so padded and unpadded
# pooling are one program (`tasks.normalize`'s program form) and are held out together.
HELDOUT = frozenset({"pooling:2d:avg:pad", "pooling:2d:avg:nopad", "pooling:1d:max:pad",
                     "pooling:1d:max:nopad"})  # fmt: skip

_POOL1D = """
@triton.jit
def {op}_pool1d_kernel(x_ptr, y_ptr, n_rows, L, L_out, KS: tl.constexpr, STRIDE: tl.constexpr,
                       PAD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ol = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    out_ok = (rows < n_rows)[:, None] & (ol < L_out)[None, :]
    in_rows = rows.to(tl.int64)[:, None] * L
    acc = {init}
    for k in tl.static_range(KS):
        pos = ol * STRIDE - PAD + k
        if PAD == 0:  # a valid output's window lies inside the row
            ok = out_ok
        else:
            ok = out_ok & ((pos >= 0) & (pos < L))[None, :]
        x = tl.load(x_ptr + in_rows + pos[None, :], mask=ok, other={other}).to(tl.float32)
        {update}
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * L_out + ol[None, :], {result}, mask=out_ok)
"""

_POOL2D = """
@triton.jit
def {op}_pool2d_kernel(x_ptr, y_ptr, H, W, H_out, W_out, n_w_blocks, KS: tl.constexpr,
                       STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK_H: tl.constexpr,
                       BLOCK_W: tl.constexpr):
    # One (sample, channel) plane per program row of the grid, a BLOCK_H x BLOCK_W tile
    # of its outputs each: rows and columns from aranges, no per-lane // or %.
    plane = tl.program_id(0).to(tl.int64)
    oh = (tl.program_id(1) // n_w_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = (tl.program_id(1) % n_w_blocks) * BLOCK_W + tl.arange(0, BLOCK_W)
    out_ok = (oh < H_out)[:, None] & (ow < W_out)[None, :]
    x_plane = x_ptr + plane * H * W
    acc = {init}
    for kh in tl.static_range(KS):
        ih = oh * STRIDE - PAD + kh
        for kw in tl.static_range(KS):
            iw = ow * STRIDE - PAD + kw
            if PAD == 0:  # a valid output's window lies inside the plane
                ok = out_ok
            else:
                ok = out_ok & ((ih >= 0) & (ih < H))[:, None] & ((iw >= 0) & (iw < W))[None, :]
            x = tl.load(x_plane + ih[:, None] * W + iw[None, :], mask=ok, other={other})
            x = x.to(tl.float32)
            {update}
    y_offs = plane * H_out * W_out + oh[:, None] * W_out + ow[None, :]
    tl.store(y_ptr + y_offs, {result}, mask=out_ok)
"""


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    dims = rng.choice(("1d", "2d"))
    op = rng.choice(("max", "avg"))
    padded = rng.random() < 0.5
    ks = rng.choice((2, 3, 4, 5))
    stride = rng.choice(sorted({1, 2, ks}))
    pad = rng.randint(1, ks // 2) if padded else 0
    batch = size(rng, small, (8, 32), (2, 3))
    channels = size(rng, small, (16, 64), (2, 4))
    if dims == "1d":
        shape = [("length", size(rng, small, (2048, 16384), (16, 100)))]
    else:
        shape = [("height", size(rng, small, (64, 256), (8, 20))),
                 ("width", size(rng, small, (64, 256), (8, 20)))]  # fmt: skip
    layer = f"nn.{'Max' if op == 'max' else 'Avg'}Pool{dims[0]}d"
    init_params = "kernel_size: int, stride: int, padding: int"
    init = [f"self.pool = {layer}(kernel_size=kernel_size, stride=stride, padding=padding)"]
    names = ", ".join(["batch_size", "channels", *(n for n, _ in shape)])
    source = reference_source(
        doc=f"Task family pooling (seed {seed}): {layer.removeprefix('nn.')} with kernel size, "
        "stride and padding.",
        forward_args="x: torch.Tensor",
        forward=["return self.pool(x)"],
        constants=[
            ("batch_size", batch),
            ("channels", channels),
            *shape,
            ("kernel_size", ks),
            ("stride", stride),
            ("padding", pad),
        ],  # fmt: skip
        inputs=[
            "# Continuous values of both signs: no ties, and padding must not win.",
            f"return [torch.randn({names})]",
        ],  # fmt: skip
        init_params=init_params,
        init=init,
        init_inputs="kernel_size, stride, padding",
    )
    fmt = {
        "op": op,
        "init": ('tl.full((BLOCK_R, BLOCK_L), float("-inf"), tl.float32)' if dims == "1d"
                 else 'tl.full((BLOCK_H, BLOCK_W), float("-inf"), tl.float32)') if op == "max" else
                ("tl.zeros((BLOCK_R, BLOCK_L), tl.float32)" if dims == "1d"
                 else "tl.zeros((BLOCK_H, BLOCK_W), tl.float32)"),
        "other": 'float("-inf")' if op == "max" else "0.0",
        "update": "acc = tl.maximum(acc, x)" if op == "max" else "acc += x",
        "result": "acc" if op == "max" else ("acc / KS" if dims == "1d" else "acc / (KS * KS)"),
    }  # fmt: skip
    head = [
        "x = x.contiguous()",
        "ks, stride, pad = self.pool.kernel_size, self.pool.stride, self.pool.padding",
    ]
    if dims == "1d":
        kernel = _POOL1D.format(**fmt)
        forward = [
            *head,
            *(
                [
                    "# AvgPool1d keeps its arguments as 1-tuples",
                    "ks, stride, pad = ks[0], stride[0], pad[0]",
                ]
                if op == "avg"
                else []
            ),  # fmt: skip
            "N, C, L = x.shape",
            "L_out = (L + 2 * pad - ks) // stride + 1",
            "y = torch.empty((N, C, L_out), device=x.device, dtype=x.dtype)",
            "BLOCK_L = min(256, 1 << (L_out - 1).bit_length())",
            "BLOCK_R = max(1, min(1 << (N * C - 1).bit_length(), 2048 // BLOCK_L))",
            "grid = ((N * C + BLOCK_R - 1) // BLOCK_R, (L_out + BLOCK_L - 1) // BLOCK_L)",
            *launch(
                f"{op}_pool1d_kernel[grid]",
                "x, y, N * C, L, L_out, KS=ks, STRIDE=stride, PAD=pad, BLOCK_R=BLOCK_R, "
                "BLOCK_L=BLOCK_L",
            ),
            "return y",
        ]
    else:
        kernel = _POOL2D.format(**fmt)
        forward = [
            *head,
            "N, C, H, W = x.shape",
            "H_out = (H + 2 * pad - ks) // stride + 1",
            "W_out = (W + 2 * pad - ks) // stride + 1",
            "y = torch.empty((N, C, H_out, W_out), device=x.device, dtype=x.dtype)",
            "BLOCK_W = min(64, 1 << (W_out - 1).bit_length())",
            "BLOCK_H = min(1024 // BLOCK_W, 1 << (H_out - 1).bit_length())",
            "n_w_blocks = (W_out + BLOCK_W - 1) // BLOCK_W",
            "grid = (N * C, (H_out + BLOCK_H - 1) // BLOCK_H * n_w_blocks)",
            *launch(
                f"{op}_pool2d_kernel[grid]",
                "x, y, H, W, H_out, W_out, n_w_blocks, KS=ks, STRIDE=stride, PAD=pad, "
                "BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W",
            ),
            "return y",
        ]
    solution = solution_source(
        doc=f"Triton solution: {op} pooling {dims}, the window unrolled, padding by masks.",
        kernels=kernel, forward_args="x: torch.Tensor", forward=forward,
        init_params=init_params, init=init,
    )  # fmt: skip
    return Drawn(
        signature=f"pooling:{dims}:{op}:{'pad' if padded else 'nopad'}",
        level=1,
        name=f"{'Max' if op == 'max' else 'Avg'}Pool{dims[0]}d" + ("_Padded" if padded else ""),
        source=source,
        solution=solution,
    )
