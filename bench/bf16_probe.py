"""Where bf16 SFT goes wrong: per-step loss, grad norm, the weights an update left
unchanged and the first non-finite module, for each precision x attention variant.

    python bench/bf16_probe.py --model DIR [--device cuda] [--steps 8] [--lr 1e-5] \
        [--batch 8] [--accum 1] [--max-length 2048] [--checkpointing] [--optim NAME] \
        [--variants pure_bf16,master_fp32,fp32] [--attn sdpa,eager] [--out probe.json]
    python bench/bf16_probe.py --model tiny-qwen2 --device cpu --batch 2 --max-length 1024

Each variant trains a fresh copy of `--model` for `--steps` optimizer steps through the
product's SFT trainer (`tritonrl.train.sft`: TRL's SFTTrainer and fused LM head, our
SFTConfig, full fine-tuning, constant lr, the builtin + 100 generator examples), same
seed, same data order:

* `pure_bf16`: the weights loaded in bfloat16, `bf16=True` (what `sft.bf16` did before
  `tritonrl.train.precision`: bf16 weights, grads and AdamW states, no float32 copy);
* `master_fp32`: the weights loaded (upcast) in float32, `bf16=True` (autocast): what
  `sft.bf16` does now;
* `fp32`: float32 weights, no autocast.

and each with `--attn` sdpa and/or eager attention. Per step: the loss as computed (the
trainer's NaN filter off), the grad norm, the share of trainable weights the optimizer
step left exactly unchanged (bf16 rounds away an update below half a step of the
weight), the weights that are non-finite after it, the largest |hidden state| out of
the backbone, and the first module whose forward output, the first module whose output
gradient and the first parameter whose gradient was non-finite. Printed as a table;
written as JSON to `--out` after each variant.

`tiny-qwen2` builds a Qwen2-like model (tied embeddings, q/k/v bias, rope theta 1e6,
RMSNorm eps 1e-6, the tiny tokenizer's vocabulary) in a temp dir, trained `--warm`
steps in float32 first, then stored in bf16 as a `--dtype bfloat16` conversion is.

What it does NOT do: it keeps no model (temp dirs), measures one seed, and runs no
eval; the variants run one after another, so a GPU must hold one at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tempfile
import time
from pathlib import Path

VARIANTS = {  # name -> (dtype the weights are loaded in, bf16 autocast)
    "pure_bf16": ("bfloat16", True),
    "master_fp32": ("float32", True),
    "fp32": ("float32", False),
}


def tiny_qwen2(out: Path, warm_steps: int, device: str) -> Path:
    """A small Qwen2-like model saved in bfloat16 into `out` (trained `warm_steps` first)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from tritonrl.config import TinyModelConfig
    from tritonrl.models.tiny import IM_END, PAD, corpus, train_tokenizer

    tokenizer = train_tokenizer(corpus(TinyModelConfig(generated_tasks=100)), 4096)
    eos, pad = tokenizer.convert_tokens_to_ids([IM_END, PAD])
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    if warm_steps:
        run_variant(
            out, "fp32", "sdpa", device, warm_steps, 1e-3, 1024, False, batch=2, save_to=out
        )
    model = Qwen2ForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    model.save_pretrained(out)  # stored in bf16, as a `--dtype bfloat16` conversion is
    return out


def examples(tokenizer_dir: Path):
    import datasets

    from tritonrl.config_loader import load_config
    from tritonrl.train.sft.data import builtin_examples

    config = load_config(None, ["--data.generated_tasks", "100"], cuda_available=False)
    rows = [
        {"prompt": r["prompt"], "completion": r["completion"]} for r in builtin_examples(config)
    ]
    return datasets.Dataset.from_list(rows)


class Probe:
    """Hooks that note, for each step, the first non-finite forward output, output
    gradient and parameter gradient, the largest |hidden state| of the backbone, and
    after the optimizer step the non-finite weights and the share left unchanged."""

    def __init__(self, model):
        import torch

        self.torch = torch
        self.model = model
        self.step: dict = {}
        self.before: dict = {}
        for name, module in model.named_modules():
            module.register_forward_hook(self._forward(name or "<model>"))
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.register_hook(self._param_grad(name))

    def reset(self) -> None:
        self.step = {"forward": None, "output_grad": None, "param_grad": None, "hidden_max": 0.0}

    def _bad(self, t) -> bool:
        torch = self.torch
        return torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all())

    def _forward(self, name):
        def hook(module, args, output):
            if hasattr(output, "keys"):  # a ModelOutput (TRL's fused head's too): its tensors
                tensors = list(output.values())
                hidden = output.get("last_hidden_state")
                if self.torch.is_tensor(hidden):
                    peak = float(hidden.detach().abs().amax().float())
                    self.step["hidden_max"] = max(self.step.get("hidden_max", 0.0), peak)
            else:
                tensors = list(output) if isinstance(output, tuple) else [output]
            for t in tensors:
                if not self.torch.is_tensor(t):
                    continue
                if self.step.get("forward") is None and self._bad(t):
                    self.step["forward"] = f"{name} ({type(module).__name__}, {t.dtype})"
                if t.requires_grad:
                    t.register_hook(self._output_grad(name))

        return hook

    def _output_grad(self, name):
        def hook(grad):
            if self.step.get("output_grad") is None and self._bad(grad):
                self.step["output_grad"] = name

        return hook

    def _param_grad(self, name):
        def hook(grad):
            if self.step.get("param_grad") is None and self._bad(grad):
                self.step["param_grad"] = name

        return hook

    def snapshot(self) -> None:
        self.before = {n: p.detach().clone() for n, p in self.model.named_parameters()
                       if p.requires_grad}  # fmt: skip

    def after_step(self) -> None:
        torch = self.torch
        unchanged = total = bad = 0
        for n, p in self.model.named_parameters():
            if n in self.before:
                unchanged += int((p.detach() == self.before[n]).sum())
                total += p.numel()
            bad += int((~torch.isfinite(p.detach())).sum())
        self.step["unchanged"] = unchanged / max(total, 1)
        self.step["nonfinite_params"] = bad
        self.before = {}


def run_variant(model_dir, variant, attn, device, steps, lr, max_length, checkpointing,
                accum=1, batch=8, optim=None, save_to=None) -> list[dict]:  # fmt: skip
    """One variant's per-step rows (see the module docstring)."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from tritonrl.config_loader import load_config
    from tritonrl.models.load import load_causal_lm
    from tritonrl.train.sft import _trainer_class, trainer_args

    dtype, bf16 = VARIANTS[variant]
    config = load_config(None, [
        "--sft.device", device, "--sft.bf16", "false", "--sft.learning_rate", str(lr),
        "--sft.max_steps", str(steps), "--sft.max_length", str(max_length),
        "--sft.per_device_batch_size", str(batch), "--sft.gradient_accumulation", str(accum),
        "--sft.logging_steps", "1", "--sft.gradient_checkpointing", str(checkpointing).lower(),
        "--sft.lr_scheduler", "constant", "--run.report_to", "[]",
    ], cuda_available=device == "cuda")  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = load_causal_lm(model_dir, dtype=getattr(torch, dtype), attn_implementation=attn)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        args = trainer_args(config, Path(tmp), device, has_validation=False)
        extra = {"optim": optim} if optim else {}
        # bf16 set here, past check_config (which refuses it on the CPU); NaN seen as NaN
        args = dataclasses.replace(args, bf16=bf16, logging_nan_inf_filter=False,
                                   save_strategy="no", **extra)  # fmt: skip
        probe = Probe(model)

        class Record(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                probe.reset()

            def on_pre_optimizer_step(self, args, state, control, **kw):
                probe.snapshot()

            def on_optimizer_step(self, args, state, control, **kw):
                probe.after_step()

            def on_log(self, args, state, control, logs=None, **kw):
                if logs and "loss" in logs:
                    rows.append({"step": state.global_step, "loss": logs["loss"],
                                 "grad_norm": logs.get("grad_norm"), **probe.step})  # fmt: skip

        trainer = _trainer_class()(
            model=model, args=args, train_dataset=examples(model_dir),
            processing_class=tokenizer, callbacks=[Record()],
        )  # fmt: skip
        trainer.train()
        if save_to is not None:
            trainer.model.save_pretrained(save_to)
    del model, trainer
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def _fmt(x) -> str:
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.4g}"
    return "-" if x is None else str(x)


HEADER = ("step  loss      grad_norm  unchanged  bad_params  hidden_max  "
          "first non-finite (fwd | out-grad | param-grad)")  # fmt: skip


def main() -> None:
    import torch
    import transformers
    import trl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model directory, or tiny-qwen2")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8, help="per-device batch")
    ap.add_argument("--accum", type=int, default=1, help="gradient accumulation")
    ap.add_argument("--variants", default="pure_bf16,master_fp32,fp32")
    ap.add_argument("--attn", default="sdpa,eager")
    ap.add_argument("--optim", default=None, help="the trainer's optim (default: its own)")
    ap.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on")
    ap.add_argument("--warm", type=int, default=20, help="tiny-qwen2: float32 steps first")
    ap.add_argument("--out", default="bf16_probe.json")
    args = ap.parse_args()
    model_dir = Path(args.model)
    if args.model == "tiny-qwen2":
        model_dir = tiny_qwen2(Path(tempfile.mkdtemp(prefix="tiny-qwen2-")), args.warm,
                               args.device)  # fmt: skip
    report = {
        "model": args.model, "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "trl": trl.__version__},
        "settings": {k: getattr(args, k) for k in
                     ("lr", "steps", "batch", "accum", "max_length", "checkpointing", "optim")},
        "runs": {},
    }  # fmt: skip
    for variant in args.variants.split(","):
        for attn in args.attn.split(","):
            started = time.monotonic()
            rows = run_variant(model_dir, variant, attn, args.device, args.steps, args.lr,
                               args.max_length, args.checkpointing, args.accum, args.batch,
                               args.optim)  # fmt: skip
            key = f"{variant}/{attn}"
            report["runs"][key] = {"seconds": round(time.monotonic() - started, 1), "steps": rows}
            print(f"\n{key}\n{HEADER}")
            for r in rows:
                print(f"{r['step']:>4}  {_fmt(r['loss']):<9} {_fmt(r['grad_norm']):<10} "
                      f"{_fmt(r.get('unchanged')):<10} {_fmt(r.get('nonfinite_params')):<11} "
                      f"{_fmt(r.get('hidden_max')):<11} {_fmt(r.get('forward'))} | "
                      f"{_fmt(r.get('output_grad'))} | {_fmt(r.get('param_grad'))}")  # fmt: skip
            # written after each variant: a crash later keeps what was measured
            Path(args.out).write_text(json.dumps(finite_json(report), indent=1, default=str))
    print(f"\nwritten to {args.out}")


def finite_json(obj):
    from tritonrl.runs.atomic import finite_json as convert

    return convert(obj)


if __name__ == "__main__":
    main()
