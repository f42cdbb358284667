"""Every task source spec a command reads, the run-backed ones included.

`load_sources(specs)` reads what `tritonrl.tasks.load_tasks` reads (files, KernelBench
checkouts, `builtin:...`, `fam:...`, `gen:N[:SEED]`) and also:

* `run:RUN` - the tasks RUN held out from training (`heldout_tasks`: what its eval scores);
* `train:RUN` - the tasks of RUN's training prompts (`training_prompts`);
* `PATH.jsonl` - the task list `prepare` wrote (`tasks.jsonl`).

`tasks list|check|decontaminate`, `eval`, `export-verl` and `distill` all take their
sources here, so one spec means one set of tasks everywhere.

What it does NOT do: decontaminate or filter (the commands do), or open a run for
writing (`run:` and `train:` only read).
"""

from __future__ import annotations

from tritonrl.config_loader import config_from_dict
from tritonrl.data.heldout import heldout_tasks, training_prompts
from tritonrl.data.kernelbook import KernelBookError, load_prepared_tasks
from tritonrl.runs import Run, RunError
from tritonrl.tasks import LoadReport, TaskLoadError, load_tasks


def _run(spec: str, path: str) -> Run:
    try:
        return Run.open(path, readonly=True)
    except (RunError, OSError) as e:
        raise TaskLoadError(spec, f"not a run directory: {e}") from None


def load_source(spec: str) -> LoadReport:
    """The tasks of one spec; a spec that names nothing readable is a `TaskLoadError`."""
    if spec.startswith(("run:", "train:")):
        kind, _, path = spec.partition(":")
        run = _run(spec, path)
        # stage "tasks": a run recorded on a GPU machine still names its tasks on a CPU one
        config = config_from_dict(run.config, f"run {run.path}", stage="tasks")
        if kind == "run":
            return LoadReport(heldout_tasks(run, config))
        return LoadReport(list(training_prompts(run, config)[1].values()))
    if spec.endswith(".jsonl"):
        try:
            return LoadReport(load_prepared_tasks(spec))
        except KernelBookError as e:
            raise TaskLoadError(spec, str(e)) from None
    return load_tasks(spec)


def load_sources(specs: list[str] | str) -> LoadReport:
    """The tasks of several specs in one report, in order."""
    report = LoadReport()
    for spec in [specs] if isinstance(specs, str) else specs:
        report.extend(load_source(spec))
    return report
