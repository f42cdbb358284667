"""How far ONE optimizer step from fresh state moves a model's answers, by learning rate:
AdamW (whose first update is about lr * sign(grad) for every weight with a gradient),
plain SGD on the same clipped gradient, and a random-sign perturbation of size lr.

    python bench/adam_first_step.py --model DIR [--out /tmp/adam_first_step.json] \
        [--lrs 1e-6,3e-6,1e-5,3e-5] [--train 4] [--probe 4] [--max-tokens 1240] \
        [--no-example] [--seed 0] [--threads 2]

DIR is a model directory (`tritonrl convert-gguf qwen2.5-coder-0.5b --out DIR`), loaded
in float32 on the CPU. Sequences are builtin tasks in the product's chat format
(`tritonrl.data.prompts.sft_example` of the task and its reference solution, through the
tokenizer's chat template), the tasks whose prompt + answer fit `--max-tokens`, taken in
suite order and dealt alternately to `--train` training and `--probe` probe tasks.

One GRPO-like gradient on the training sequences: loss = -(sum over answer tokens of
A_i * log p(token)) / (all answer tokens), A_i alternating +1, -1 (a group whose rewards
differ), gradient norm clipped to 1.0 as TRL does. Then, per lr, from the same original
weights each time: one fresh torch.optim.AdamW step (betas 0.9/0.999, eps 1e-8, no weight
decay), one torch.optim.SGD step, and `w += lr * random sign`. On the probe sequences
(teacher-forced, answer positions only) against the original model: the share of
positions whose argmax token changed, mean KL(original || stepped) per token, the change
in mean log-prob of the reference tokens, the share of positions whose argmax is the
reference token; on the training sequences the change in mean log-prob of the +1 and -1
answers; and the mean |weight change| / mean |weight|. Every figure goes to `--out` as
JSON and a Markdown table is printed. Measures; asserts nothing.

What it does NOT do: sample, verify answers, or use the TRL trainer; it measures one
gradient from 4 sequences (a real GRPO step sees 64 sampled completions) and one random
draw, and the model given (not an SFT'd one unless DIR is one).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ADAM = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
METHODS = ("adamw", "sgd", "random_sign")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_sequences(tok, max_tokens: int, include_example: bool) -> list[dict]:
    """Builtin tasks with a solution, as token ids with the answer's start, that fit."""
    from tritonrl.data.prompts import sft_example
    from tritonrl.tasks.loaders import load_builtin

    seqs = []
    for task in load_builtin("all").tasks:
        if not task.solution:
            continue
        ex = sft_example(task.source, task.solution, include_example=include_example)
        prompt = tok.apply_chat_template(ex["prompt"], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=False)
        if not full.startswith(prompt):
            raise ValueError(f"{task.id}: the chat template does not extend the prompt")
        p_ids = tok(prompt, add_special_tokens=False).input_ids
        a_ids = tok(full[len(prompt) :], add_special_tokens=False).input_ids
        if len(p_ids) + len(a_ids) > max_tokens:
            continue
        seqs.append(
            {
                "task_id": task.id,
                "ids": torch.tensor([p_ids + a_ids]),
                "start": len(p_ids),
                "prompt_tokens": len(p_ids),
                "answer_tokens": len(a_ids),
            }
        )
    return seqs


def answer_logits(model, seq: dict) -> torch.Tensor:
    """Logits at the positions that predict the answer tokens (the LM head only there)."""
    hidden = model.model(input_ids=seq["ids"]).last_hidden_state[0]
    return model.lm_head(hidden[seq["start"] - 1 : -1]).float()


def targets(seq: dict) -> torch.Tensor:
    return seq["ids"][0, seq["start"] :]


@torch.inference_mode()
def probe_pass(model, seqs: list[dict]) -> list[torch.Tensor]:
    return [F.log_softmax(answer_logits(model, s), dim=-1) for s in seqs]


def ref_logprob(logps: list[torch.Tensor], seqs: list[dict]) -> list[float]:
    """Mean log-prob of the reference answer tokens, per sequence."""
    return [
        lp.gather(1, targets(s)[:, None]).mean().item() for lp, s in zip(logps, seqs, strict=True)
    ]


def compare(base: list[torch.Tensor], new: list[torch.Tensor], seqs: list[dict]) -> dict:
    n = flips = hits_base = hits_new = 0
    kl_sum = kl_max = 0.0
    for b, m, s in zip(base, new, seqs, strict=True):
        tgt = targets(s)
        ab, am = b.argmax(-1), m.argmax(-1)
        flips += (ab != am).sum().item()
        hits_base += (ab == tgt).sum().item()
        hits_new += (am == tgt).sum().item()
        kl = (b.exp() * (b - m)).sum(-1)
        kl_sum += kl.sum().item()
        kl_max = max(kl_max, kl.max().item())
        n += len(tgt)
    lp_b = ref_logprob(base, seqs)
    lp_n = ref_logprob(new, seqs)
    return {
        "positions": n,
        "argmax_changed_share": flips / n,
        "kl_mean": kl_sum / n,
        "kl_max": kl_max,
        "ref_logprob_mean_before": sum(lp_b) / len(lp_b),
        "ref_logprob_mean_after": sum(lp_n) / len(lp_n),
        "ref_logprob_delta": (sum(lp_n) - sum(lp_b)) / len(lp_b),
        "ref_logprob_delta_per_seq": [a - b for a, b in zip(lp_n, lp_b, strict=True)],
        "greedy_is_ref_share_before": hits_base / n,
        "greedy_is_ref_share_after": hits_new / n,
    }


def train_eval(model, seqs: list[dict], adv: list[float]) -> dict:
    lps = ref_logprob(probe_pass(model, seqs), seqs)
    pos = [lp for lp, a in zip(lps, adv, strict=True) if a > 0]
    neg = [lp for lp, a in zip(lps, adv, strict=True) if a < 0]
    return {"per_seq": lps, "pos_mean": sum(pos) / len(pos), "neg_mean": sum(neg) / len(neg)}


def weight_change(params, orig) -> dict:
    diff = total = 0.0
    changed = numel = 0
    for p, o in zip(params, orig, strict=True):
        d = (p.detach() - o).abs()
        diff += d.sum().item()
        total += o.abs().sum().item()
        changed += (d > 0).sum().item()
        numel += o.numel()
    return {
        "mean_abs_change": diff / numel,
        "mean_abs_weight": total / numel,
        "rel_change": diff / total,
        "changed_share": changed / numel,
    }


def step(method: str, lr: float, params, seed: int) -> None:
    if method == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, foreach=False, **ADAM)
        opt.step()
        del opt
    elif method == "sgd":
        torch.optim.SGD(params, lr=lr).step()
    else:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in params:
                sign = torch.randint(0, 2, p.shape, generator=gen, dtype=torch.float32)
                p.add_(sign.mul_(2).sub_(1), alpha=lr)


def grad_stats(params, pre_clip_norm: float) -> dict:
    """How AdamW's first step will size each weight's update: |g| / (|g| + eps)."""
    numel = zero = above = 0
    abs_sum = 0.0
    for p in params:
        g = p.grad.abs()
        numel += g.numel()
        zero += (g == 0).sum().item()
        above += (g > ADAM["eps"]).sum().item()
        abs_sum += g.sum().item()
    return {
        "pre_clip_norm": pre_clip_norm,
        "clip_factor": min(1.0, 1.0 / (pre_clip_norm + 1e-6)),
        "mean_abs_grad_clipped": abs_sum / numel,
        "zero_grad_share": zero / numel,
        "abs_grad_above_eps_share": above / numel,
        "params": numel,
    }


def table(results: list[dict]) -> str:
    head = (
        "| method | lr | argmax changed | KL/token | Δ ref logp (probe) | greedy=ref after "
        "| Δ logp +1 / -1 (train) | mean|Δw|/mean|w| |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for r in results:
        p, t, w = r["probe"], r["train"], r["weights"]
        rows.append(
            f"| {r['method']} | {r['lr']:.0e} | {p['argmax_changed_share']:.2%} "
            f"| {p['kl_mean']:.2e} | {p['ref_logprob_delta']:+.4f} "
            f"| {p['greedy_is_ref_share_after']:.2%} "
            f"| {t['pos_delta']:+.4f} / {t['neg_delta']:+.4f} | {w['rel_change']:.2e} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="/tmp/adam_first_step.json")
    ap.add_argument("--lrs", default="1e-6,3e-6,1e-5,3e-5")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--train", type=int, default=4)
    ap.add_argument("--probe", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=1240)
    ap.add_argument("--no-example", action="store_true", help="prompts without the one-shot")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    lrs = [float(x) for x in args.lrs.split(",")]
    methods = args.methods.split(",")

    tok = AutoTokenizer.from_pretrained(args.model)
    seqs = build_sequences(tok, args.max_tokens, not args.no_example)
    if len(seqs) < args.train + args.probe:
        raise SystemExit(f"only {len(seqs)} tasks fit --max-tokens {args.max_tokens}")
    train, probe = [], []  # dealt alternately, in suite order
    for s in seqs[: args.train + args.probe]:
        room = len(train) < args.train
        to_train = len(probe) >= args.probe or (room and len(train) <= len(probe))
        (train if to_train else probe).append(s)
    adv = [1.0 if i % 2 == 0 else -1.0 for i in range(len(train))]
    log(f"train {[s['task_id'] for s in train]}; probe {[s['task_id'] for s in probe]}")

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()  # no dropout; gradients still flow
    params = [p for p in model.parameters() if p.requires_grad]
    orig = [p.detach().clone() for p in params]
    timings = {"load_s": time.perf_counter() - t0}

    t = time.perf_counter()
    base_probe = probe_pass(model, probe)
    base_train = train_eval(model, train, adv)
    timings["base_eval_s"] = time.perf_counter() - t

    t = time.perf_counter()
    n_answer = sum(s["answer_tokens"] for s in train)
    for s, a in zip(train, adv, strict=True):
        logp = F.log_softmax(answer_logits(model, s), dim=-1)
        tok_lp = logp.gather(1, targets(s)[:, None]).squeeze(1)
        (-(a * tok_lp.sum()) / n_answer).backward()
        del logp, tok_lp
    pre_clip = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
    gstats = grad_stats(params, pre_clip)
    timings["gradient_s"] = time.perf_counter() - t
    log(f"gradient: norm {pre_clip:.3f} before clipping, {timings['gradient_s']:.0f}s")

    results = []
    for lr in lrs:
        for method in methods:
            t = time.perf_counter()
            with torch.no_grad():
                for p, o in zip(params, orig, strict=True):
                    p.copy_(o)
            step(method, lr, params, args.seed)
            weights = weight_change(params, orig)
            probe_cmp = compare(base_probe, probe_pass(model, probe), probe)
            tr = train_eval(model, train, adv)
            tr["pos_delta"] = tr["pos_mean"] - base_train["pos_mean"]
            tr["neg_delta"] = tr["neg_mean"] - base_train["neg_mean"]
            r = {
                "method": method,
                "lr": lr,
                "probe": probe_cmp,
                "train": tr,
                "weights": weights,
                "seconds": time.perf_counter() - t,
            }
            results.append(r)
            log(
                f"{method} lr {lr:.0e}: argmax changed {probe_cmp['argmax_changed_share']:.2%}"
                f", KL {probe_cmp['kl_mean']:.2e}, {r['seconds']:.0f}s"
            )

    def describe(s: dict) -> dict:
        return {k: s[k] for k in ("task_id", "prompt_tokens", "answer_tokens")}

    report = {
        "model": str(Path(args.model).resolve()),
        "model_name": json.loads((Path(args.model) / "config.json").read_text()).get(
            "_model_name_or_path"
        ),
        "dtype": "float32",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "include_example": not args.no_example,
        "max_tokens": args.max_tokens,
        "train_tasks": [describe(s) | {"advantage": a} for s, a in zip(train, adv, strict=True)],
        "probe_tasks": [describe(s) for s in probe],
        "adamw": ADAM,
        "grad_clip": 1.0,
        "gradient": gstats,
        "base": {
            "probe_ref_logprob_mean": sum(ref_logprob(base_probe, probe)) / len(probe),
            "probe_greedy_is_ref_share": compare(base_probe, base_probe, probe)[
                "greedy_is_ref_share_before"
            ],
            "train": base_train,
        },
        "results": results,
        "timings": timings,
        "seconds": time.perf_counter() - t0,
    }
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(table(results))
    print(f"\n{report['seconds']:.0f}s; JSON in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
