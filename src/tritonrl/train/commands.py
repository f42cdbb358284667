"""The training commands of `tritonrl`; `register(app)` adds them to the typer app.

    tritonrl tiny-model --out DIR [--config FILE] [--overwrite] [--tiny_model.KEY VALUE ...]
    tritonrl sft --run RUN [--config FILE] [--SECTION.KEY VALUE ...]

`--config` is a YAML file or the name of one in configs/ (default: tiny-cpu); every other
`--section.key value` overrides one field (`--sft.max_steps 10`, `--lora.enabled=false`).
Exit 0 on success, 2 for a bad config or option, 1 when training fails (the manifest then
records the stage as failed, with the error).
"""

from __future__ import annotations

import logging

import typer
from rich.console import Console
from rich.markup import escape

log = logging.getLogger(__name__)

_OVERRIDES = {"allow_extra_args": True, "ignore_unknown_options": True}
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _config(path: str | None, overrides: list[str]):
    from tritonrl.config import load_config

    try:
        return load_config(path, overrides)
    except ValueError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None


def tiny_model(
    ctx: typer.Context,
    out_dir: str = typer.Option(..., "--out", help="Directory to write the model into."),
    config: str = typer.Option(None, "--config", help="YAML file or configs/ name."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
) -> None:
    """Build the tiny from-scratch model (tokenizer + Qwen2 LM) into --out.

    Every --tiny_model.KEY VALUE overrides one field, e.g. --tiny_model.num_layers 2.
    """
    from tritonrl.train.tiny_model import build_tiny_model, count_parameters

    cfg = _config(config, ctx.args)
    try:
        path = build_tiny_model(out_dir, cfg.tiny_model, overwrite=overwrite)
    except FileExistsError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    from transformers import AutoModelForCausalLM

    n = count_parameters(AutoModelForCausalLM.from_pretrained(path))
    out.print(f"tiny model ({n / 1e6:.1f}M parameters) written to {path}", markup=False)


def sft(
    ctx: typer.Context,
    run_dir: str = typer.Option(..., "--run", help="Run directory (created when new)."),
    config: str = typer.Option(None, "--config", help="YAML file or configs/ name."),
) -> None:
    """Supervised fine-tuning into a run directory (LoRA unless lora.enabled is false).

    Every --SECTION.KEY VALUE overrides one config field, e.g. --sft.max_steps 10.
    """
    from tritonrl.runs import RunError
    from tritonrl.train.sft import run_sft

    cfg = _config(config, ctx.args)
    try:
        result = run_sft(cfg, run_dir)
    except (ValueError, RunError, ImportError) as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    except Exception as e:
        log.debug("SFT failed", exc_info=True)
        err.print(f"[red]SFT failed:[/red] {type(e).__name__}: {escape(str(e))}")
        raise typer.Exit(1) from None
    kind = "adapter" if result.lora else "model"
    out.print(
        f"SFT done: {result.steps} steps in {result.seconds:.0f}s, loss "
        f"{result.first_loss} -> {result.last_loss}, eval loss {result.eval_loss}; "
        f"{kind} in {result.output}",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add `tiny-model` and `sft` to the `tritonrl` app."""
    app.command("tiny-model", context_settings=_OVERRIDES)(tiny_model)
    app.command("sft", context_settings=_OVERRIDES)(sft)
