"""The run directory and its `manifest.json`: the single source of truth for a run.

A run directory holds every artifact a run writes (datasets, checkpoints, adapters,
reports) and one `manifest.json` that says, for each stage, its status (pending,
running, done, failed, interrupted), its step, its artifacts (paths relative to the run
directory), when it started and finished, its error, and the signal that interrupted it;
plus the resolved config and the versions of python, torch, triton, transformers, trl
and peft; and, for a run kept in an object store, its URL there (`store`), whether the
pipeline drives it (`driver`), the stages the pipeline plans for it (`plan`) and where
`tritonrl resume` restored it from (`restored_from`). Where a stage resumed from is its
info's `resumed_from_checkpoint` and nowhere else: `resumed_from()` (stage, step,
checkpoint) and `tritonrl status` read it from there.

A new run lists `PIPELINE`'s stages as pending, whoever made it; `shown_stages` is what
they are to a user (`tritonrl status`, `report`, `runs list`, and what `tritonrl resume`
goes on with): a stage never started is pending only when the pipeline drives the run
and plans it, else "not run" (the `prepare` and `eval` of a run a lone `sft` made).

A stage finds its inputs ONLY through `Run.artifact(stage, name)`, never by guessing a
path: the prototype this replaces lost its RL weights because one script saved them to
`rl_best_of_n` and another read `rl_final`. A missing artifact is an error that names the
stage, the artifact and what IS recorded.

Writes are atomic (temp file + fsync + `os.replace` + fsync of the directory) and the
manifest is written last: an artifact is recorded only once it exists on disk, so a crash
at any moment leaves a manifest that is readable and refers only to complete files.
Every change re-reads the manifest under an exclusive `flock`, so two processes (a trainer
and a sync thread's process) do not lose each other's updates. The ranks other than 0 of
a multi-process trainer open the run read-only (`Run.open(path, readonly=True)`): their
changes are skipped, rank 0 makes them, and `reload()` reads what it wrote.

What it does NOT do: it does not write the artifacts themselves (the stages do, with
`atomic_write_bytes` or a temp dir + rename), copy anything to an object store, or decide
which stage runs next; the store's copy is `runs/transfer.py`'s and `runs/sync.py`'s.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import platform
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from tritonrl.runs.atomic import atomic_write_json, finite_json
from tritonrl.runs.checkpoint import step_of
from tritonrl.runs.syncdir import store_status

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
FORMAT = 1
STATUSES = ("pending", "running", "done", "failed", "interrupted")
# What `shown_stages` says of a stage never started that nothing plans to run.
NOT_RUN = "not run"
# The stages a new run lists as pending; a stage not listed here is added when it starts.
PIPELINE = ("prepare", "sft", "rl", "eval")
# The order stages run in: one added when it starts goes to its place, not last.
ORDER = ("prepare", "distill", "tiny_model", "sft", "pass_rates", "best_of_n", "rl", "eval",
         "report")  # fmt: skip
VERSIONED = ("torch", "triton", "transformers", "trl", "peft")
RUN_FIELDS = ("store", "driver", "plan", "restored_from")  # run-level fields besides stages
RESUMED = "resumed_from_checkpoint"  # the stage info key a resumed stage records
_STAGE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


class RunError(ValueError):
    """A run directory or manifest that cannot be used as asked; the message says why."""


class ArtifactNotFound(RunError, LookupError):
    """`Run.artifact` was asked for something the manifest does not record (or whose file
    is gone)."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def versions() -> dict[str, str | None]:
    """Versions of python and the training stack (None for a package not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _plain(config: Any) -> dict:
    if config is None:
        return {}
    if is_dataclass(config) and not isinstance(config, type):
        return asdict(config)
    if isinstance(config, dict):
        return json.loads(json.dumps(config))  # a deep copy that must be JSON
    raise TypeError(f"config must be a dataclass or a dict, not {type(config).__name__}")


def _new_stage() -> dict:
    return {
        "status": "pending",
        "step": 0,
        "artifacts": {},
        "info": {},
        "started_at": None,
        "finished_at": None,
        "error": None,
        "signal": None,
    }


def _alive_elsewhere(owner: dict) -> bool:
    """Whether `owner` ({host, pid}) is another live process on this host."""
    if owner.get("host") != socket.gethostname() or owner.get("pid") in (None, os.getpid()):
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_order(stages: dict) -> dict:
    """`stages` in the order they run (`ORDER`); others after them, as they were."""
    rank = {name: i for i, name in enumerate(ORDER)}
    names = sorted(stages, key=lambda n: (rank.get(n, len(ORDER)), list(stages).index(n)))
    return {n: stages[n] for n in names}


def shown_stages(data: dict) -> dict[str, dict]:
    """The stages of a manifest's `data` as a user is shown them (a copy, in `ORDER`):
    each recorded stage as it is, except that one never started is "pending" (work still
    to do) only when the pipeline drives the run (`driver`) and plans it (`plan`; every
    listed stage for a pipeline run that recorded no plan), else `NOT_RUN`; a stage the
    plan names and the manifest does not list yet is listed pending. `tritonrl status`,
    `report`, `runs list` and `resume` all read the stages through this."""
    stages = {name: dict(record) for name, record in (data.get("stages") or {}).items()}
    planned: set[str] = set()
    if data.get("driver") == "pipeline":
        plan = data.get("plan")
        planned = set(stages) if plan is None else set(plan)
    for name in sorted(planned - set(stages)):
        stages[name] = _new_stage()
    for name, record in stages.items():
        if record.get("status") == "pending" and name not in planned:
            record["status"] = NOT_RUN
    return _in_order(stages)


def _check_stage_name(name: str) -> None:
    if not isinstance(name, str) or not _STAGE_NAME.match(name):
        raise RunError(
            f"stage name {name!r} is not valid: use letters, digits, '_' or '-', "
            "starting with a letter (e.g. 'sft')"
        )


class Run:
    """One run directory. Create it with `Run.create`, open it with `Run.open`.

    `data` is the manifest as last read or written; every method that changes it
    re-reads the manifest under the lock first, then writes it back atomically. A
    `readonly` run (a training rank other than 0) skips every change: neither the file
    nor `data` changes.
    """

    def __init__(self, path: Path, data: dict, readonly: bool = False):
        self.path = path
        self.data = data
        self.readonly = readonly

    # ------------------------------------------------------------------ open / create

    @classmethod
    def create(
        cls, path: str | Path, config: Any = None, stages: tuple[str, ...] = PIPELINE
    ) -> Run:
        """A new run in `path` (created if needed; it may exist but must hold no
        manifest). `config` (a dataclass or dict) is stored resolved."""
        path = Path(path).expanduser().resolve()
        if (path / MANIFEST).exists():
            raise RunError(
                f"{path} already holds a run ({MANIFEST} exists): open it with Run.open, or "
                "choose a new run directory"
            )
        if path.exists() and not path.is_dir():
            raise RunError(f"{path} exists and is not a directory; choose a run directory path")
        for name in stages:
            _check_stage_name(name)
        path.mkdir(parents=True, exist_ok=True)
        stamp = now()
        data = {
            "format": FORMAT,
            "created_at": stamp,
            "updated_at": stamp,
            "versions": versions(),
            "config": _plain(config),
            "stages": {name: _new_stage() for name in stages},
        }
        run = cls(path, data)
        with run._locked():
            if (path / MANIFEST).exists():  # another process won the race
                raise RunError(f"{path} already holds a run ({MANIFEST} exists)")
            atomic_write_json(path / MANIFEST, data)
        log.info("created run %s", path)
        return run

    @classmethod
    def open(cls, path: str | Path, readonly: bool = False) -> Run:
        """The run in `path`; a clear `RunError` when there is none or it is unreadable.
        `readonly`: every change is skipped (another process writes this run)."""
        path = Path(path).expanduser().resolve()
        return cls(path, cls._read(path), readonly)

    def reload(self) -> None:
        """Read the manifest again (what another process wrote since)."""
        self.data = self._read(self.path)

    @classmethod
    def open_or_create(cls, path: str | Path, config: Any = None) -> Run:
        path = Path(path).expanduser()
        return cls.open(path) if (path / MANIFEST).exists() else cls.create(path, config)

    @staticmethod
    def _read(path: Path) -> dict:
        file = path / MANIFEST
        if not file.is_file():
            what = "does not exist" if not path.exists() else f"has no {MANIFEST}"
            raise RunError(
                f"{path} {what}: it is not a run directory (runs are made by `tritonrl "
                "pipeline --run-dir DIR`, `tritonrl prepare --run DIR` or `tritonrl sft --run "
                "DIR`)"
            )
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise RunError(f"{file} cannot be read as JSON: {e}") from None
        if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
            raise RunError(f"{file} is not a tritonrl manifest (no 'stages' mapping)")
        if data.get("format", FORMAT) > FORMAT:
            raise RunError(
                f"{file} has manifest format {data['format']}, newer than this tritonrl "
                f"({FORMAT}): upgrade tritonrl"
            )
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _update(self, change: Callable[[dict], None]) -> None:
        """Re-read the manifest, apply `change`, write it back: all under the lock.
        Nothing at all when `readonly`."""
        if self.readonly:
            return
        with self._locked():
            data = self._read(self.path)
            change(data)
            data["updated_at"] = now()
            atomic_write_json(self.path / MANIFEST, data)
            self.data = data

    def adopt_config(self, config: Any) -> None:
        """Record the resolved config of a run created without one (a `prepare` run
        started before any configured stage); refuse if one is already recorded."""

        def change(data: dict) -> None:
            if data.get("config"):
                raise RunError(f"run {self.path} already has a config")
            data["config"] = _plain(config)

        self._update(change)

    # ------------------------------------------------------------------ reading

    @property
    def config(self) -> dict:
        return self.data["config"]

    @property
    def stages(self) -> dict[str, dict]:
        """The stage records in the order stages run (`ORDER`), however an older
        manifest listed them (a distill recorded before it had its place came last)."""
        return _in_order(self.data["stages"])

    def stage(self, name: str) -> dict:
        if name not in self.stages:
            raise RunError(
                f"run {self.path} has no stage {name!r}; its stages are "
                f"{', '.join(self.stages) or '(none)'}"
            )
        return self.stages[name]

    def status(self, name: str) -> str:
        return self.stages[name]["status"] if name in self.stages else "pending"

    def has_artifact(self, stage: str, name: str) -> bool:
        return name in self.stages.get(stage, {}).get("artifacts", {})

    def artifact(self, stage: str, name: str) -> Path:
        """The absolute path of artifact `name` of `stage`, as the manifest records it.

        Raises `ArtifactNotFound` naming the stage, the artifact and what IS recorded when
        the manifest has no such entry or the file it names is gone.
        """
        if stage not in self.stages:
            raise ArtifactNotFound(
                f"no artifact {stage}/{name} in {self.path / MANIFEST}: the run has no stage "
                f"{stage!r} (stages: {', '.join(self.stages) or 'none'})"
            )
        recorded = self.stages[stage]["artifacts"]
        if name not in recorded:
            listing = ", ".join(f"{stage}/{k}" for k in recorded) or "none"
            raise ArtifactNotFound(
                f"no artifact {stage}/{name} in {self.path / MANIFEST}: stage {stage!r} is "
                f"{self.stages[stage]['status']} and records: {listing}"
            )
        full = self.path / recorded[name]
        if not full.exists():
            raise ArtifactNotFound(
                f"artifact {stage}/{name} is recorded as {recorded[name]!r} but {full} does "
                "not exist: the run directory is incomplete (restore it from the store)"
            )
        return full

    def resumed_from(self) -> dict | None:
        """Where the run last resumed: `{"stage", "step", "checkpoint"}` (plus `"store"`
        when the run was restored from an object store), read from the stage info that
        records it (`resumed_from_checkpoint`, run-relative), the latest started stage
        first; a run restored into a stage that had no checkpoint yet gives that stage,
        its step and checkpoint None; None when no stage resumed."""
        restored = self.data.get("restored_from") or {}
        into = self.stages.get(restored.get("stage"), {})
        if restored.get("stage") and not into.get("info", {}).get(RESUMED):
            # restored where its stage had no checkpoint: it started over, from the store
            return {"stage": restored["stage"], "step": restored.get("step") or 0,
                    "checkpoint": None, "store": restored.get("store")}  # fmt: skip
        started = [(r.get("started_at") or "", i, n, r)  # a tie: the later stage
                   for i, (n, r) in enumerate(self.stages.items())
                   if r.get("info", {}).get(RESUMED)]  # fmt: skip
        if not started:
            return None
        _, _, name, record = max(started, key=lambda item: item[:2])
        checkpoint = record["info"][RESUMED]
        step = step_of(checkpoint)
        found = {"stage": name, "step": record["step"] if step is None else step,
                 "checkpoint": checkpoint}  # fmt: skip
        if restored.get("stage") == name:
            found["store"] = restored.get("store")
        return found

    def orphaned(self, name: str) -> bool:
        """Whether stage `name` is recorded running by a process of this host that is
        gone (killed without a word: SIGKILL, the machine's OOM killer)."""
        record = self.stages.get(name) or {}
        owner = record.get("owner") or {}
        if record.get("status") != "running" or owner.get("host") != socket.gethostname():
            return False
        return owner.get("pid") not in (None, os.getpid()) and not _alive_elsewhere(owner)

    @property
    def store(self) -> str | None:
        """The object-store URL this run is synced to (recorded at its first sync)."""
        return self.data.get("store")

    def status_dict(self) -> dict:
        """`{"stages": {name: {"status", "step", ...}}, "resumed_from": ..., "store": ...}`;
        the stages as `shown_stages` gives them (pending: still to do; "not run"); `store`
        is None for a run kept only here, else its URL, last sync and last error; a stage
        recorded running whose process on this host is gone has `process_gone`."""
        stages = shown_stages(self.data)
        for name, record in stages.items():
            if self.orphaned(name):
                record["process_gone"] = True  # recorded running; its process is not
        store = None
        if self.store:
            store = {"url": self.store, **(store_status(self.path) or {})}
        return {"stages": stages, "resumed_from": self.resumed_from(), "store": store}

    # ------------------------------------------------------------------ changing

    def relpath(self, path: str | Path) -> str:
        """`path` relative to the run dir; absolute paths must lie inside it."""
        p = Path(path)
        full = (p if p.is_absolute() else self.path / p).resolve()
        try:
            rel = full.relative_to(self.path)
        except ValueError:
            raise RunError(
                f"artifact path {str(path)!r} lies outside the run directory {self.path}: "
                "write artifacts inside the run directory"
            ) from None
        if str(rel) == ".":
            raise RunError("an artifact must be a file or directory inside the run, not the run")
        return rel.as_posix()

    def start_stage(self, name: str, reopen: bool = False) -> None:
        """Mark `name` running (added when not listed), by this process. A done stage
        restarts only with `reopen` (its budget was raised); no stage restarts while a
        live process on this host is running it."""
        _check_stage_name(name)

        def change(data: dict) -> None:
            if name not in data["stages"]:
                data["stages"] = _in_order({**data["stages"], name: _new_stage()})
            record = data["stages"][name]
            if record["status"] == "done" and not reopen:
                raise RunError(
                    f"stage {name!r} of run {self.path} is already done; start a new run "
                    "directory to run it again"
                )
            owner = record.get("owner") or {}
            if record["status"] == "running" and _alive_elsewhere(owner):
                raise RunError(
                    f"stage {name!r} of run {self.path} is running in process {owner['pid']} "
                    "on this host; wait for it or stop it first"
                )
            record.update(
                status="running", started_at=now(), finished_at=None, error=None, signal=None
            )
            record["info"].pop(RESUMED, None)  # this attempt records its own, if it resumes
            record["owner"] = {"host": socket.gethostname(), "pid": os.getpid()}

        self._update(change)

    def set_step(self, name: str, step: int) -> None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise RunError(f"step of stage {name!r} must be a non-negative int, not {step!r}")

        def change(data: dict) -> None:
            self._record(data, name)["step"] = step

        self._update(change)

    def add_artifact(self, stage: str, name: str, path: str | Path) -> None:
        """Record artifact `name` of `stage` at `path` (inside the run dir; it must already
        exist: the manifest is written last)."""
        rel = self.relpath(path)
        if not (self.path / rel).exists():
            raise RunError(
                f"artifact {stage}/{name}: {self.path / rel} does not exist; write the "
                "artifact before recording it"
            )

        def change(data: dict) -> None:
            self._record(data, stage)["artifacts"][name] = rel

        self._update(change)

    def set_info(self, stage: str, **info: Any) -> None:
        """Record JSON-able facts about a stage (losses, the base model, counts); a NaN
        or infinite float is recorded as a string ("nan", "inf": `finite_json`)."""
        info = finite_json(info)
        json.dumps(info, allow_nan=False)  # fail here, not half-way through a write

        def change(data: dict) -> None:
            self._record(data, stage)["info"].update(info)

        self._update(change)

    def finish_stage(self, name: str) -> None:

        def change(data: dict) -> None:
            self._record(data, name).update(status="done", finished_at=now())

        self._update(change)

    def fail_stage(self, name: str, error: str) -> None:
        """Mark `name` failed with a short error string (artifacts already recorded stay)."""
        text = str(error).strip() or "unknown error"

        def change(data: dict) -> None:
            self._record(data, name, create=True).update(
                status="failed", finished_at=now(), error=text[:2000]
            )

        self._update(change)

    def interrupt_stage(self, name: str, signal_name: str) -> None:
        """Mark `name` interrupted by `signal_name` (SIGTERM, SIGINT) at its recorded step;
        its artifacts, the last checkpoint among them, stay for the resume."""

        def change(data: dict) -> None:
            record = self._record(data, name, create=True)
            checkpoint = record["artifacts"].get("checkpoint")
            where = f"last checkpoint {checkpoint}" if checkpoint else "no checkpoint yet"
            record.update(
                status="interrupted",
                finished_at=now(),
                signal=signal_name,
                error=f"interrupted by {signal_name} at step {record['step']} ({where}); "
                "run the same command again to resume",
            )

        self._update(change)

    def set_fields(self, **values: Any) -> None:
        """Set run-level fields: `store` (the run's URL in its object store), `driver`
        ("pipeline" when `tritonrl pipeline` runs it), `plan` (the stages the pipeline runs
        for its config, in order) and `restored_from` (where `tritonrl resume` fetched it
        from: store, stage, step, at)."""
        unknown = set(values) - set(RUN_FIELDS)
        if unknown:
            raise RunError(f"unknown run field(s) {sorted(unknown)}; known: {RUN_FIELDS}")

        def change(data: dict) -> None:
            data.update(values)

        self._update(change)

    def replace_config(self, config: Any) -> None:
        """Record `config` as the run's resolved config (a stage's budget was raised; the
        caller has checked that nothing else changed)."""

        def change(data: dict) -> None:
            data["config"] = _plain(config)

        self._update(change)

    def _record(self, data: dict, name: str, create: bool = False) -> dict:
        if name not in data["stages"]:
            if not create:
                raise RunError(
                    f"run {self.path} has no stage {name!r}; start it first "
                    f"(stages: {', '.join(data['stages']) or 'none'})"
                )
            _check_stage_name(name)
            data["stages"][name] = _new_stage()
        return data["stages"][name]

    def stage_dir(self, name: str) -> Path:
        """`RUN/<name>/`, created: where a stage writes its artifacts."""
        _check_stage_name(name)
        d = self.path / name
        d.mkdir(parents=True, exist_ok=True)
        return d
