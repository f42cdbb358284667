"""Convolution family: 1-D and 2-D convolutions (`nn.Conv1d`, `nn.Conv2d`) with kernel
size, stride, padding, dilation and groups drawn (pointwise and grouped among them),
depthwise 2-D convolutions, and 1-D and 2-D transposed convolutions
(`nn.ConvTranspose1d`, `nn.ConvTranspose2d`, output padding drawn), with or without bias.

Signature: `conv:<1d|2d>:<conv|transposed|depthwise>:<bias|nobias>`; the sizes, the
kernel size, stride, padding, dilation and groups are constants of the program.
Held out: `HELDOUT` (the 1-D transposed convolutions, with and without bias).

The solutions compute every output in the kernel, reading the module's own weight and
bias (the reference's `nn.Conv*` layer kept in `ModelNew` to hold them):
* conv and transposed: each program takes one (sample, group), a block of output
  positions and a block of the group's output channels, and accumulates the outer
  products of an input column and a weight row over the group's input channels and the
  kernel taps (unrolled, `tl.static_range`), in fp32 (IEEE, no TF32). A transposed
  convolution gathers: output position o reads input (o + pad - k * dil) / stride where
  that divides exactly and lies inside the input.
* depthwise: one (sample, channel) plane a program, a rows x columns tile of its outputs,
  one weight scalar a tap.

Where it cannot reach eager PyTorch: cuDNN's convolutions run implicit GEMMs on the
tensor cores (TF32 by default for float32), where these kernels run the same
multiply-adds on the CUDA cores one tap at a time; they are the plain, verifiable form of
each op (the verifier holds them to float32 accuracy), not a fast one.
"""

from __future__ import annotations

import random

from tritonrl.tasks.families.base import Drawn, launch, reference_source, size, solution_source

NAME = "conv"
POLICY = "strict"
HELDOUT = frozenset({"conv:1d:transposed:bias", "conv:1d:transposed:nobias"})

# The accumulation over one input channel's taps: 1-D and 2-D, direct and transposed.
# `x_c` points at the input channel's plane, `w_c` at the weights of (channel, co).
_TAPS = {
    ("1d", "conv"): """\
for k in tl.static_range(K):
    il = ol * STRIDE - PAD + k * DIL
    ok = o_ok & (il >= 0) & (il < L)
    xv = tl.load(x_c + il, mask=ok, other=0.0)
    wv = tl.load(w_c + k, mask=co_ok, other=0.0)
    acc += xv[:, None] * wv[None, :]""",
    ("1d", "transposed"): """\
for k in tl.static_range(K):
    num = ol + PAD - k * DIL
    il = num // STRIDE
    ok = o_ok & (num >= 0) & (num % STRIDE == 0) & (il < L)
    xv = tl.load(x_c + il, mask=ok, other=0.0)
    wv = tl.load(w_c + k, mask=co_ok, other=0.0)
    acc += xv[:, None] * wv[None, :]""",
    ("2d", "conv"): """\
for kh in tl.static_range(KH):
    ih = oh * SH - PH + kh * DH
    for kw in tl.static_range(KW):
        iw = ow * SW - PW + kw * DW
        ok = o_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        xv = tl.load(x_c + ih * W + iw, mask=ok, other=0.0)
        wv = tl.load(w_c + kh * KW + kw, mask=co_ok, other=0.0)
        acc += xv[:, None] * wv[None, :]""",
    ("2d", "transposed"): """\
for kh in tl.static_range(KH):
    nh = oh + PH - kh * DH
    ih = nh // SH
    h_ok = (nh >= 0) & (nh % SH == 0) & (ih < H)
    for kw in tl.static_range(KW):
        nw = ow + PW - kw * DW
        iw = nw // SW
        ok = o_ok & h_ok & (nw >= 0) & (nw % SW == 0) & (iw < W)
        xv = tl.load(x_c + ih * W + iw, mask=ok, other=0.0)
        wv = tl.load(w_c + kh * KW + kw, mask=co_ok, other=0.0)
        acc += xv[:, None] * wv[None, :]""",
}

_KERNEL = """
@triton.jit
def {name}_kernel(x_ptr, w_ptr, {b_ptr}y_ptr, {sizes}, cin_g, cout_g, G,
                  {consts}, BLOCK_O: tl.constexpr, BLOCK_CO: tl.constexpr):
    # One (sample, group) per program row; a block of output positions and a block of
    # the group's output channels a program.
    n = tl.program_id(0) // G
    g = tl.program_id(0) % G
    o = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    co = tl.program_id(2) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    o_ok = o < {n_out}
    co_ok = co < cout_g
{position}
    acc = tl.zeros((BLOCK_O, BLOCK_CO), tl.float32)
    x_n = x_ptr + n.to(tl.int64) * cin_g * G * {n_in}
    for ci in range(0, cin_g):
        c = g * cin_g + ci
        x_c = x_n + c * {n_in}
        w_c = w_ptr + {w_offset} * {taps}
{taps_loop}
{bias}
    y_c = (n * cout_g * G + g * cout_g + co).to(tl.int64) * {n_out}
    tl.store(y_ptr + y_c[None, :] + o[:, None], acc, mask=o_ok[:, None] & co_ok[None, :])
"""

_DEPTHWISE = """
@triton.jit
def depthwise_conv2d_kernel(x_ptr, w_ptr, {b_ptr}y_ptr, C, H, W, H_out, W_out, n_w_blocks,
                            KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr,
                            SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                            DH: tl.constexpr, DW: tl.constexpr, BLOCK_H: tl.constexpr,
                            BLOCK_W: tl.constexpr):
    # One (sample, channel) plane per program row, a BLOCK_H x BLOCK_W tile of its
    # outputs each; channel c convolves input channel c alone.
    plane = tl.program_id(0)
    c = plane % C
    oh = (tl.program_id(1) // n_w_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = (tl.program_id(1) % n_w_blocks) * BLOCK_W + tl.arange(0, BLOCK_W)
    out_ok = (oh < H_out)[:, None] & (ow < W_out)[None, :]
    x_plane = x_ptr + plane.to(tl.int64) * H * W
    acc = tl.zeros((BLOCK_H, BLOCK_W), tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * SH - PH + kh * DH
        for kw in tl.static_range(KW):
            iw = ow * SW - PW + kw * DW
            ok = out_ok & ((ih >= 0) & (ih < H))[:, None] & ((iw >= 0) & (iw < W))[None, :]
            xv = tl.load(x_plane + ih[:, None] * W + iw[None, :], mask=ok, other=0.0)
            acc += xv * tl.load(w_ptr + (c * KH + kh) * KW + kw)
{bias}
    y_offs = plane.to(tl.int64) * H_out * W_out + oh[:, None] * W_out + ow[None, :]
    tl.store(y_ptr + y_offs, acc, mask=out_ok)
"""


def _pair(rng: random.Random, choices: tuple[int, ...], square: float = 0.6) -> tuple[int, int]:
    """A (height, width) pair from `choices`: the same value twice with probability
    `square`, else two draws."""
    a = rng.choice(choices)
    return (a, a) if rng.random() < square else (a, rng.choice(choices))


def _arg(pair: tuple[int, int] | int) -> int | tuple[int, int]:
    """A layer argument as KernelBench writes it: an int where both axes agree."""
    if isinstance(pair, tuple) and pair[0] == pair[1]:
        return pair[0]
    return pair


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    dims = rng.choice(("1d", "2d"))
    kind = rng.choice(
        ("conv", "transposed", "depthwise") if dims == "2d" else ("conv", "transposed")
    )
    bias = rng.random() < 0.5
    batch = size(rng, small, (4, 16), (1, 2))
    if dims == "1d":
        spatial = [("length", size(rng, small, (256, 4096), (7, 24)))]
        k, stride = rng.choice((1, 3, 5, 7)), rng.choice((1, 1, 2, 3))
        pad, dil = rng.randint(0, k // 2), rng.choice((1, 1, 2))
    else:
        spatial = [("height", size(rng, small, (32, 160), (5, 11))),
                   ("width", size(rng, small, (32, 160), (5, 11)))]  # fmt: skip
        k = _pair(rng, (1, 3, 5) if small else (1, 3, 5, 7))
        stride = _pair(rng, (1, 1, 2), square=0.8)
        pad = tuple(rng.randint(0, kk // 2) for kk in k)
        dil = _pair(rng, (1, 1, 2), square=0.8)
    if kind == "depthwise":
        c_in = size(rng, small, (8, 64), (2, 4))
        c_out, groups = c_in, c_in
    else:
        groups = rng.choice((1, 1, 1, 2, 4))
        c_in = groups * size(rng, small, (2, 16), (1, 2))
        c_out = groups * size(rng, small, (4, 32), (1, 3))
    out_pad = 0
    if kind == "transposed":
        s_min = stride if dims == "1d" else min(stride)
        d_min = dil if dims == "1d" else min(dil)
        if max(s_min, d_min) > 1 and rng.random() < 0.5:
            out_pad = 1  # below the stride or the dilation on every axis: PyTorch's rule
    layer = ("nn.ConvTranspose" if kind == "transposed" else "nn.Conv") + dims[0] + "d"
    args = ["in_channels", "out_channels", "kernel_size", "stride=stride", "padding=padding"]
    if out_pad:
        args.append("output_padding=output_padding")
    args += ["dilation=dilation", "groups=groups", "bias=bias"]
    init_names = ["in_channels", "out_channels", "kernel_size", "stride", "padding"]
    init_names += [*(["output_padding"] if out_pad else []), "dilation", "groups", "bias"]
    init = launch(f"self.conv = {layer}", ", ".join(args))
    constants = [
        ("batch_size", batch), ("in_channels", c_in), ("out_channels", c_out),
        *spatial, ("kernel_size", _arg(k)), ("stride", _arg(stride)), ("padding", _arg(pad)),
        *([("output_padding", out_pad)] if out_pad else []),
        ("dilation", _arg(dil)), ("groups", groups), ("bias", bias),
    ]  # fmt: skip
    what = {"conv": "convolution", "transposed": "transposed convolution",
            "depthwise": "depthwise convolution"}[kind]  # fmt: skip
    names = ", ".join(["batch_size", "in_channels", *(n for n, _ in spatial)])
    source = reference_source(
        doc=f"Task family conv (seed {seed}): a {dims.upper()} {what}"
        + (" with bias." if bias else " without bias."),
        forward_args="x: torch.Tensor",
        forward=["return self.conv(x)"],
        constants=constants,
        inputs=[f"return [torch.randn({names})]"],
        init_params=", ".join(init_names),
        init=init,
        init_inputs=", ".join(init_names),
    )
    if kind == "depthwise":
        kernel, forward = _depthwise(bias)
    else:
        kernel, forward = _direct(dims, kind, bias)
    solution = solution_source(
        doc=f"Triton solution: {dims.upper()} {what}, the taps unrolled, fp32 accumulation.",
        kernels=kernel, forward_args="x: torch.Tensor", forward=forward,
        init_params=", ".join(init_names), init=init,
    )  # fmt: skip
    title = {"conv": "Conv", "transposed": "ConvTranspose", "depthwise": "DepthwiseConv"}[kind]
    return Drawn(
        signature=f"conv:{dims}:{kind}:{'bias' if bias else 'nobias'}",
        level=1,
        name=f"{title}{dims[0]}d" + ("_Bias" if bias else ""),
        source=source,
        solution=solution,
    )


def _direct(dims: str, kind: str, bias: bool) -> tuple[str, list[str]]:
    """The kernel and forward of a direct or transposed convolution."""
    transposed = kind == "transposed"
    name = f"conv{'_transpose' if transposed else ''}{dims}"
    if dims == "1d":
        sizes, n_in, n_out, taps = "L, L_out", "L", "L_out", "K"
        consts = "K: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, DIL: tl.constexpr"
        position = "    ol = o"
    else:
        sizes, n_in, n_out, taps = "H, W, H_out, W_out", "H * W", "H_out * W_out", "KH * KW"
        consts = ", ".join(f"{c}: tl.constexpr" for c in ("KH", "KW", "SH", "SW", "PH", "PW",
                                                            "DH", "DW"))  # fmt: skip
        position = "    oh = o // W_out\n    ow = o % W_out"
    # weights: conv [C_out, cin_g, *k]; transposed [C_in, cout_g, *k]
    w_offset = "(c * cout_g + co)" if transposed else "((g * cout_g + co) * cin_g + ci)"
    bias_lines = (
        "    acc += tl.load(b_ptr + g * cout_g + co, mask=co_ok, other=0.0)[None, :]"
        if bias
        else ""
    )
    kernel = _KERNEL.format(
        name=name, b_ptr="b_ptr, " if bias else "", sizes=sizes, consts=consts,
        n_out=n_out, n_in=n_in, position=position, w_offset=w_offset, taps=taps,
        taps_loop="\n".join("        " + line for line in _TAPS[(dims, kind)].splitlines()),
        bias=bias_lines,
    )  # fmt: skip
    head = ["x = x.contiguous()", "conv = self.conv"]
    if dims == "1d":
        shape = [
            "N, C_in, L = x.shape",
            "(K,), (stride,), (pad,), (dil,) = conv.kernel_size, conv.stride, conv.padding, "
            "conv.dilation",
        ]
        if transposed:
            shape.append(
                "L_out = (L - 1) * stride - 2 * pad + dil * (K - 1) + conv.output_padding[0] + 1"
            )
        else:
            shape.append("L_out = (L + 2 * pad - dil * (K - 1) - 1) // stride + 1")
        out_shape, n_out_expr = "(N, C_out, L_out)", "L_out"
        consts_args = "K=K, STRIDE=stride, PAD=pad, DIL=dil"
        size_args = "L, L_out"
    else:
        shape = [
            "N, C_in, H, W = x.shape",
            "(KH, KW), (SH, SW) = conv.kernel_size, conv.stride",
            "(PH, PW), (DH, DW) = conv.padding, conv.dilation",
        ]
        if transposed:
            shape += [
                "OPH, OPW = conv.output_padding",
                "H_out = (H - 1) * SH - 2 * PH + DH * (KH - 1) + OPH + 1",
                "W_out = (W - 1) * SW - 2 * PW + DW * (KW - 1) + OPW + 1",
            ]
        else:
            shape += [
                "H_out = (H + 2 * PH - DH * (KH - 1) - 1) // SH + 1",
                "W_out = (W + 2 * PW - DW * (KW - 1) - 1) // SW + 1",
            ]
        out_shape, n_out_expr = "(N, C_out, H_out, W_out)", "H_out * W_out"
        consts_args = "KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, DH=DH, DW=DW"
        size_args = "H, W, H_out, W_out"
    forward = [
        *head,
        *shape,
        "G = conv.groups",
        "C_out = conv.out_channels",
        "cin_g, cout_g = C_in // G, C_out // G",
        f"y = torch.empty({out_shape}, device=x.device, dtype=x.dtype)",
        f"n_out = {n_out_expr}",
        "BLOCK_CO = min(32, 1 << (cout_g - 1).bit_length())",
        "BLOCK_O = max(16, min(128, 4096 // BLOCK_CO, 1 << (n_out - 1).bit_length()))",
        "grid = (N * G, (n_out + BLOCK_O - 1) // BLOCK_O, (cout_g + BLOCK_CO - 1) // BLOCK_CO)",
        *launch(
            f"{name}_kernel[grid]",
            f"x, conv.weight, {'conv.bias, ' if bias else ''}y, {size_args}, cin_g, cout_g, G, "
            f"{consts_args}, BLOCK_O=BLOCK_O, BLOCK_CO=BLOCK_CO",
        ),
        "return y",
    ]
    return kernel, forward


def _depthwise(bias: bool) -> tuple[str, list[str]]:
    """The kernel and forward of a depthwise 2-D convolution (groups = channels)."""
    kernel = _DEPTHWISE.format(
        b_ptr="b_ptr, " if bias else "",
        bias="    acc += tl.load(b_ptr + c)" if bias else "",
    )
    forward = [
        "x = x.contiguous()",
        "conv = self.conv",
        "N, C, H, W = x.shape",
        "(KH, KW), (SH, SW) = conv.kernel_size, conv.stride",
        "(PH, PW), (DH, DW) = conv.padding, conv.dilation",
        "H_out = (H + 2 * PH - DH * (KH - 1) - 1) // SH + 1",
        "W_out = (W + 2 * PW - DW * (KW - 1) - 1) // SW + 1",
        "y = torch.empty((N, C, H_out, W_out), device=x.device, dtype=x.dtype)",
        "BLOCK_W = min(64, 1 << (W_out - 1).bit_length())",
        "BLOCK_H = min(1024 // BLOCK_W, 1 << (H_out - 1).bit_length())",
        "n_w_blocks = (W_out + BLOCK_W - 1) // BLOCK_W",
        "grid = (N * C, (H_out + BLOCK_H - 1) // BLOCK_H * n_w_blocks)",
        *launch(
            "depthwise_conv2d_kernel[grid]",
            f"x, conv.weight, {'conv.bias, ' if bias else ''}y, C, H, W, H_out, W_out, "
            "n_w_blocks, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, DH=DH, DW=DW, "
            "BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W",
        ),
        "return y",
    ]
    return kernel, forward
