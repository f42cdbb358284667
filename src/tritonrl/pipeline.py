"""`tritonrl pipeline` and `tritonrl report`: the whole chain in one command, and its report.

    tritonrl pipeline                                   # the embedded default (tiny-cpu)
    tritonrl pipeline --config qwen7b-1gpu --run-dir runs/qwen --rl.max_steps 100
    tritonrl report runs/pipeline                       # -> runs/pipeline/report/report.md
    tritonrl report evals/base evals/sft evals/rl --out reports/compare

The pipeline runs prepare (`pipeline.prepare_source`) -> the tiny model (when
`model.name_or_path` is `tiny`) -> sft -> pass_rates (with `pipeline.pass_rate_samples`:
the SFT model's answers to its training tasks, RUN/pass_rates, which rl then takes as
`rl.pass_rates`) -> rl (`rl.algo`, when `pipeline.rl`) -> eval (`pipeline.eval_tasks`,
`pipeline.eval_samples`; "run" is the run's held-out tasks, and the eval folder is
RUN/eval, recorded as stage `eval`) -> report (RUN/report/report.md, rewritten every
time). A stage the manifest records as done is skipped; an interrupted or failed one is
run again (each resumes where it can). On an existing run, a setting that differs from
the run's recorded one and that only stages already done would take is refused before
any stage, as `tritonrl sft` refuses another config (`check_done_stages`): skipped, it
would be left out in silence; a stage still to run takes or refuses its own. The
manifest records the stages the config plans (`plan`): those `tritonrl status` shows
pending until they are done. Each stage runs as its own `tritonrl` process with the
same --config and overrides, its output streamed line by line into RUN/logs/<stage>.log;
a failure names the stage and that log and exits 1 (2 for a bad config; 128+N when
signal N stopped it: SIGTERM/SIGINT sent to the pipeline go to the running stage, which
checkpoints and stops). `tritonrl status RUN` shows where a run is.

Progress: a training stage's bar (`train.callbacks.TrainingBar`, tqdm, written by the
stage every TQDM_EVERY_S) goes into its log as a line per refresh, and the pipeline shows
it at most every PROGRESS_EVERY_S, and at the end, as `sft: training step 18/40, loss
2.31, 00:30 elapsed, ETA 00:37`; eval's `eval: 8/32 answers verified` lines likewise.

With `--store URL` (`run.store`) the run is synced to URL/<run-dir name>: an unreachable
store is an error before any stage; sft and rl sync at every checkpoint (or every
`run.sync_interval_s`) and at their end, the pipeline after the other stages and during
eval. `tritonrl resume --store URL` continues the pipeline on another machine.

What it does NOT do: it runs the stages one after another on this machine, never in
parallel, and it does not watch for a spot notice itself (sft and rl do).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from tritonrl.cli_config import CONFIG, OVERRIDES, command_config, command_errors
from tritonrl.config import RL_FREE_KEYS, RL_SECTIONS, STORE_KEYS
from tritonrl.config_loader import config_to_dict, diff_configs
from tritonrl.evaluate.commands import out_folder_problem
from tritonrl.evaluate.report import write_report
from tritonrl.runs import RESUMED, Run
from tritonrl.runs.lifecycle import run_store_url
from tritonrl.runs.resume import recorded_config
from tritonrl.runs.store import open_store
from tritonrl.runs.sync import StoreSync, store_status
from tritonrl.train.sft import base_model, quiet_progress
from tritonrl.train.sft.run_dir import resolve_base

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
STAGES = ("prepare", "tiny_model", "sft", "pass_rates", "rl", "eval", "report")


# A stage's exit when it was asked to stop (it checkpointed and synced first).
STOPPED = {130: "SIGINT", 143: "SIGTERM or a spot notice"}
TQDM_EVERY_S = 5  # a stage's progress bar is written (to its log) at most this often
PROGRESS_EVERY_S = 10.0  # and shown in the pipeline's own output at most this often
# tqdm's line: "training:  45%|####5     | 18/40 [00:30<00:37,  1.70s/step, loss=2.31]"
_BAR = re.compile(r"^(?P<desc>[^:|]*):\s*\d+%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+) "
                  r"\[(?P<elapsed>[\d:]+)<(?P<eta>[\d:?]+),\s*[\d.?]*(?:s/)?(?P<unit>[a-z]+)"
                  r"(?:/s)?(?P<post>(?:, [^=,\]]+=[^,\]]*)*)\]")  # fmt: skip
_COUNT = re.compile(r"^eval: (?P<n>\d+)/(?P<total>\d+) answers verified$")


class StageFailed(RuntimeError):
    """A stage's process ended non-zero: failed, or stopped (`STOPPED`: it checkpointed
    and synced first, and the same pipeline command goes on from there). `why`: what
    stopped it (the manifest's record), or the last error its log holds."""

    def __init__(self, stage: str, log: Path, code: int, why: str | None = None):
        if code in STOPPED:
            text = (
                f"stage {stage} stopped by {why or STOPPED[code]} after its checkpoint (exit "
                f"{code}); run the same pipeline command to go on from it, or `tritonrl resume "
                f"--store URL` on another machine; its log: {log}"
            )
        else:
            said = f": {why}" if why else ""
            text = f"stage {stage} failed (exit {code}){said}; its log: {log}"
        super().__init__(text)
        self.stage, self.log, self.code = stage, log, code
        self.stopped = code in STOPPED


def _why(stage: str, log: Path, code: int) -> str | None:
    """What ended a stage: the signal (`spot-notice`, `SIGTERM`, ...) or the error its
    manifest entry records, else the last error line of its log."""
    try:  # the run's manifest: RUN/logs/STAGE.log -> RUN/manifest.json
        manifest = json.loads((log.parent.parent / "manifest.json").read_text())
        entry = manifest["stages"][stage]
        recorded = entry.get("signal") if code in STOPPED else entry.get("error")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        recorded = None
    if recorded or code in STOPPED:
        return " ".join(str(recorded).split())[:300] if recorded else None
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    errors = [ln.removeprefix("error:").strip() for ln in lines if ln.startswith("error:")] or [
        ln.strip() for ln in lines if ln and not ln[0].isspace() and "Error" in ln.split(":")[0]
    ]  # the CLI's own `error: ...` lines first, else a traceback's last line
    return errors[-1][:300] if errors else None


def _command(stage: str, run_dir: Path, config, argv: list[str]) -> list[str]:
    """The `tritonrl` command line of one stage (`argv`: --config and the overrides)."""
    pipe = config.pipeline
    base = [sys.executable, "-m", "tritonrl"]
    if stage == "prepare":
        return base + ["prepare", "--source", pipe.prepare_source, "--run", str(run_dir), *argv]
    if stage == "sft":
        return base + ["sft", "--run", str(run_dir), *argv]
    if stage == "rl":
        chosen = ["--rl.pass_rates", str(run_dir / "pass_rates")] if _pass_rates(config) else []
        return base + ["rl", "--run", str(run_dir), *argv, *chosen]
    if stage == "pass_rates":  # the SFT model on its own training tasks: correct or not
        return base + ["eval", "--model", str(run_dir), "--tasks", f"train:{run_dir}",
                       "--samples", str(pipe.pass_rate_samples), "--out",
                       str(run_dir / "pass_rates"), *argv, "--verify.timing", "false"]  # fmt: skip
    if stage == "eval":
        tasks = [f"run:{run_dir}" if t == "run" else t for t in pipe.eval_tasks]
        return base + ["eval", "--model", str(run_dir), "--tasks", *tasks,
                       "--samples", str(pipe.eval_samples), "--out", str(run_dir / "eval"),
                       *argv]  # fmt: skip
    raise ValueError(f"no command for stage {stage!r}")


def progress_line(stage: str, line: str) -> tuple[str, bool] | None:
    """What the pipeline says of one line of a stage's output when it is progress (a tqdm
    bar, eval's count), and whether it is the last; None for any other line."""
    bar, count = _BAR.match(line), _COUNT.match(line)
    if count:
        return f"{stage}: {line.removeprefix('eval: ')}", count["n"] == count["total"]
    if not bar:
        return None
    post = "".join(f", {kv.replace('=', ' ', 1)}" for kv in bar["post"].split(", ") if kv)
    text = (f"{stage}: {bar['desc'].strip()} {bar['unit']} {bar['n']}/{bar['total']}{post}, "
            f"{bar['elapsed']} elapsed, ETA {bar['eta']}")  # fmt: skip
    return text, bar["n"] == bar["total"]


def _run_process(stage: str, cmd: list[str], log: Path, say=None) -> None:
    """Run one stage's process, its output streamed into `log` a line at a time (a tqdm
    bar's every refresh a line of its own) and its progress passed to `say` (see the
    module docstring); SIGTERM/SIGINT sent to the pipeline go to it (it checkpoints,
    syncs and stops) and the pipeline waits for it rather than leaving it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("TQDM_MININTERVAL", str(TQDM_EVERY_S))
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        with _forwarding(child):
            _stream(stage, child.stdout, f, say)
            code = child.wait()
    if code != 0:
        raise StageFailed(stage, log, code, _why(stage, log, code))


def _stream(stage: str, pipe, log_file, say) -> None:
    """Copy `pipe` into `log_file` line by line (\\r ends a line too), saying progress."""
    shown, shown_at, rest = None, 0.0, b""
    while True:
        chunk = os.read(pipe.fileno(), 65536)
        parts = re.split(rb"[\r\n]", rest + chunk)
        rest = parts.pop() if chunk else b""
        for raw in parts:
            line = raw.decode("utf-8", "replace").rstrip()
            if not line:
                continue
            log_file.write(line + "\n")
            log_file.flush()
            said = progress_line(stage, line) if say else None
            due = said and (said[1] or time.monotonic() - shown_at >= PROGRESS_EVERY_S)
            what = said and said[0].rsplit(", ", 2)[0]  # less the times
            if due and what != shown:  # a closing bar repeats its last line
                say(said[0])
                shown, shown_at = what, time.monotonic()
        if not chunk:
            break
    pipe.close()


@contextlib.contextmanager
def _forwarding(child: subprocess.Popen):
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _sync(run_dir: Path, url: str | None, say) -> None:
    """Push the run to its store between stages (changed files only, manifest last)."""
    if not url:
        return

    if not StoreSync(run_dir, url, 0).sync_now():
        say(f"store: sync to {url} failed; the run goes on here (see the log)")


def _tiny_model(run, config, log: Path) -> None:
    """The run's tiny model, built in this process (the sft stage would build it too)."""
    import logging

    handler = logging.FileHandler(log, encoding="utf-8")
    logging.getLogger("tritonrl").addHandler(handler)
    try:
        with quiet_progress():
            base_model(run, config)
    except Exception as e:
        raise StageFailed("tiny_model", log, 1) from e
    finally:
        logging.getLogger("tritonrl").removeHandler(handler)


def _pass_rates(config) -> bool:
    """Whether the pipeline measures the SFT model's pass rates for rl itself."""
    pipe = config.pipeline
    return pipe.rl and pipe.pass_rate_samples > 0 and not config.rl.pass_rates


def _eval_stage(run, stage: str, cmd: list[str], log: Path, say=None) -> None:
    """An eval process recorded as `stage` (eval, pass_rates): its folder RUN/<stage>."""
    run.start_stage(stage)
    try:
        _run_process(stage, cmd, log, say)
    except StageFailed as e:
        run.fail_stage(stage, str(e))
        raise
    run.add_artifact(stage, "dir", run.path / stage)
    summary = run.path / stage / "summary.json"
    if summary.is_file():
        run.add_artifact(stage, "summary", summary)
    run.finish_stage(stage)


def run_pipeline(config, run_dir: str | Path, argv: list[str], say=print) -> Path:
    """Every stage of `run_dir` not done yet, in order; the report's path. With a store
    (`run.store`), the run is synced after every stage and during eval."""
    run_dir = Path(run_dir).resolve()
    run = Run.open_or_create(run_dir)
    check_done_stages(run, config)  # before anything is written: a refusal changes nothing
    url = run_store_url(run, config.run.store)
    if url:
        open_store(url, write=True)  # unreachable or read-only: an error, before any stage
        if run.store != url:
            run.set_fields(store=url)
    if run.data.get("driver") != "pipeline":
        run.set_fields(driver="pipeline")  # `tritonrl resume` goes on with the pipeline
    if run.data.get("plan") != planned(config):  # what `tritonrl status` shows as pending
        run.set_fields(plan=planned(config))
    try:
        return _stages(config, run_dir, argv, url, say)
    finally:
        _sync(run_dir, url, say)


# The pipeline's stages that take a setting, by section or `section.key` (the rest:
# sft's, which refuses a change itself while it runs); a change none of them is still to
# run with would be silently left out.
_TAKEN_BY = {
    **dict.fromkeys(RL_SECTIONS, ("rl",)),
    **{f"{s}.{k}": ("rl",) for s, keys in RL_FREE_KEYS.items() for k in keys},
    "pipeline.rl": (),  # rl on or off: planned(), which `tritonrl status` shows
    "pipeline.prepare_source": ("prepare",),
    "pipeline.pass_rate_samples": ("pass_rates",),
    "pipeline.eval_tasks": ("eval",),
    "pipeline.eval_samples": ("eval",),
    "sampling": ("pass_rates", "rl", "eval"),
    "verify": ("pass_rates", "rl", "eval"),
}
_BUDGET = {"sft.max_steps": "sft", "sft.epochs": "sft", "rl.max_steps": "rl",
           "best_of_n.rounds": "rl"}  # fmt: skip


def check_done_stages(run: Run, config) -> None:
    """A ValueError, as `tritonrl sft` refuses another config, when `config` changes a
    setting of the run's recorded one (`recorded_config`: sft's, with the rl stage's own
    sections) that only stages already done take: the pipeline skips those, and would
    leave the change out in silence. A change a stage still to run takes is that stage's
    to accept or refuse; the store keys (`run.store`, ...) may differ."""
    recorded = recorded_config(run)
    if not recorded:
        return  # a new run, or one only `prepare` wrote to
    given = config_to_dict(resolve_base(config))
    if _pass_rates(config):  # what the pipeline hands rl (`_command`), as rl recorded it
        given["rl"] = {**given["rl"], "pass_rates": str(run.path / "pass_rates")}
    plan = planned(config)
    left_out = []
    for change in diff_configs(recorded, given):
        key = change.partition(":")[0]
        if key.split(".")[0] == "run" and key.split(".")[1] in STORE_KEYS:
            continue
        stages = _TAKEN_BY.get(key, _TAKEN_BY.get(key.split(".")[0], ("sft",)))
        taking = [s for s in stages if s in plan or s == "sft"]
        if taking and all(run.status(s) == "done" for s in taking):
            left_out.append(change)
    if not left_out:
        return
    raised = [k for k in (c.partition(":")[0] for c in left_out) if k in _BUDGET]
    longer = ""
    if raised:  # as `tritonrl sft` and `tritonrl rl` go on from their last checkpoint
        key = raised[0]
        longer = (f"; to train the done stage {_BUDGET[key]} longer, run it by hand: "
                  f"`tritonrl {_BUDGET[key]} --run {run.path} --{key} N`")  # fmt: skip
    raise ValueError(
        f"run {run.path} was created with a different config; differing: "
        + "; ".join(left_out)
        + ". The stages that take these are done and the pipeline skips them: use the run's "
        "own config and overrides, or a new --run-dir for other settings" + longer
    )


def planned(config) -> list[str]:
    """The stages the pipeline runs for `config`, in order, as the manifest records them
    (`plan`): the report, written every time and recorded nowhere, is not among them."""
    skipped = {
        "tiny_model": not config.uses_tiny_model,
        "pass_rates": not _pass_rates(config),
        "rl": not config.pipeline.rl,
        "report": True,
    }
    return [stage for stage in STAGES if not skipped.get(stage)]


def _stages(config, run_dir: Path, argv: list[str], url: str | None, say) -> Path:
    logs = run_dir / "logs"
    for stage in [*planned(config), "report"]:
        log = logs / f"{stage}.log"
        if stage != "report" and Run.open(run_dir).status(stage) == "done":
            say(f"{stage}: done, skipped")
            continue
        started = time.monotonic()
        say(f"{stage}: running (log: {log})")
        if stage == "tiny_model":
            log.parent.mkdir(parents=True, exist_ok=True)
            _tiny_model(Run.open(run_dir), config, log)
        elif stage in ("eval", "pass_rates"):
            with _eval_sync(run_dir, url, config.run.sync_interval_s):
                cmd = _command(stage, run_dir, config, argv)
                _eval_stage(Run.open(run_dir), stage, cmd, log, say)
        elif stage == "report":
            report = write_report([run_dir])
        else:
            _run_process(stage, _command(stage, run_dir, config, argv), log, say)
        resumed = Run.open(run_dir).stages.get(stage, {}).get("info", {}).get(RESUMED)
        went_on = f" (went on from {resumed})" if resumed else ""
        say(f"{stage}: done in {time.monotonic() - started:.0f}s{went_on}")
        if stage in ("prepare", "tiny_model"):  # sft and rl sync themselves
            _sync(run_dir, url, say)
    return report


def _eval_sync(run_dir: Path, url: str | None, interval_s: float):
    """Eval's samples (appended per batch, resumable) synced every `interval_s` while it
    runs, and at its end (the eval process itself does not sync)."""
    if not url:
        return contextlib.nullcontext()

    return StoreSync(run_dir, url, interval_s)


def pipeline(
    ctx: typer.Context,
    config: str | None = CONFIG,
    run_dir: Path = typer.Option(
        Path("runs/pipeline"), "--run-dir", help="The run directory (created if needed)."
    ),
    store: str | None = typer.Option(
        None, "--store", help="Object store to sync the run to (s3://bucket/prefix, gs://, "
        "file://); short for --run.store. The run is kept there as STORE/<run-dir name>."
    ),
) -> None:  # fmt: skip
    """prepare -> tiny model -> SFT -> RL -> eval -> report, skipping what is done."""
    cfg, _ = command_config(ctx, config, "sft", {"--store": ("run.store", store)})
    argv = ([] if config is None else ["--config", config]) + list(ctx.args)
    if store is not None:
        argv += ["--run.store", store]
    try:  # ValueError: a store that cannot be used (StoreError), a RunError
        with command_errors((ValueError,)):
            report = run_pipeline(cfg, run_dir, argv, say=lambda m: out.print(m, markup=False))
    except StageFailed as e:
        err.print(f"[red]pipeline stopped:[/red] {escape(str(e))}")
        tail = e.log.read_text(errors="replace").splitlines()[-15:] if e.log.is_file() else []
        for line in [] if e.stopped else tail:
            err.print(f"  {escape(line)}")
        raise typer.Exit(e.code if e.code > 128 else 2 if e.code == 2 else 1) from None
    out.print(f"pipeline done: report in {report}", markup=False)
    unsynced = _unsynced(run_dir)
    if unsynced:
        err.print(f"[red]error:[/red] {escape(unsynced)}")
        raise typer.Exit(1)


def _unsynced(run_dir: Path) -> str | None:
    """Why the run's store does not hold its last state, when it has one and its last
    push failed (the final sync is the pipeline's last step); None otherwise."""
    url = Run.open(run_dir).store
    status = store_status(run_dir) if url else None
    if not url or not status or not status.get("last_error"):  # cleared by a good push
        return None
    last_sync = (status.get("last_sync") or {}).get("at")
    return (f"the store {url} does not hold the run's last state (last sync: "
            f"{last_sync or 'never'}; last error: {status['last_error']['error']}); the run "
            f"is complete here: run the same pipeline command again to push it")  # fmt: skip


def report(
    sources: list[str] = typer.Argument(..., metavar="RUN|EVAL_DIR...", help="Runs and evals."),
    out_dir: Path | None = typer.Option(None, "--out", help="Folder (default: FIRST/report)."),
) -> None:
    """A Markdown report with PNG plots of runs and evaluations."""
    problem = out_dir and out_folder_problem(out_dir, "report.md and its plots")
    if problem:
        err.print(f"[red]error:[/red] {escape(problem)}")
        raise typer.Exit(2)
    with command_errors((ValueError, OSError)):
        path = write_report(sources, out_dir)
    out.print(f"report: {path}", markup=False)


def continue_pipeline(config, config_path: Path, run_dir: Path, say=print) -> int:
    """Go on with a run this pipeline drove (`tritonrl resume`, runs/resume.py: `config`
    is the run's recorded config, loaded from `config_path`); the exit code."""
    try:
        run_pipeline(config, run_dir, ["--config", str(config_path)], say=say)
    except StageFailed as e:
        say(f"pipeline stopped: {e}")
        return 2 if e.code == 2 else e.code if e.code > 128 else 1
    return 0


def register(app: typer.Typer) -> None:
    """Add `pipeline` and `report` to the `tritonrl` app."""
    app.command("pipeline", context_settings=OVERRIDES)(pipeline)
    app.command("report")(report)
