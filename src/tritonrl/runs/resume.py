"""`tritonrl resume --store URL [--run-dir DIR]` and `tritonrl runs list --store URL`.

    tritonrl resume --store s3://bucket/runs/demo             # the run, into ./runs/demo
    tritonrl resume --store s3://bucket/runs --run-dir /scratch/demo   # the store's one run
    tritonrl runs list --store s3://bucket/runs               # its runs and their stages

`resume` is what a fresh machine runs after a pre-emption: it fetches the run's manifest
and files (`transfer.pull`: a checkpoint that is incomplete or corrupt is skipped, with a
warning, for the previous consistent one), records where it came from in the manifest
(`restored_from`: store, stage, step, at), and continues the run: the pipeline when
`tritonrl pipeline` drove it (every stage not done, the interrupted one from its
checkpoint; the pipeline's own `continue_pipeline`, which the command hands in, since
runs sit below the pipeline), else the stage that was running (sft or rl), with the
run's recorded config (and the rl sections its rl stage recorded).
A `--run-dir` that already holds this run (same store URL) is continued as it is, without
fetching; one that holds another run is refused. The stage that resumes records
`resumed_from` (stage, step, checkpoint, store), which `tritonrl status` shows.

What it does NOT do: it does not start machines or pick the newest of several runs: URL
names one run, or a store that holds exactly one.
"""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from tritonrl.config import Config
from tritonrl.config_loader import load_config, upgrade_recorded
from tritonrl.runs.manifest import MANIFEST, Run, RunError, shown_stages
from tritonrl.runs.store import open_store
from tritonrl.runs.transfer import list_runs, pull

log = logging.getLogger(__name__)
TRAINING = ("sft", "rl")
RESUME_CONFIG = "resume-config.yaml"  # in RUN/logs: the recorded config the stages get

# (config, its file, run_dir, say) -> exit code: continue a run the pipeline drove
ContinuePipeline = Callable[[Config, Path, Path, Callable[[str], None]], int]

# Where `--store URL` puts a run: how a run that is not found may have been stored.
LAYOUT = (
    "A run is stored under its store at the run directory's name: `--store s3://B/P "
    "--run-dir X` puts it at s3://B/P/X; give that URL, or its parent s3://B/P"
)


def run_url(store_url: str) -> str:
    """The URL of the one run `store_url` names: itself when it holds a manifest, else its
    only run; a RunError listing the runs when it holds none or several."""
    runs = list_runs(store_url)
    base = store_url.rstrip("/")
    for found in runs:
        if found["url"].rstrip("/") == base:
            return found["url"]
    if len(runs) == 1:
        return runs[0]["url"]
    if not runs:
        raise RunError(
            f"no run in {store_url}: no manifest.json there or one level below. {LAYOUT}"
        )
    names = ", ".join(r["url"] for r in runs)
    raise RunError(f"{store_url} holds {len(runs)} runs ({names}): give --store one of them")


def _next_stage(run: Run) -> tuple[str | None, int]:
    """(the stage to continue, the step its checkpoint is at), or (None, 0): the first
    stage that started and did not finish; else the first one pending, as `tritonrl
    status` shows them (`shown_stages`: only a pipeline run's planned stages are; one a
    lone `sft` never started is "not run", not waiting for anything)."""

    def found(name: str, record: dict) -> tuple[str, int]:
        return name, record.get("step", 0) if record["artifacts"].get("checkpoint") else 0

    stages = shown_stages(run.data)
    for name, record in stages.items():
        if record["status"] in ("running", "interrupted", "failed"):
            return found(name, record)
    for name, record in stages.items():
        if record["status"] == "pending":
            return found(name, record)
    return None, 0


def restore(store_url: str, run_dir: str | Path | None) -> tuple[Run, list]:
    """The run `store_url` names, in `run_dir` (default runs/<name>): fetched unless it is
    already there; and the checkpoints the fetch skipped, with why."""
    open_store(store_url, write=True)  # the resumed run syncs there
    url = run_url(store_url)
    run_dir = Path(run_dir) if run_dir else Path("runs") / url.rstrip("/").rsplit("/", 1)[-1]
    if (run_dir / MANIFEST).exists():
        here = Run.open(run_dir)
        if here.store != url:
            raise RunError(
                f"{run_dir} already holds another run (its store: {here.store or 'none'}); "
                f"choose an empty --run-dir to restore {url} into"
            )
        log.info("%s already holds %s: continuing it as it is", run_dir, url)
        return here, []
    result = pull(url, run_dir)
    run = Run.open(run_dir)
    if run.store != url:
        run.set_fields(store=url)
    stage, step = _next_stage(run)
    at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    run.set_fields(restored_from={"store": url, "stage": stage, "step": step, "at": at})
    return run, list(getattr(result, "skipped", []))


def recorded_config(run: Run) -> dict[str, dict]:
    """The config the run's stages last ran with, `{section: {key: value}}`: the one the
    run recorded (its SFT's), with the sections its rl stage recorded on top (rl may
    change only those: `tritonrl.config.RL_SECTIONS`). Empty when it records
    none. What `tritonrl resume` and a resumed `tritonrl rl` start from."""
    config = dict(run.config or {})
    rl = ((run.stages.get("rl") or {}).get("info") or {}).get("config") or {}
    config.update(rl)
    return config


def config_file(run: Run) -> Path:
    """The run's recorded config as a YAML file the stage commands take with --config
    (a key that has moved since it was recorded at its new name: `upgrade_recorded`)."""
    if not run.config:
        raise RunError(f"run {run.path} records no config: it has nothing to resume")
    config = upgrade_recorded(recorded_config(run), f"run {run.path}")
    path = run.path / "logs" / RESUME_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def continue_run(run: Run, continue_pipeline: ContinuePipeline, say=print) -> int:
    """Continue `run` where it stopped (see the module docstring); the exit code. A run
    `tritonrl pipeline` drove goes on through `continue_pipeline(config, config_path,
    run_dir, say)` (the pipeline's, given by the command: runs sit below the pipeline)."""
    stage, step = _next_stage(run)
    if stage is None:
        say(f"{run.path}: no stage is pending, interrupted or failed; nothing to resume")
        return 0
    path = config_file(run)
    config = load_config(path)  # a config this tritonrl cannot read fails here, naming the key
    say(f"resuming {run.path}: stage {stage} from step {step}")
    if run.data.get("driver") == "pipeline":
        return continue_pipeline(config, path, run.path, say)
    if stage not in TRAINING:
        raise RunError(
            f"run {run.path}: stage {stage} is not done and was not run by `tritonrl "
            "pipeline`; run that stage's command on the restored run directory"
        )
    cmd = [sys.executable, "-m", "tritonrl", stage, "--run", str(run.path), "--config", str(path)]
    if stage == "rl":
        cmd += ["--rl.algo", run.config.get("rl", {}).get("algo", "grpo")]
    return subprocess.call(cmd)


def list_store(store_url: str) -> list[dict]:
    """The runs in a store with their stages (`transfer.list_runs`)."""
    open_store(store_url)
    return list_runs(store_url)
