"""Pooling family: 1-D and 2-D max and average pooling with a kernel size, stride and
padding (`nn.MaxPool1d`, `nn.AvgPool1d`, `nn.MaxPool2d`, `nn.AvgPool2d`; average pooling
counts the padding, PyTorch's default).

Signature: `pooling:<1d|2d>:<max|avg>:<pad|nopad>`. Held out: `HELDOUT` (padded 2-D
average pooling, unpadded 1-D max pooling).

The solution is one kernel: each program computes a block of outputs (rows x output
positions in 1-D, a block of one plane's outputs in 2-D), with the window unrolled
(`tl.static_range` over the constexpr kernel size) and the padding handled by masks
(`-inf` for max, 0 for average). One read of each input window and one write: the same
memory traffic as PyTorch's kernels, so parity is the expectation; overlapping windows
(stride < kernel size) re-read inputs through the cache.
"""

from __future__ import annotations

import random

from tritonrl.tasks.families.base import Drawn, launch, reference_source, size, solution_source

NAME = "pooling"
POLICY = "strict"
HELDOUT = frozenset({"pooling:2d:avg:pad", "pooling:1d:max:nopad"})

_POOL1D = """
@triton.jit
def {op}_pool1d_kernel(x_ptr, y_ptr, n_rows, L, L_out, KS: tl.constexpr, STRIDE: tl.constexpr,
                       PAD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ol = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    row_ok = rows < n_rows
    in_rows = rows.to(tl.int64)[:, None] * L
    acc = {init}
    for k in tl.static_range(KS):
        pos = ol * STRIDE - PAD + k
        ok = row_ok[:, None] & ((pos >= 0) & (pos < L))[None, :]
        x = tl.load(x_ptr + in_rows + pos[None, :], mask=ok, other={other}).to(tl.float32)
        {update}
    out_ok = row_ok[:, None] & (ol < L_out)[None, :]
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * L_out + ol[None, :], {result}, mask=out_ok)
"""

_POOL2D = """
@triton.jit
def {op}_pool2d_kernel(x_ptr, y_ptr, H, W, H_out, W_out, KS: tl.constexpr,
                       STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr):
    # One (sample, channel) plane per program row of the grid, BLOCK outputs of it each.
    plane = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < H_out * W_out
    oh = idx // W_out
    ow = idx % W_out
    x_plane = x_ptr + plane * H * W
    acc = {init}
    for kh in tl.static_range(KS):
        ih = oh * STRIDE - PAD + kh
        h_ok = out_ok & (ih >= 0) & (ih < H)
        for kw in tl.static_range(KS):
            iw = ow * STRIDE - PAD + kw
            ok = h_ok & (iw >= 0) & (iw < W)
            x = tl.load(x_plane + ih * W + iw, mask=ok, other={other}).to(tl.float32)
            {update}
    tl.store(y_ptr + plane * H_out * W_out + idx, {result}, mask=out_ok)
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
                 else 'tl.full((BLOCK,), float("-inf"), tl.float32)') if op == "max" else
                ("tl.zeros((BLOCK_R, BLOCK_L), tl.float32)" if dims == "1d"
                 else "tl.zeros((BLOCK,), tl.float32)"),
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
            "BLOCK_L = min(256, triton.next_power_of_2(L_out))",
            "BLOCK_R = max(1, min(triton.next_power_of_2(N * C), 2048 // BLOCK_L))",
            "grid = (triton.cdiv(N * C, BLOCK_R), triton.cdiv(L_out, BLOCK_L))",
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
            "BLOCK = min(1024, triton.next_power_of_2(H_out * W_out))",
            "grid = (N * C, triton.cdiv(H_out * W_out, BLOCK))",
            *launch(
                f"{op}_pool2d_kernel[grid]",
                "x, y, H, W, H_out, W_out, KS=ks, STRIDE=stride, PAD=pad, BLOCK=BLOCK",
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
