"""KernelBook -> tasks and SFT examples: `prepare(source, out_dir, ...)`.

Sources:

* `kernelbook` - `datasets.load_dataset("GPUMODE/KernelBook", split="train")` from the HF
  hub (needs network once; the hub cache serves it after that). The hub is probed first
  (one HTTP request, a few seconds at most); when it cannot be reached, or
  `HF_HUB_OFFLINE` is set, only the cache is read, and without a cached copy `prepare`
  fails at once with one message: download it where there is network
  (`hf download GPUMODE/KernelBook --repo-type dataset --local-dir DIR`) and pass DIR;
* a PATH - a local `.parquet` / `.jsonl` / `.json` file, or a folder of them, with the
  same columns (`python_code`, `triton_code`, `entry_point`, `uuid` required;
  `module_name`, `repo_name`, `synthetic`, `licenses` optional), loaded through `datasets`;
* `builtin` - the builtin suite, then generated tasks (`tritonrl.tasks.generator`) up to
  `max_samples` (more are drawn for those dropped); nothing is downloaded;
* `families` - `family_tasks` training-split tasks of each task family
  (`tritonrl.tasks.families`; `families` names a subset), at KernelBench-like sizes, with
  their solutions; held-out signatures never appear. Each family's prompts carry the
  policy its solutions need (`families.verify_config_for`: the fused family's is partial,
  with the default allowed ops, where the config is strict),
  and the count per family is recorded (`by_family`: the tasks kept, after duplicates and
  contaminated ones are dropped). At most `max_samples` in all: when the families would
  give more, each gives `max_samples // len(families)`. For these two sources a task
  whose solution the static checks (`tritonrl.verify.static`) refuse under the policy its
  prompt names is dropped as `policy` (an SFT answer the verifier would reject); a family
  that loses every task so is named in one warning (`summary.warnings`) with the ops to
  allow.

Steps: rows are visited in a seeded random order and converted into our contract
(`tritonrl.data.convert`: reference `Model`, solution `ModelNew`; rows that cannot be are
dropped and counted by reason); de-duplicated by a hash of the normalised reference (the
first row wins); rows whose reference equals a task of `decontaminate_against`
(`tritonrl.tasks.decontaminate`: a KernelBench checkout, the held-out builtin tasks) are
dropped as `contaminated`, each match listed in the summary; at most `max_samples` are
kept; labelled with a difficulty level (the
AST heuristic, or `labeler="openai:MODEL"` through an OpenAI-compatible endpoint; the
builtin suite keeps its own levels); split into train / validation by a seeded hash of
the task id (the same tasks land in the same split whatever the row order), tasks equal
in `decontaminate_form` (the same program, or the same forward op sequence) kept in one
split, so that no validation task has a copy in training.

Files written to `out_dir`, each atomically (temp file + `os.replace`; `summary.json`
last, so a directory with a summary is complete): `train.jsonl` and `validation.jsonl`
(`{"prompt": [...], "completion": [...], "task_id", "level"}` a line: TRL's
conversational prompt/completion format, built by `tritonrl.data.prompts.sft_example`),
`tasks.jsonl` (`id, level, name, source, solution, origin, split`; read back with
`load_prepared_tasks`) and `summary.json` (`PrepareSummary`).

What it does NOT do: it never runs task or solution code (Inductor's solutions are
CUDA-only and shape-specialised: they teach the format, the verifier judges what a model
writes), does not tokenize or truncate (the trainers do), and `GPUMODE/KernelBook` cannot
be fetched without network: download it once and pass the files as a PATH (`load_rows`
reads the data files in the folders below a folder it is given, as `hf download` writes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
from collections import Counter
from pathlib import Path

from tritonrl.config import VerifyConfig
from tritonrl.data.convert import RowDropped, code_key, convert_row
from tritonrl.data.prompts import POLICIES, policy_settings, sft_example
from tritonrl.tasks import families as task_families
from tritonrl.tasks import load_builtin
from tritonrl.tasks.decontaminate import FORWARD, Decontaminator, checker
from tritonrl.tasks.difficulty import LabelError, label_level, label_level_llm
from tritonrl.tasks.generator import generate_tasks
from tritonrl.tasks.normalize import normal_form
from tritonrl.tasks.task import Task
from tritonrl.verify.static import static_check

log = logging.getLogger(__name__)

KERNELBOOK_HUB_ID = "GPUMODE/KernelBook"
HUB_PROBE_TIMEOUT_S = 5.0
DOWNLOAD_HINT = (
    f"download it where there is network, `hf download {KERNELBOOK_HUB_ID} --repo-type "
    "dataset --local-dir DIR`, and pass --source DIR (or its parquet files)"
)
REQUIRED_COLUMNS = ("python_code", "triton_code", "entry_point", "uuid")
DATA_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
LABELER_ENDPOINT_ENV = ("TRITONRL_LABELER_ENDPOINT", "OPENAI_BASE_URL")


class KernelBookError(ValueError):
    """Unusable input for `prepare`: the message names what is wrong and how to fix it."""


@dataclasses.dataclass
class PrepareSummary:
    """What `prepare` read, kept and dropped (also written as `summary.json`)."""

    source: str
    out_dir: str
    rows_read: int = 0
    kept: int = 0
    train: int = 0
    validation: int = 0
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)
    drop_examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    by_level: dict[str, int] = dataclasses.field(default_factory=dict)
    by_family: dict[str, int] = dataclasses.field(default_factory=dict)
    by_split_level: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    labeler: str = "heuristic"
    labeler_fallbacks: int = 0
    max_samples: int = 0
    val_fraction: float = 0.0
    seed: int = 0
    decontaminated_against: list[str] = dataclasses.field(default_factory=list)
    decontaminate_form: str = FORWARD
    contaminated: list[dict] = dataclasses.field(default_factory=list)  # every Match
    # task id -> the static findings of its solution, for those dropped as `policy`
    policy_findings: dict[str, list] = dataclasses.field(default_factory=dict, repr=False)
    warnings: list[str] = dataclasses.field(default_factory=list)  # said to the user too
    files: dict[str, str] = dataclasses.field(default_factory=dict)

    def drop(self, reason: str, where: str, detail: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        examples = self.drop_examples.setdefault(reason, [])
        if len(examples) < 3:
            examples.append(f"{where}: {detail}"[:300])
        log.debug("dropped %s (%s): %s", where, reason, detail)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("policy_findings")  # drop_examples says them
        return out


# --------------------------------------------------------------------------- files


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Write `rows` one JSON object a line, atomically (temp file + os.replace)."""
    _write_atomic(Path(path), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def write_json(path: str | Path, obj) -> None:
    _write_atomic(Path(path), json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def task_record(task: Task, split: str | None = None) -> dict:
    record = {"id": task.id, "level": task.level, "name": task.name, "source": task.source}
    record.update(solution=task.solution, origin=task.origin)
    return record if split is None else {**record, "split": split}


def load_prepared_tasks(path: str | Path) -> list[Task]:
    """Tasks from a `tasks.jsonl` written by `prepare` (errors name the line)."""
    path = Path(path)
    if not path.is_file():
        raise KernelBookError(f"{path}: no such file; run `tritonrl prepare` to make tasks.jsonl")
    tasks = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            fields = ("id", "level", "name", "source", "origin")
            tasks.append(Task(**{k: r[k] for k in fields}, solution=r.get("solution")))
        except (ValueError, KeyError, TypeError) as e:
            raise KernelBookError(
                f"{path}:{n}: not a task record ({type(e).__name__}: {e})"
            ) from None
    return tasks


# --------------------------------------------------------------------------- reading


def hub_unreachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when the HF hub answers one HTTP request (any status); else why not:
    `HF_HUB_OFFLINE` set, or the connection error. Proxies and `HF_ENDPOINT` apply, as
    for the download itself; no retries (the hub client's own make ~24 s of warnings)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.is_offline_mode():
        return "HF_HUB_OFFLINE is set"
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
    except Exception as e:  # any transport error: DNS, refused, timeout, TLS, proxy
        return f"{constants.ENDPOINT} did not answer: {type(e).__name__}: {e}"
    return None


def _load_hub(datasets, cache_dir: str | None, offline: str | None):
    """KernelBook from the hub, or, when `offline` says why it cannot be, from the cache
    alone (the hub libraries' offline switches, flipped for this call only)."""
    load = lambda: datasets.load_dataset(KERNELBOOK_HUB_ID, split="train", cache_dir=cache_dir)
    if not offline:
        return load()
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        return load()
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def _data_files(path: Path) -> tuple[list[Path], str]:
    if path.is_file():
        files = [path]
    else:  # a folder: its own files, else those below it (a `hf download --local-dir`)
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in DATA_SUFFIXES)
        files = files or sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    files = [f for f in files if f.suffix in DATA_SUFFIXES]
    kinds = {DATA_SUFFIXES[f.suffix] for f in files}
    if not files:
        raise KernelBookError(
            f"{path}: no .parquet, .jsonl or .json data file; --source takes kernelbook, "
            "builtin, families, or a local KernelBook export in one of those formats"
        )
    if len(kinds) > 1:
        raise KernelBookError(f"{path}: mixes parquet and JSON files; keep one format a folder")
    return files, kinds.pop()


def load_rows(source: str, cache_dir: str | None = None):
    """The KernelBook rows of `source` (`kernelbook` or a PATH) as a `datasets.Dataset`,
    after checking the columns (the error names every missing one)."""
    try:
        import datasets
    except ImportError:
        raise KernelBookError(
            "reading KernelBook needs the `datasets` package: pip install 'tritonrl[train]'"
        ) from None
    offline = None  # why the hub cannot be reached, when it cannot
    if source == "kernelbook":
        where = f"{KERNELBOOK_HUB_ID} (HF hub)"
        offline = hub_unreachable()
        if offline:
            log.info("HF hub: %s; reading %s from the cache only", offline, KERNELBOOK_HUB_ID)
        load = lambda: _load_hub(datasets, cache_dir, offline)
    else:
        path = Path(source).expanduser()
        if not path.exists():
            raise KernelBookError(
                f"{source}: no such file or directory; --source takes kernelbook, builtin, "
                "families, or a local .parquet/.jsonl/.json file (or folder) with KernelBook's "
                "columns"
            )
        files, kind = _data_files(path)
        where = str(path)
        data_files = [str(f) for f in files]
        load = lambda: datasets.load_dataset(
            kind, data_files=data_files, split="train", cache_dir=cache_dir
        )
    try:
        rows = load()
    except Exception as e:  # network, auth, corrupt files: all end the same way
        if source == "kernelbook" and offline:
            raise KernelBookError(
                f"cannot load {where}: the hub is out of reach ({offline}) and no copy is "
                f"cached; {DOWNLOAD_HINT}"
            ) from None
        hint = f"; {DOWNLOAD_HINT}" if source == "kernelbook" else ""
        raise KernelBookError(f"cannot load {where}: {type(e).__name__}: {e}{hint}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.column_names]
    if missing:
        raise KernelBookError(
            f"{where}: missing column(s) {', '.join(missing)} (found: "
            f"{', '.join(rows.column_names) or 'none'}); KernelBook rows need "
            f"{', '.join(REQUIRED_COLUMNS)}"
        )
    return rows


# --------------------------------------------------------------------------- labels


def parse_labeler(labeler: str | None, endpoint: str | None) -> tuple[str, str] | None:
    """`openai:MODEL` -> (endpoint, model); None -> None (the AST heuristic)."""
    if labeler is None or labeler == "heuristic":
        return None
    kind, _, model = labeler.partition(":")
    if kind != "openai" or not model:
        raise KernelBookError(f"labeler {labeler!r}: use `heuristic` or `openai:MODEL_NAME`")
    endpoint = endpoint or next(
        (os.environ[v] for v in LABELER_ENDPOINT_ENV if os.environ.get(v)), None
    )
    if not endpoint:
        raise KernelBookError(
            f"labeler {labeler!r} needs an endpoint: pass one or set "
            f"{' or '.join(LABELER_ENDPOINT_ENV)} (e.g. http://localhost:8000/v1)"
        )
    return endpoint, model


def _label(tasks: list[Task], llm, api_key: str | None, summary: PrepareSummary) -> list[Task]:
    out = []
    for task in progress(tasks, "labelling"):
        level = None
        if llm is not None:
            try:
                level = label_level_llm(task.source, llm[0], llm[1], api_key=api_key)
            except LabelError as e:
                if not out:  # the first call failed: the endpoint is wrong, say so now
                    raise KernelBookError(f"LLM labeller: {e}") from None
                summary.labeler_fallbacks += 1
                log.warning("LLM label for %s failed (%s); using the heuristic", task.id, e)
        out.append(dataclasses.replace(task, level=level or label_level(task.source)))
    return out


# --------------------------------------------------------------------------- prepare


def progress(items, desc: str):
    """`items` with a tqdm bar when tqdm is installed and stderr is a terminal."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, disable=None, leave=False)


def _contaminated(task: Task, where: str, check: Decontaminator | None,
                  summary: PrepareSummary) -> bool:  # fmt: skip
    """Whether `task` equals a task it must not be trained on; if so it is counted."""
    found = check.matches(task) if check is not None else []
    if found:
        summary.contaminated += [m.to_dict() for m in found]
        summary.drop("contaminated", where, "; ".join(map(str, found)))
    return bool(found)


def _kernelbook_items(
    rows, summary: PrepareSummary, max_samples: int, seed: int, verify: VerifyConfig,
    example: bool, check: Decontaminator | None = None,
):  # fmt: skip
    """Converted, de-duplicated (task, example) pairs in a seeded order, up to max_samples."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    items, seen_code, seen_ids = [], set(), set()
    for index in progress(order, "converting"):
        if len(items) >= max_samples:
            break
        row = rows[index]
        summary.rows_read += 1
        where = f"row {index} (uuid {row.get('uuid')})"
        try:
            task, converted = convert_row(row, verify.policy, example, verify.allowed_torch_ops)
        except RowDropped as e:
            summary.drop(e.reason, where, e.detail)
            continue
        key = code_key(task.source)
        if key in seen_code or task.id in seen_ids:
            what = "reference" if key in seen_code else "uuid"
            summary.drop("duplicate", where, f"same {what} as an earlier row")
            continue
        seen_code.add(key)
        seen_ids.add(task.id)
        if _contaminated(task, where, check, summary):
            continue
        items.append((task, converted))
    return items


def _builtin_tasks(max_samples: int, seed: int):
    """The builtin suite, then generator tasks from `seed`, as many as are asked for."""
    builtin = load_builtin("all").tasks
    yield from builtin
    done, n = 0, max(max_samples - len(builtin), 1)
    while True:  # generate_tasks(n) is a prefix of generate_tasks(2n)
        yield from generate_tasks(n, seed=seed)[done:]
        done, n = n, 2 * n


def _builtin_items(
    summary: PrepareSummary, max_samples: int, seed: int, verify: VerifyConfig,
    example: bool, check: Decontaminator | None = None,
):  # fmt: skip
    items, seen = [], set()
    for task in _builtin_tasks(max_samples, seed):
        if len(items) >= max_samples:
            break
        item = _task_item(task, seen, check, summary, verify, example)
        if item is not None:
            items.append(item)
    return items


def _task_item(task, seen: set, check: Decontaminator | None, summary: PrepareSummary,
               verify: VerifyConfig, example: bool):  # fmt: skip
    """`(task, its SFT example)`, or None with the reason recorded: a reference seen
    before, one equal to a task of `check`, or a solution the SFT example refuses. The
    prompt names the policy the task is verified under (`policy_settings`)."""
    summary.rows_read += 1
    key = code_key(task.source)
    if key in seen:
        summary.drop("duplicate", task.id, "same reference as an earlier task")
        return None
    seen.add(key)
    if _contaminated(task, task.id, check, summary):
        return None
    settings = policy_settings(verify, task.id)
    findings = static_check(task.solution or "", settings["policy"],
                            frozenset(settings["allowed_torch_ops"]))  # fmt: skip
    if findings:  # the verifier would refuse the answer the prompt is trained towards
        summary.drop("policy", task.id, "; ".join(map(_finding_text, findings)))
        summary.policy_findings.setdefault(task.id, findings)
        return None
    try:
        return task, sft_example(task.source, task.solution or "", include_example=example,
                                 **settings)  # fmt: skip
    except ValueError as e:
        summary.drop("sft_rejected", task.id, str(e))
        return None


def _finding_text(finding) -> str:
    return f"{finding.flag} (line {finding.line}: {finding.detail})"


def _policy_warning(family: str, findings: list, verify: VerifyConfig) -> str:
    """The one line that says why every task of `family` was dropped as `policy` (its
    solutions' `findings`), and what to allow."""
    flags = ", ".join(sorted({f.flag for f in findings}))
    ops = sorted({f.op for f in findings if f.op})
    settings = policy_settings(verify, f"{task_families.PREFIX}{family}:0")
    fix = (f"add {', '.join(ops)} to verify.allowed_torch_ops (e.g. --verify.allowed_torch_ops "
           f"'[{', '.join([*settings['allowed_torch_ops'], *ops])}]')"
           if ops else "its solutions break the policy")  # fmt: skip
    return (
        f"family {family}: all its tasks dropped, their solutions fail the static checks "
        f"under policy {settings['policy']} ({flags}: {findings[0].detail}); {fix}"
    )


def _family_items(
    summary: PrepareSummary, max_samples: int, seed: int, verify: VerifyConfig,
    example: bool, per_family: int, names: list[str] | None,
    check: Decontaminator | None = None,
):  # fmt: skip
    """`per_family` training tasks of each family (fewer when max_samples says so), each
    with its SFT example under the policy its solution needs; those equal to a task of
    `check` are dropped as `contaminated` (not replaced: a family's count says so)."""
    names = list(names or task_families.FAMILIES)
    unknown = [n for n in names if n not in task_families.FAMILIES]
    if unknown:
        raise KernelBookError(
            f"data.families: unknown {unknown}; the families are "
            f"{', '.join(task_families.FAMILIES)}"
        )
    if per_family < 1:
        raise KernelBookError(f"data.family_tasks must be at least 1, not {per_family}")
    if per_family * len(names) > max_samples:
        per_family = max(1, max_samples // len(names))
        log.warning("max_samples %d: %d tasks per family", max_samples, per_family)
    items, seen = [], set()
    for name in names:
        kept, flagged = 0, len(summary.policy_findings)
        for task in progress(task_families.draw(per_family, seed, "train", [name]), name):
            item = _task_item(task, seen, check, summary, verify, example)
            if item is not None:
                items.append(item)
                kept += 1
        summary.by_family[name] = kept
        found = [f for fs in list(summary.policy_findings.values())[flagged:] for f in fs]
        if not kept and found:
            summary.warnings.append(_policy_warning(name, found, verify))
            log.warning(summary.warnings[-1])
    return items


def split_ids(
    ids: list[str], val_fraction: float, seed: int, groups: dict[str, str] | None = None
) -> set[str]:
    """The validation ids: about `round(n * val_fraction)` of them (at least one when the
    fraction is positive and n >= 2), whole groups at a time (`groups`: id -> key; ids of
    one key land in one split), the groups whose smallest seeded hash of an id is smallest
    first, a group that would overshoot skipped. Independent of order; without groups,
    exactly the ids with the smallest hash."""
    if val_fraction <= 0 or len(ids) < 2:
        return set()
    n_val = min(len(ids) - 1, max(1, round(len(ids) * val_fraction)))
    members: dict[tuple[str, str], list[str]] = {}
    for i in ids:
        key = ("group", groups[i]) if groups and i in groups else ("id", i)
        members.setdefault(key, []).append(i)

    def rank(i: str) -> str:
        return hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()

    ranked = sorted(members.values(), key=lambda group: min(map(rank, group)))
    val: set[str] = set()
    for group in ranked:
        if len(val) + len(group) <= n_val:
            val.update(group)
    if not val and len(ranked) > 1:  # every group is too big: the first one anyway
        val.update(ranked[0])
    return val


def split_groups(tasks: list[Task], form: str) -> dict[str, str]:
    """id -> the task's key in the normal form `form` (the program's where the forward
    form has none): tasks of one key are one group for `split_ids`, so no validation task
    has a copy in training (`tritonrl.tasks.normalize`)."""
    groups = {}
    for task in tasks:
        keys = normal_form(task.source, task.origin)
        groups[task.id] = keys.key(form) or keys.program
    return groups


def _check_args(max_samples: int, val_fraction: float, policy: str) -> None:
    if policy not in POLICIES:
        raise KernelBookError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    if max_samples < 1:
        raise KernelBookError(f"max_samples must be at least 1, not {max_samples}")
    if not 0 <= val_fraction < 1:
        raise KernelBookError(f"val_fraction must be in [0, 1), not {val_fraction}")


def prepare(
    source: str = "kernelbook",
    out_dir: str | Path = "data",
    max_samples: int = 1000,
    val_fraction: float = 0.05,
    seed: int = 0,
    labeler: str | None = None,
    labeler_endpoint: str | None = None,
    labeler_api_key: str | None = None,
    policy: str = "strict",
    allowed_torch_ops: list[str] | None = None,
    cache_dir: str | None = None,
    include_example: bool = True,
    family_tasks: int = 100,
    families: list[str] | None = None,
    decontaminate_against: list[str] = (),
    decontaminate_form: str = FORWARD,
) -> PrepareSummary:
    """Turn `source` into SFT files and a task list in `out_dir` (see the module docstring).

    `labeler_endpoint` defaults to $TRITONRL_LABELER_ENDPOINT, then $OPENAI_BASE_URL;
    `labeler_api_key` to $OPENAI_API_KEY. `policy` and `allowed_torch_ops` are the
    verifier's (`partial` with none allows `PARTIAL_TORCH_OPS`): each prompt names those
    its task is verified under, with the one-shot example when `include_example`
    (data.include_example: the prompts RL and eval build for the same run must match
    these). `cache_dir` is the `datasets` cache. `family_tasks` and `families`: the
    `families` source's tasks per family and which families (None: all).
    `decontaminate_against` are task specs (`data.decontaminate_against`) whose tasks no
    kept row may equal in `decontaminate_form`. Raises `KernelBookError` on bad input
    before anything is written.
    """
    _check_args(max_samples, val_fraction, policy)
    verify = VerifyConfig(policy=policy, allowed_torch_ops=list(allowed_torch_ops or []))
    llm = parse_labeler(labeler, labeler_endpoint)
    try:
        check = checker(decontaminate_against, decontaminate_form, "data.decontaminate_against")
    except ValueError as e:
        raise KernelBookError(str(e)) from None
    out = Path(out_dir)
    summary = PrepareSummary(
        source=source, out_dir=str(out), max_samples=max_samples, val_fraction=val_fraction,
        seed=seed, labeler=labeler or "heuristic",
        decontaminated_against=list(decontaminate_against),
        decontaminate_form=decontaminate_form,
    )  # fmt: skip
    if source == "builtin":
        if llm is not None:
            log.warning("--labeler is ignored for the builtin source: its tasks have levels")
        summary.labeler = "builtin levels"
        items = _builtin_items(summary, max_samples, seed, verify, include_example, check)
    elif source == "families":
        if llm is not None:
            log.warning("--labeler is ignored for the families source: its tasks have levels")
        summary.labeler = "family levels"
        items = _family_items(
            summary, max_samples, seed, verify, include_example, family_tasks, families, check
        )
    else:
        rows = load_rows(source, cache_dir)
        items = _kernelbook_items(rows, summary, max_samples, seed, verify, include_example, check)
        api_key = labeler_api_key or os.environ.get("OPENAI_API_KEY")
        tasks = _label([t for t, _ in items], llm, api_key, summary)
        items = [(t, ex) for t, (_, ex) in zip(tasks, items, strict=True)]
    if not items:
        raise KernelBookError(
            f"{source}: no usable rows ({summary.rows_read} read; dropped: {summary.dropped}); "
            "nothing written"
        )
    _write_outputs(out, items, summary)
    return summary


def _write_outputs(out: Path, items: list, summary: PrepareSummary) -> None:
    groups = split_groups([t for t, _ in items], summary.decontaminate_form)
    val = split_ids([t.id for t, _ in items], summary.val_fraction, summary.seed, groups)
    splits: dict[str, list[dict]] = {"train": [], "validation": []}
    tasks = []
    for task, example in items:
        split = "validation" if task.id in val else "train"
        splits[split].append({**example, "task_id": task.id, "level": task.level})
        tasks.append(task_record(task, split))
    summary.kept, summary.train, summary.validation = len(items), *map(len, splits.values())
    levels = Counter(str(t.level) for t, _ in items)
    summary.by_level = dict(sorted(levels.items()))
    summary.by_split_level = {
        name: dict(sorted(Counter(str(r["level"]) for r in rows).items()))
        for name, rows in splits.items()
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (*splits.items(), ("tasks", tasks)):
        write_jsonl(out / f"{name}.jsonl", rows)
        summary.files[name] = str(out / f"{name}.jsonl")
    summary.files["summary"] = str(out / "summary.json")
    write_json(out / "summary.json", summary.to_dict())
    log.info(
        "prepared %d examples (%d train, %d validation) from %s in %s",
        summary.kept, summary.train, summary.validation, summary.source, out,
    )  # fmt: skip
