"""Fused family (level 2, the verifier's partial policy): a convolution or linear layer
left to PyTorch, followed by an epilogue (per-channel bias, scale, activation, clamp)
fused into one Triton kernel.

Under the partial policy (`verify.policy: partial`) the candidate may call the torch ops
named in `verify.allowed_torch_ops`; these solutions need `conv1d`, `conv2d` and
`linear` among them (`tritonrl.config.PARTIAL_TORCH_OPS`, the partial policy's default,
has them). Their prompts say partial, and the verifier follows: where the config is
strict, these tasks alone are verified under partial (`verify_config_for`).

Signature: `fused:<conv1d|conv2d|linear>:<epilogue tags>`. Held out (`HELDOUT`): 2-D
convolutions with a tanh, and linear layers with both a scale and a clamp.

The solution keeps the layer (cuDNN / cuBLAS do the heavy part) and replaces eager's
chain of element-wise passes over the layer's output by one in-place kernel: one read
and one write of the output, the channel of each element found from its flat index.
The layer itself is no faster than eager; the gain is the epilogue's passes saved.
"""

from __future__ import annotations

import random

from tritonrl.tasks.families.base import (
    Drawn,
    Heldout,
    launch,
    reference_source,
    size,
    solution_source,
)
from tritonrl.tasks.families.epilogue import (
    Op,
    draw_epilogue,
    scalar_names,
    scalar_values,
    tags,
    torch_lines,
    triton_lines,
)

NAME = "fused"
POLICY = "partial"
LAYERS = ("conv1d", "conv2d", "linear")
HELDOUT = Heldout(
    lambda sig: (
        (sig.startswith("fused:conv2d:") and "tanh" in sig)
        or (sig.startswith("fused:linear:") and "scale" in sig and "clamp" in sig)
    ),
    "2-D convolutions with a tanh; linear layers with both a scale and a clamp",
)

_KERNEL = """
@triton.jit
def epilogue_kernel(x_ptr, {bias_ptr}y_ptr, n, C, inner,{scalars} BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    v = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
{lines}
    tl.store(y_ptr + offs, v, mask=ok)
"""


def _layer(layer: str, rng: random.Random, small: bool):
    """(init parameters, layer line, constants, input shape, bias shape)."""
    batch = size(rng, small, (16, 128), (2, 4))
    if layer == "linear":
        fin = size(rng, small, (512, 4096), (16, 64))
        fout = size(rng, small, (512, 4096), (16, 64))
        return ("in_features, out_features", "nn.Linear(in_features, out_features)",
                [("batch_size", batch), ("in_features", fin), ("out_features", fout)],
                "batch_size, in_features", "out_features", "in_features, out_features")  # fmt: skip
    cin = size(rng, small, (3, 64), (3, 6))
    cout = size(rng, small, (16, 128), (8, 12))
    ks = rng.choice((3, 5)) if layer == "conv2d" else rng.choice((3, 5, 7))
    consts = [("batch_size", batch), ("in_channels", cin), ("out_channels", cout)]
    if layer == "conv2d":
        spatial = [("height", size(rng, small, (64, 256), (8, 16))),
                   ("width", size(rng, small, (64, 256), (8, 16)))]  # fmt: skip
        shape, bias = "batch_size, in_channels, height, width", "out_channels, 1, 1"
    else:
        spatial = [("length", size(rng, small, (1024, 8192), (16, 64)))]
        shape, bias = "batch_size, in_channels, length", "out_channels, 1"
    return ("in_channels, out_channels, kernel_size",
            f"nn.Conv{layer[4]}d(in_channels, out_channels, kernel_size)",
            [*consts, *spatial, ("kernel_size", ks)], shape, bias,
            "in_channels, out_channels, kernel_size")  # fmt: skip


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    layer = rng.choice(LAYERS)
    ops = draw_epilogue(rng, ("bias", "scale", "act", "clamp"))
    if not ops:
        ops = (Op("act", "relu"),)
    params, layer_line, consts, shape, bias_shape, init_inputs = _layer(layer, rng, small)
    has_bias = any(op.kind == "bias" for op in ops)
    scalars = scalar_names(ops)
    init_params = ", ".join([params, *scalars])
    init = [f"self.layer = {layer_line}"]
    if has_bias:
        init.append(f"self.bias = nn.Parameter(torch.randn({bias_shape}) * 0.1)")
    init += [f"self.{s} = {s}" for s in scalars]
    what = " -> ".join([layer.capitalize() if layer == "linear" else layer.upper()]
                       + [op.title for op in ops])  # fmt: skip
    source = reference_source(
        doc=f"Task family fused (seed {seed}): {what}.",
        forward_args="x: torch.Tensor",
        forward=["x = self.layer(x)", *torch_lines(ops), "return x"],
        constants=[*consts, *scalar_values(ops)],
        inputs=[f"return [torch.randn({shape})]"],
        init_params=init_params,
        init=init,
        init_inputs=", ".join([init_inputs, *scalars]),
    )
    lines = triton_lines(
        ops, bias="tl.load(bias_ptr + (offs // inner) % C, mask=ok, other=0.0)", residual=""
    )
    kernel = _KERNEL.format(
        bias_ptr="bias_ptr, " if has_bias else "",
        scalars="".join(f" {s}," for s in scalars),
        lines="\n".join(f"    {line}" for line in lines),
    )
    forward = [
        "# The layer stays in PyTorch (allowed by the partial policy); its epilogue is fused.",
        "x = self.layer(x).contiguous()",
        "n = x.numel()",
        "C = x.shape[1]",
        "inner = n // (x.shape[0] * C)  # elements per channel of one sample",
        "BLOCK = 1024",
        "# In place: the layer's output is ours, and one buffer less is read back.",
        *launch(
            "epilogue_kernel[((n + BLOCK - 1) // BLOCK,)]",
            ("x, self.bias, " if has_bias else "x, ")
            + "x, n, C, inner, "
            + "".join(f"self.{s}, " for s in scalars)
            + "BLOCK=BLOCK",
        ),
        "return x",
    ]
    solution = solution_source(
        doc=f"Triton solution: {what}; the layer in PyTorch, the epilogue one Triton kernel.",
        kernels=kernel, forward_args="x: torch.Tensor", forward=forward,
        init_params=init_params, init=init,
    )  # fmt: skip
    name = "_".join([{"conv1d": "Conv1d", "conv2d": "Conv2d", "linear": "Gemm"}[layer]]
                    + [op.title for op in ops])  # fmt: skip
    return Drawn(
        signature=f"fused:{layer}:{tags(ops)}", level=2, name=name, source=source,
        solution=solution,
    )  # fmt: skip
