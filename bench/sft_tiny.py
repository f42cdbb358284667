"""SFT throughput and loss curve of the tiny model on the builtin + generated corpus.

    python bench/sft_tiny.py --out OUT_DIR [--device cuda] [--generated 1000] [-- EXTRA]

Runs the real `tritonrl sft` stage (tiny-cpu config, with the device and corpus size
overridden) in a fresh run directory, then reports training tokens per second (tokens
of every training example, prompt and completion, times epochs, over the trainer's own
train_runtime) and the loss curve from the trainer's log history. Writes
`sft_tiny.json` to OUT_DIR and prints a Markdown table. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--generated", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="sft-bench-")) / "run"
    cmd = [
        sys.executable, "-m", "tritonrl", "sft", "--run", str(run),
        "--sft.device", args.device, "--verify.device", args.device,
        "--data.generated_tasks", str(args.generated),
        "--sft.per_device_batch_size", str(args.batch),
        "--sft.save_steps", "100000", "--sft.eval_steps", "50", "--sft.logging_steps", "5",
        "--run.report_to", "none", *args.extra,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    report = measure(run)
    report["command"] = " ".join(cmd[1:])
    (out / "sft_tiny.json").write_text(json.dumps(report, indent=1))
    print(markdown(report))


def measure(run: Path) -> dict:
    from transformers import AutoTokenizer

    manifest = json.loads((run / "manifest.json").read_text())
    sft = manifest["stages"]["sft"]
    history = json.loads((run / sft["artifacts"]["log_history"]).read_text())
    tokenizer = AutoTokenizer.from_pretrained(run / sft["artifacts"]["tokenizer"])
    train_file = run / sft["artifacts"]["train_data"]
    tokens = 0
    for line in train_file.read_text().splitlines():
        row = json.loads(line)
        text = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        tokens += len(tokenizer(text)["input_ids"])
    summary = next(h for h in reversed(history) if "train_runtime" in h)
    epochs = summary.get("epoch", 1.0)
    return {
        "train_examples": sft["info"]["train_examples"],
        "train_tokens_per_epoch": tokens,
        "epochs": epochs,
        "train_runtime_s": summary["train_runtime"],
        "tokens_per_s": tokens * epochs / summary["train_runtime"],
        "loss_curve": [(h["step"], h["loss"]) for h in history if "loss" in h],
        "eval_curve": [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h],
        "first_loss": sft["info"]["first_loss"],
        "last_loss": sft["info"]["last_loss"],
    }


def markdown(r: dict) -> str:
    rows = [
        f"| train examples | {r['train_examples']} |",
        f"| tokens per epoch | {r['train_tokens_per_epoch']} |",
        f"| train runtime | {r['train_runtime_s']:.1f} s |",
        f"| tokens / s | {r['tokens_per_s']:.0f} |",
        f"| loss first -> last | {r['first_loss']:.3f} -> {r['last_loss']:.3f} |",
    ]
    curve = ", ".join(
        f"{s}: {v:.2f}" for s, v in r["loss_curve"][:: max(1, len(r["loss_curve"]) // 12)]
    )
    return "| | |\n|---|---|\n" + "\n".join(rows) + f"\n\nloss curve (step: loss): {curve}\n"


if __name__ == "__main__":
    main()
