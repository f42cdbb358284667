"""Losses family: MSE, Huber, hinge, KL divergence, cross-entropy and cosine-similarity
losses over a batch, reduced to one number.

Signature: `losses:<mse|huber|hinge>:<mean|sum>` or `losses:<kl|cross_entropy|cosine>`.
Held out: `HELDOUT` (the Huber loss summed, the cosine-similarity loss).

Solutions are two launches with no atomics, so the result is deterministic: the
element-wise losses (mse, huber, hinge) write one partial sum per program of a grid of
at most 1024, each striding over whole 4096-element blocks of the flattened inputs with
unmasked loads (a mask on an odd `n` would keep Triton from vectorising them), program
0 adding the last, partial block; the row losses (kl, cross-entropy, cosine) write one
loss per row, rows of up to 8192 in one tile (kl's second pass re-reads them from the
cache; online log-sum-exp over the row's chunks beyond that). Then one program sums the
partials, at most 4096, in one tile, and scales the total. One read of the inputs, where
eager PyTorch makes several passes (difference, square, mean): the fused loss is where
Triton wins.

Where it cannot reach eager PyTorch: in the reward's measure, which times each call with
its launch inside (as KernelBench's harness does). On the GPU alone the kernel wins at
every draw; but a Triton call costs some tens of microseconds more than an eager PyTorch
call, and at these sizes the kernel runs for about as long, so the launch decides. The
figures are in docs/benchmarks.md ("Task families' solutions through the verifier").
"""

from __future__ import annotations

import random

from tritonrl.tasks.families import axis
from tritonrl.tasks.families.base import (
    Drawn,
    indent,
    launch,
    reference_source,
    size,
    solution_source,
)

NAME = "losses"
POLICY = "strict"
KINDS = ("mse", "huber", "hinge", "kl", "cross_entropy", "cosine")
HELDOUT = frozenset({"losses:huber:sum", "losses:cosine"})
DELTAS = (1.0, 0.5, 2.0)

_FINISH = """
@triton.jit
def finish_kernel(partial_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for i0 in range(0, n, BLOCK):
        i = i0 + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + i, mask=i < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) * scale)
"""

_POINTWISE = """
@triton.jit
def {kind}_partial_kernel(p_ptr, t_ptr, partial_ptr, n, n_full{delta}, BLOCK: tl.constexpr):
    # A grid of at most 1024 programs, each striding over the whole blocks with
    # unmasked (vectorised) loads and a tile accumulator; program 0 adds the last,
    # partial block. One partial sum a program.
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for b in range(pid, n_full, tl.num_programs(0)):
        offs = b * BLOCK + lanes  # int32: the inputs have fewer than 2**31 elements
        p = tl.load(p_ptr + offs).to(tl.float32)
        t = tl.load(t_ptr + offs).to(tl.float32)
{body}
        acc += v
    if pid == 0:
        offs = n_full * BLOCK + lanes
        ok = offs < n
        p = tl.load(p_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + offs, mask=ok, other=0.0).to(tl.float32)
{body}
        acc += tl.where(ok, v, 0.0)
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))
"""
_BODY = {
    "mse": "d = p - t\nv = d * d",
    "huber": "d = tl.abs(p - t)\nv = tl.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))",
    "hinge": "v = tl.maximum(1.0 - p * t, 0.0)",
}
_TORCH = {
    "mse": "torch.mean((predictions - targets) ** 2)",
    "huber": "torch.nn.functional.huber_loss(predictions, targets, delta=self.delta)",
    "hinge": "torch.mean(torch.clamp(1 - predictions * targets, min=0))",
    "kl": "torch.nn.functional.kl_div(torch.log_softmax(predictions, dim=1), "
    'torch.softmax(targets, dim=1), reduction="batchmean")',
    "cross_entropy": "torch.nn.functional.cross_entropy(predictions, targets)",
    "cosine": "torch.mean(1 - torch.nn.functional.cosine_similarity(predictions, targets, dim=1))",
}

_ROW_HEAD = """
@triton.jit
def {kind}_row_kernel(p_ptr, t_ptr, loss_ptr, {params}):
{preamble}
"""
_ROW_BODY = {
    # Online log-sum-exp of both rows, then sum q (log q - log p) in a second pass.
    "kl": """\
mp = tl.full((BLOCK_O,), float("-inf"), tl.float32)
sp = tl.zeros((BLOCK_O,), tl.float32)
mt = tl.full((BLOCK_O,), float("-inf"), tl.float32)
st = tl.zeros((BLOCK_O,), tl.float32)
for r0 in range(0, R, BLOCK_R):
    r = r0 + rr
    mask = o_ok[:, None] & (r[None, :] < R)
    offs = base[:, None] + r[None, :]
    p = tl.load(p_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    t = tl.load(t_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m_new = tl.maximum(mp, tl.max(p, axis=1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    sp = sp * tl.exp(mp - shift) + tl.sum(tl.exp(p - shift[:, None]), axis=1)
    mp = m_new
    m_new = tl.maximum(mt, tl.max(t, axis=1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    st = st * tl.exp(mt - shift) + tl.sum(tl.exp(t - shift[:, None]), axis=1)
    mt = m_new
lse_p = tl.where(o_ok, mp + tl.log(tl.where(o_ok, sp, 1.0)), 0.0)
lse_t = tl.where(o_ok, mt + tl.log(tl.where(o_ok, st, 1.0)), 0.0)
acc = tl.zeros((BLOCK_O,), tl.float32)
for r0 in range(0, R, BLOCK_R):
    r = r0 + rr
    mask = o_ok[:, None] & (r[None, :] < R)
    offs = base[:, None] + r[None, :]
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    log_q = t - lse_t[:, None]
    log_p = p - lse_p[:, None]
    acc += tl.sum(tl.where(mask, tl.exp(log_q) * (log_q - log_p), 0.0), axis=1)
tl.store(loss_ptr + o, acc, mask=o_ok)""",
    # Online log-sum-exp of the logits; the label's logit read directly.
    "cross_entropy": """\
m = tl.full((BLOCK_O,), float("-inf"), tl.float32)
s = tl.zeros((BLOCK_O,), tl.float32)
for r0 in range(0, R, BLOCK_R):
    r = r0 + rr
    mask = o_ok[:, None] & (r[None, :] < R)
    x = tl.load(p_ptr + base[:, None] + r[None, :], mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    m_new = tl.maximum(m, tl.max(x, axis=1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
    m = m_new
label = tl.load(t_ptr + o, mask=o_ok, other=0)
picked = tl.load(p_ptr + base + label, mask=o_ok, other=0.0).to(tl.float32)
loss = tl.where(o_ok, m + tl.log(tl.where(o_ok, s, 1.0)) - picked, 0.0)
tl.store(loss_ptr + o, loss, mask=o_ok)""",
    "cosine": """\
dot = tl.zeros((BLOCK_O,), tl.float32)
pp = tl.zeros((BLOCK_O,), tl.float32)
tt = tl.zeros((BLOCK_O,), tl.float32)
for r0 in range(0, R, BLOCK_R):
    r = r0 + rr
    mask = o_ok[:, None] & (r[None, :] < R)
    offs = base[:, None] + r[None, :]
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dot += tl.sum(p * t, axis=1)
    pp += tl.sum(p * p, axis=1)
    tt += tl.sum(t * t, axis=1)
cos = dot / tl.maximum(tl.sqrt(pp) * tl.sqrt(tt), 1e-8)
tl.store(loss_ptr + o, 1.0 - cos, mask=o_ok)""",
}


def draw(rng: random.Random, seed: int, small: bool) -> Drawn:
    kind = rng.choice(KINDS)
    reduction = rng.choice(("mean", "sum")) if kind in ("mse", "huber", "hinge") else "mean"
    delta = rng.choice(DELTAS)
    batch = size(rng, small, (256, 4096), (3, 24))
    dim = size(rng, small, (1024, 8192), (16, 300))
    expr = _TORCH[kind]
    if reduction == "sum":
        sums = {
            "mse": "torch.sum((predictions - targets) ** 2)",
            "huber": expr.replace(")", ', reduction="sum")'),
            "hinge": "torch.sum(torch.clamp(1 - predictions * targets, min=0))",
        }
        expr = sums[kind]
    huber = kind == "huber"
    if kind == "hinge":
        targets = "torch.randint(0, 2, (batch_size, dim)).float() * 2 - 1"
    elif kind == "cross_entropy":
        targets = "torch.randint(0, dim, (batch_size,))"
    else:
        targets = "torch.randn(batch_size, dim)"
    init = ["self.delta = delta"] if huber else []
    source = reference_source(
        doc=f"Task family losses (seed {seed}): {kind.replace('_', ' ')} loss ({reduction}).",
        forward_args="predictions: torch.Tensor, targets: torch.Tensor",
        forward=[f"return {expr}"],
        constants=[("batch_size", batch), ("dim", dim)] + ([("delta", delta)] if huber else []),
        inputs=[
            "predictions = torch.randn(batch_size, dim)",
            f"targets = {targets}",
            "return [predictions, targets]",
        ],  # fmt: skip
        init_params="delta: float" if huber else "",
        init=init,
        init_inputs="delta" if huber else "",
    )
    if kind in _BODY:
        kernel = (
            _POINTWISE.format(
                kind=kind, delta=", delta" if huber else "", body=indent(_BODY[kind], 8)
            )
            + _FINISH
        )
        scale = "1.0 / n" if reduction == "mean" else "1.0"
        forward = [
            "p = predictions.contiguous()",
            "t = targets.contiguous()",
            "n = p.numel()",
            "BLOCK = 4096",
            "n_full = n // BLOCK  # whole blocks; the rest is program 0's masked tail",
            "n_partials = max(1, min(n_full, 1024))",
            "partials = torch.empty(n_partials, device=p.device, dtype=torch.float32)",
            *launch(
                f"{kind}_partial_kernel[(n_partials,)]",
                "p, t, partials, n, n_full, "
                + ("self.delta, " if huber else "")
                + "BLOCK=BLOCK, num_warps=8",
            ),
        ]
    else:
        kernel = _ROW_HEAD.format(kind=kind, params=axis.PARAMS,
                                  preamble=indent(axis.PREAMBLE, 4))  # fmt: skip
        kernel = kernel.rstrip("\n") + "\n" + indent(_ROW_BODY[kind], 4) + "\n" + _FINISH
        scale = "1.0 / n_partials"  # per row: batchmean, the mean over rows
        forward = [
            "p = predictions.contiguous()",
            "t = targets.contiguous()",
            "R = p.shape[1]",
            "inner = 1",
            "n_other = n_partials = p.shape[0]",
            "# whole rows of up to 8192 in one tile: a second pass re-reads them from cache",
            "BLOCK_R = min(1 << (R - 1).bit_length(), 8192)",
            "BLOCK_O = max(1, min(16, 4096 // BLOCK_R))",
            "grid = ((n_other + BLOCK_O - 1) // BLOCK_O,)",
            "partials = torch.empty(n_partials, device=p.device, dtype=torch.float32)",
            "warps = 8 if BLOCK_O * BLOCK_R >= 4096 else 4",
            *launch(f"{kind}_row_kernel[grid]", f"p, t, partials, {axis.ARGS}, num_warps=warps"),
        ]
    forward += [
        "out = torch.empty((), device=p.device, dtype=p.dtype)",
        *launch(
            "finish_kernel[(1,)]",
            f"partials, out, n_partials, {scale}, "
            "BLOCK=min(4096, 1 << (n_partials - 1).bit_length()), num_warps=4",
        ),
        "return out",
    ]
    solution = solution_source(
        doc=f"Triton solution: {kind.replace('_', ' ')} loss, partial sums then one final sum.",
        kernels=kernel,
        forward_args="predictions: torch.Tensor, targets: torch.Tensor",
        forward=forward,
        init_params="delta: float" if huber else "",
        init=init,
    )
    sig = f"losses:{kind}:{reduction}" if kind in _BODY else f"losses:{kind}"
    titles = {"mse": "MSELoss", "huber": "HuberLoss", "hinge": "HingeLoss", "kl": "KLDivLoss",
              "cross_entropy": "CrossEntropyLoss", "cosine": "CosineSimilarityLoss"}  # fmt: skip
    return Drawn(
        signature=sig,
        level=1,  # one loss, as KernelBench's level 1 counts them
        name=titles[kind] + ("_Sum" if reduction == "sum" else ""),
        source=source,
        solution=solution,
    )
