"""`tritonrl eval`: a model's kernels measured by the verifier, and evaluations compared.

    tritonrl eval --model runs/demo --tasks run:runs/demo builtin:all --samples 4 --out evals/rl
    tritonrl eval --model openai:gpt-4o@https://api.openai.com/v1 --tasks builtin:level2 \
        --samples 2 --out evals/gpt4o
    tritonrl eval --model openai:m@http://h:8000/v1 --tasks builtin:level1 --turns 3 --out evals/t3
    tritonrl eval --compare evals/base evals/sft evals/rl [--json]

`--config` and `--section.key value` overrides as for every stage (the verifier's
`verify.*`, and `sampling.*`: temperature, top_p, top_k and max_new_tokens, which
`--max-tokens` sets; no `eval` section of its own). An `openai:` model gets at least
API_MAX_TOKENS new tokens unless one of those says otherwise, and answers that stop at the
limit are marked `truncated` in samples.jsonl, counted in the summary and warned about.
An eval into a folder that holds part of the same evaluation continues it (more
--samples or tasks add to it: only the missing answers are asked); one that is finished
says so and exits 0. The same evaluation is the same model (its resolved path and its
files' fingerprint), backend, sampling (temperature, top_p, top_k) and token limit
(`tritonrl.evaluate.identity`, OUT/eval.json); a folder of another is refused, naming
both, before the model is loaded; so is an --out that is a file. `--compare` names each
column and model by the shortest path tail that tells them apart. `--backend vllm`
generates with vLLM (CUDA). `--turns T` makes each sample a conversation of up to T
answers, the verifier's feedback between them (`tritonrl.evaluate.runner`); its summary
and --compare give correct@t, fast_1@t and best speedup@t; T is part of what the
evaluation is. With `verify.endpoint` the service's /health is asked (with the token)
before the model loads: one that is not there or refuses the token ends eval in one line.
Exit 0 on success, 2 for bad input, 1 when the evaluation fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonrl.cli_config import CONFIG, OVERRIDES, command_config
from tritonrl.data.distill import DistillError
from tritonrl.evaluate.backends import model_identity, open_model
from tritonrl.evaluate.identity import eval_identity, sampling_text, token_limit
from tritonrl.evaluate.runner import eval_tasks, evaluate, finished
from tritonrl.verify.client import ServiceError, preflight

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
API_MAX_TOKENS = 4096  # an openai: model's new tokens per answer unless --max-tokens says
LABELS = {"samples": "samples per task", "n": "answers (n)"}  # the table's names of keys
COLUMNS = ("n", "valid", "compiled", "correct", "fast_1", "fast_2", "geomean_speedup", "flagged")
TURN_COLUMNS = ("correct", "fast_1", "best_speedup")  # by turn, with --turns


def _cell(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def out_folder_problem(path: Path, what: str) -> str | None:
    """Why `path` cannot be the --out folder (a file is there or above it, or it cannot be
    written), in one line; None when it can. `what`: what the folder gets."""
    p = Path(path).expanduser().absolute()
    if p.exists() and not p.is_dir():
        return f"--out {path} is a file, not a folder: give a folder for {what}"
    above = p
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        return f"--out {path}: {above} is a file, so no folder can be made there for {what}"
    if not os.access(above, os.W_OK | os.X_OK):
        return f"--out {path}: {above} is not writable"
    return None


def distinct_tails(paths: list[str]) -> list[str]:
    """The shortest path tails (the same length for all) that tell `paths` apart:
    runs/a/sft/final and runs/b/sft/final -> a/sft/final, b/sft/final."""
    parts = [Path(p).parts for p in paths]
    for k in range(1, max((len(ps) for ps in parts), default=0) + 1):
        tails = ["/".join(ps[-k:]) for ps in parts]
        if len(set(tails)) == len(set(paths)):
            return tails
    return list(paths)


def _model_labels(summaries: list[dict]) -> list[str]:
    """Each evaluation's model, named apart from the others: by its name (`final`,
    `run/sft`, `openai:M@URL`) when no two models share one, else local ones by their
    paths' distinct tails (`a/sft/final`, `b/sft/final`)."""
    names = [s["model"] for s in summaries]
    paths = [s.get("model_path") for s in summaries]
    keys = [(p, s.get("fingerprint")) if p else n for p, s, n in zip(paths, summaries, names,
                                                                      strict=True)]  # fmt: skip
    pairs = list(zip(names, keys, strict=True))
    if all((n1 == n2) == (k1 == k2) for n1, k1 in pairs for n2, k2 in pairs):
        return names  # one name a model
    local = [p for p in paths if p]
    tails = dict(zip(local, distinct_tails(local), strict=True))
    return [tails[p] if p else s["model"] for p, s in zip(paths, summaries, strict=True)]


def compare(dirs: list[Path], as_json: bool) -> None:
    """Several evaluations' overall metrics side by side: a column per evaluation, a row
    per metric (pass@k, flags by category, and per-level correct rates included)."""
    summaries = []
    for d in dirs:
        path = Path(d) / "summary.json"
        if not path.is_file():
            err.print(f"[red]error:[/red] {escape(str(d))}: no summary.json (not a finished eval)")
            raise typer.Exit(2)
        summaries.append(json.loads(path.read_text()))
    rows = {}
    for d, summary, model in zip(dirs, summaries, _model_labels(summaries), strict=True):
        levels = {f"correct L{lv}": m["correct"] for lv, m in summary["metrics"]["levels"].items()}
        by_turn = {f"{k}@{t}": m[k] for t, m in summary["metrics"].get("turns", {}).items()
                   for k in TURN_COLUMNS}  # fmt: skip
        gen = summary.get("generation") or {}
        rows[str(d)] = {"model": model, "model_path": summary.get("model_path"),
                        "fingerprint": summary.get("fingerprint"),
                        "sampling": sampling_text(gen),
                        "max tokens": gen.get("max_tokens"), "samples": summary["samples"],
                        "tasks": summary["tasks"],
                        **({"turns": summary["turns"]} if "turns" in summary else {}),
                        **summary["metrics"]["overall"], **levels, **by_turn}  # fmt: skip
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    out.print(_table(rows))
    asked = {str(d): _task_ids(Path(d)) for d in dirs}
    if len({frozenset(ids) for ids in asked.values()}) > 1:
        common = set.intersection(*asked.values())
        names = distinct_tails([str(Path(d).absolute()) for d in asked])
        sizes = ", ".join(f"{n}: {len(ids)}" for n, ids in zip(names, asked.values(), strict=True))
        err.print(
            f"[yellow]warning:[/yellow] these evaluations asked different tasks ({sizes}; "
            f"{len(common)} in common): their rates are not of the same questions"
        )


def _task_ids(eval_dir: Path) -> set[str]:
    """The tasks an evaluation's samples.jsonl holds answers to."""
    path = eval_dir / "samples.jsonl"
    if not path.is_file():
        return set()
    return {json.loads(line)["task"] for line in path.read_text().splitlines() if line.strip()}


def _table(rows: dict[str, dict]) -> Table:
    keys = [k for r in rows.values() for k in r]
    passes = sorted({k for k in keys if k.startswith("pass@")}, key=lambda k: int(k[5:]))
    levels = sorted({k for k in keys if k.startswith("correct L")})
    by_turn = sorted({k for k in keys if "@" in k and not k.startswith("pass@")},
                     key=lambda k: (int(k.rsplit("@", 1)[1]), k))  # fmt: skip
    flags = sorted({f for r in rows.values() for f in r.get("flags", {})})
    table = Table(title="evaluations side by side", title_justify="left")
    table.add_column("metric")
    for name in distinct_tails([str(Path(d).absolute()) for d in rows]):
        table.add_column(name, overflow="fold")
    turns = ["turns"] if "turns" in keys else []
    for metric in ("model", "sampling", "max tokens", "tasks", "samples", *turns, *COLUMNS,
                   *passes, *levels, *by_turn):  # fmt: skip
        label = LABELS.get(metric, metric)
        table.add_row(label, *(_cell(r.get(metric)) for r in rows.values()))
    for f in flags:
        table.add_row(f"flag {f}", *(_cell(r.get("flags", {}).get(f, 0)) for r in rows.values()))
    return table


def eval_command(
    ctx: typer.Context,
    model: str | None = typer.Option(
        None, "--model", help="Model dir, adapter, .gguf, run, or openai:MODEL@URL."
    ),
    tasks: list[str] = typer.Option(
        [],
        "--tasks",
        help="Task sources: builtin:..., a KernelBench dir, gen:N[:SEED], "
        "fam:[FAMILY:]N[:SEED][:heldout], run:RUN (held out), train:RUN (its training tasks).",
    ),
    samples: int = typer.Option(1, "--samples", min=1, help="Answers per task (pass@k up to k)."),
    turns: int = typer.Option(
        1, "--turns", min=1, help="Answers per sample, the verifier's feedback between them."
    ),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Folder for samples.jsonl and summary.json."
    ),
    levels: str | None = typer.Option(None, "--levels", help="Only these levels, e.g. 1,2."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    device: str = typer.Option(
        "auto", "--device", help="Where a local model generates: auto, cpu, cuda."
    ),
    backend: str = typer.Option(
        "auto",
        "--backend",
        help="Local generation: auto (vLLM on CUDA if installed), transformers, vllm.",
    ),
    compare_dirs: list[Path] = typer.Option(
        [], "--compare", help="Finished eval folders to put side by side."
    ),
    as_json: bool = typer.Option(False, "--json", help="With --compare: JSON."),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="New tokens per answer (short for "
        f"--sampling.max_new_tokens; default: the config's, {API_MAX_TOKENS} for openai:).",
    ),
    config: str | None = CONFIG,
) -> None:  # fmt: skip
    """Evaluate a model's kernels with the verifier (or compare evaluations)."""
    if compare_dirs:
        compare(compare_dirs + [Path(a) for a in ctx.args], as_json)
        return
    shortcut = {"--max-tokens": ("sampling.max_new_tokens", max_tokens)}
    cfg, rest = command_config(ctx, config, "verify", shortcut, max_args=None)
    if (
        (model or "").startswith("openai:")
        and max_tokens is None
        and not any(a.startswith("--sampling.max_new_tokens") for a in ctx.args)
    ):  # the config's length is its own model's (64 in tiny-cpu); an API model writes more
        length = max(cfg.sampling.max_new_tokens, API_MAX_TOKENS)
        sampling = dataclasses.replace(cfg.sampling, max_new_tokens=length)
        cfg = dataclasses.replace(cfg, sampling=sampling)
    tasks = tasks + rest  # --tasks A B: click gives the first, the rest are positional
    if model is None or not tasks or out_dir is None:
        err.print("[red]error:[/red] give --model, --tasks and --out (or --compare DIR...)")
        raise typer.Exit(2)
    problem = out_folder_problem(out_dir, "samples.jsonl and summary.json")
    if problem:
        _fail(ValueError(problem), 2)

    where = _device(device)
    try:
        task_list = eval_tasks(tasks, _levels(levels), limit)
        ident = eval_identity(model_identity(model, where, backend), samples, cfg, turns)
        old = finished(out_dir, ident, task_list, samples, turns)
    except (ValueError, OSError) as e:
        _fail(e, 2)
    if old is not None:
        out.print(f"{out_dir} already holds this finished evaluation; nothing to do "
                  "(another --out, or more --samples, to go on)", markup=False)  # fmt: skip
        _report(old, out_dir)
        return
    try:  # the verifier service answers, with this token, before the model loads
        preflight(cfg.verify)
    except ServiceError as e:
        _fail(e, 1)
    except ValueError as e:  # an unreadable verify.endpoint_token_file
        _fail(e, 2)
    _report(_evaluate(model, task_list, samples, out_dir, cfg, where, backend, turns), out_dir)


def _device(device: str) -> str:
    """Where a local model generates: `auto` is CUDA when there is one; cuda without one
    is bad usage, said in one line."""
    if device not in ("auto", "cpu", "cuda"):
        _fail(ValueError(f"--device must be auto, cpu or cuda, not {device!r}"), 2)
    if device == "cpu":
        return device
    import torch  # lazy: loads torch

    if device == "cuda" and not torch.cuda.is_available():
        _fail(ValueError("--device cuda, but torch sees no CUDA device here: use --device "
                         "cpu (or auto), or run on a GPU machine"), 2)  # fmt: skip
    return "cuda" if torch.cuda.is_available() else "cpu"


def _levels(text: str | None) -> list[int] | None:
    try:
        return [int(x) for x in text.split(",")] if text else None
    except ValueError:
        raise ValueError(f"--levels {text}: write level numbers, e.g. 1,2") from None


def _fail(e: Exception, code: int):
    err.print(f"[red]error:[/red] {escape(str(e))}")
    raise typer.Exit(code) from None


def _evaluate(model: str, tasks, samples: int, out_dir: Path, cfg, where: str,
              backend: str, turns: int = 1) -> dict:  # fmt: skip
    """Open the model, then ask, verify and write with one progress bar, moved as each
    answer is verified and written (a line per answer where stderr is no terminal: a log,
    or the pipeline that shows it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    try:
        with _no_loading_bars():
            lm = open_model(model, where, backend, cfg.rl.vllm_gpu_memory_utilization)
    except (ValueError, OSError) as e:
        _fail(e, 2)
    with Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), console=err) as bar:
        job = bar.add_task("eval", total=len(tasks) * samples)

        def show(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)
            if not err.is_terminal:
                err.print(f"eval: {done}/{total} answers verified", markup=False)

        try:
            return evaluate(lm, tasks, samples, out_dir, cfg, progress=show, turns=turns)
        except (DistillError, ValueError, ServiceError) as e:
            _fail(e, 1)


@contextlib.contextmanager
def _no_loading_bars():
    """transformers' "Loading weights" bar off while the model loads: eval's is the bar."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _report(summary: dict, out_dir: Path) -> None:
    o = summary["metrics"]["overall"]
    passes = ", ".join(f"{k} {_cell(v)}" for k, v in o.items() if k.startswith("pass@"))
    out.print(
        f"eval of {summary['model']}: {summary['tasks']} tasks x {summary['samples']}: "
        f"valid {o['valid']:.3f}, compiled {o['compiled']:.3f}, correct {o['correct']:.3f}, "
        f"fast_1 {_cell(o['fast_1'])}, fast_2 {_cell(o['fast_2'])}, {passes}; "
        f"{o['flagged']} flagged; summary in {out_dir / 'summary.json'}",
        markup=False,
    )
    for t, m in summary["metrics"].get("turns", {}).items():
        again = f", repeated {_cell(m['repeated'])}" if "repeated" in m else ""
        out.print(f"turn {t}: asked {m['answered']}, correct@{t} {_cell(m['correct'])}, "
                  f"fast_1@{t} {_cell(m['fast_1'])}, best speedup@{t} "
                  f"{_cell(m['best_speedup'])}{again}", markup=False)  # fmt: skip
    for note in summary.get("notes", []):
        out.print(f"note: {note}", markup=False)
    cut = summary.get("truncated", 0)
    if cut:
        limit = token_limit(summary)
        answers = summary.get("answers", summary["tasks"] * summary["samples"])
        err.print(f"[yellow]warning:[/yellow] {cut} of {answers} "
                  f"answers stopped at the token limit ({limit} new tokens) before they ended; "
                  "raise it with --max-tokens (eval) or --sampling.max_new_tokens (pipeline, "
                  "config) (samples.jsonl marks them truncated)")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add `eval` to the `tritonrl` app."""
    app.command("eval", context_settings=OVERRIDES)(eval_command)
