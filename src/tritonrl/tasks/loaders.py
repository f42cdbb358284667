"""Find tasks: one file, a KernelBench-style directory, or the builtin suite.

Source specs understood by `load_tasks`:

* `path/to/19_ReLU.py` - one reference file;
* `path/to/KernelBench` - a checkout laid out like KernelBench (`level1/` ... `level4/`,
  files `<id>_<Name>.py`; a repository root holding `KernelBench/level1/` also works),
  or one `levelN/` folder of it;
* `builtin:level1`, `builtin:level2`, `builtin:all`, `builtin:heldout` (the builtin
  tasks kept out of training, `HELDOUT_BUILTIN`: by default the training data is
  decontaminated against them, `data.decontaminate_against`), or one builtin task by id
  (`builtin:level1/1_ReLU`);
* `fam:[FAMILY:]N[:SEED][:train|heldout|all][:small]` - N tasks of the task families
  (`tritonrl.tasks.families`), all families or one, e.g. `fam:matmul:20:0:heldout`.
* `gen:N[:SEED]` - N distinct tasks of the element-wise generator
  (`tritonrl.tasks.generator`) from seed SEED (1 when left out), e.g. `gen:200:0`.

(`tritonrl.data.sources.load_sources` reads these and a run's tasks too.)

A task's reference Triton solution, when it has one, is a file of the same name in a
`solutions/` folder beside the task's folder, mirroring it as the builtin suite does
(`level1/1_ReLU.py` -> `solutions/level1/1_ReLU.py`; a file outside a level folder,
`my_tasks/1_ReLU.py` -> `my_tasks/solutions/1_ReLU.py`): see `solution_path`.

Loading reads files and parses them; it never executes task or candidate code. A
directory with bad files loads the good ones and reports each bad one in `LoadReport`.
A file's syntax is checked before its level is guessed, so a broken file reports its
syntax error alone.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from tritonrl.tasks import families
from tritonrl.tasks.generator import generate_tasks
from tritonrl.tasks.task import Task, TaskLoadError, parse_file_name, validate_reference

log = logging.getLogger(__name__)

# What a source spec may be besides a path, for the error that lists them.
SOURCE_FORMS = ("builtin:level1|level2|all|heldout|<id>, fam:[FAMILY:]N[:SEED][:SPLIT][:small], "
                "gen:N[:SEED], run:RUN, train:RUN, or prepare's tasks.jsonl")  # fmt: skip
BUILTIN_DIR = Path(__file__).parent / "builtin"
BUILTIN_LEVELS = ("level1", "level2")
SOLUTIONS_DIR = "solutions"
_LEVEL_DIR = re.compile(r"^level(\d+)$")
HELDOUT = "heldout"
# The builtin tasks kept out of training, for evaluation: a few activations, a reduction,
# softmax, a norm, and four fusions (the other builtin tasks are trained on).
HELDOUT_BUILTIN = (
    "level1/1_ReLU", "level1/2_Sigmoid", "level1/4_GELU", "level1/7_ELU",
    "level1/9_SiLU", "level1/11_Sum_Reduction", "level1/16_Softmax", "level1/19_RMSNorm",
    "level2/1_Gemm_Bias_ReLU", "level2/4_Gemm_Sigmoid_Scale", "level2/16_Mul_Add_ReLU_Sum",
    "level2/18_Swish_RowMax",
)  # fmt: skip


@dataclass
class LoadReport:
    """Tasks that loaded and the files that did not (each error names file and reason)."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskLoadError] = field(default_factory=list)

    def extend(self, other: LoadReport) -> None:
        self.tasks.extend(other.tasks)
        self.errors.extend(other.errors)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskLoadError(str(path), "not UTF-8 text") from None
    except OSError as e:
        raise TaskLoadError(str(path), f"cannot read: {e.strerror or e}") from None


def _guess_level(source: str) -> int:
    # The labeller loads only for a task file that names no level: the sandboxed worker
    # imports this package and never needs it (lazy: the worker's imports stay few).
    from tritonrl.tasks.difficulty import label_level

    return label_level(source)


def solution_path(path: str | Path) -> Path:
    """Where the reference solution of the task file `path` is looked for (see the module
    docstring)."""
    path = Path(path)
    if _LEVEL_DIR.match(path.parent.name):
        return path.parent.parent / SOLUTIONS_DIR / path.parent.name / path.name
    return path.parent / SOLUTIONS_DIR / path.name


def load_file(
    path: str | Path,
    level: int | None = None,
    task_id: str | None = None,
    solution: str | None = None,
    origin: str | None = None,
) -> Task:
    """Load one reference file. The level comes from a `levelN` parent folder, else the
    difficulty heuristic; the solution, when not given, from `solution_path(path)`."""
    path = Path(path)
    if not path.is_file():
        raise TaskLoadError(str(path), "no such file")
    source = _read(path)
    validate_reference(source, origin or str(path))  # before a guess that would hide it
    problem_id, name = parse_file_name(path.name)
    if level is None:
        m = _LEVEL_DIR.match(path.parent.name)
        level = int(m.group(1)) if m else _guess_level(source)
    if solution is None and solution_path(path).is_file():
        solution = _read(solution_path(path))
    return Task(
        id=task_id or path.stem,
        level=level,
        name=name,
        source=source,
        origin=origin or str(path),
        problem_id=problem_id,
        solution=solution,
    )


def _sort_key(path: Path) -> tuple[int, str]:
    problem_id, _ = parse_file_name(path.name)
    return (problem_id if problem_id is not None else 1 << 30, path.name)


def _level_dirs(root: Path) -> list[Path]:
    if _LEVEL_DIR.match(root.name):
        return [root]
    for base in (root, root / "KernelBench"):
        dirs = (
            [d for d in base.iterdir() if d.is_dir() and _LEVEL_DIR.match(d.name)]
            if base.is_dir()
            else []
        )
        if dirs:
            return sorted(dirs, key=lambda d: int(_LEVEL_DIR.match(d.name).group(1)))
    return []


def load_directory(root: str | Path, prefix: str = "") -> LoadReport:
    """Load every `<id>_<Name>.py` under the `levelN/` folders of `root`, with the
    solutions of a `solutions/` folder beside them (the builtin suite has one)."""
    root = Path(root)
    if not root.is_dir():
        raise TaskLoadError(str(root), "no such directory")
    level_dirs = _level_dirs(root)
    if not level_dirs:
        raise TaskLoadError(
            str(root),
            "no level1/ ... level4/ folders found; point at a KernelBench checkout "
            "(or its KernelBench/ folder, or one levelN/ folder)",
        )
    report = LoadReport()
    for level_dir in level_dirs:
        level = int(_LEVEL_DIR.match(level_dir.name).group(1))
        for path in sorted(level_dir.glob("*.py"), key=_sort_key):
            if path.name.startswith("__"):
                continue
            try:
                task_id = f"{prefix}{level_dir.name}/{path.stem}"
                # A prefixed suite (the builtin one) ships with the package: its origin is
                # its id, not a path of the machine it was installed on.
                origin = task_id if prefix else None
                report.tasks.append(load_file(path, level, task_id, origin=origin))
            except TaskLoadError as e:
                log.info("skipping %s", e)
                report.errors.append(e)
    return report


def load_builtin(which: str = "all") -> LoadReport:
    """The builtin suite: `level1`, `level2`, `all`, `heldout`, or one task id like
    `level1/1_ReLU`."""
    suite = load_directory(BUILTIN_DIR, prefix="builtin:")
    if which == "all":
        return suite
    if which == HELDOUT:
        held = {f"builtin:{i}" for i in HELDOUT_BUILTIN}
        wanted = [t for t in suite.tasks if t.id in held]
    elif which in BUILTIN_LEVELS:
        wanted = [t for t in suite.tasks if t.id.startswith(f"builtin:{which}/")]
    else:
        wanted = [t for t in suite.tasks if t.id == f"builtin:{which}"]
        if not wanted:
            raise TaskLoadError(
                f"builtin:{which}",
                "no such builtin task or level; use builtin:level1, builtin:level2, "
                "builtin:all, builtin:heldout or an id from `tritonrl tasks list builtin:all`",
            )
    return LoadReport(wanted, suite.errors)


def load_source(spec: str) -> LoadReport:
    """Load the tasks named by one source spec (see the module docstring)."""
    if spec.startswith("builtin:"):
        return load_builtin(spec.removeprefix("builtin:"))
    if families.is_spec(spec):
        try:
            return LoadReport(families.load_spec(spec))
        except ValueError as e:
            raise TaskLoadError(spec, str(e).removeprefix(f"{spec}: ")) from None
    if spec.startswith("gen:"):
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[1:]):
            raise TaskLoadError(spec, "a generator spec is gen:N[:SEED], N tasks from seed SEED")
        return LoadReport(generate_tasks(int(parts[1]), seed=int(parts[2]) if parts[2:] else 1))
    path = Path(spec).expanduser()
    if path.is_dir():
        return load_directory(path)
    if path.is_file():
        return LoadReport([load_file(path)])
    raise TaskLoadError(spec, f"no such file or directory (or {SOURCE_FORMS})")


def load_tasks(specs: list[str] | str) -> LoadReport:
    """Load several source specs into one report."""
    report = LoadReport()
    for spec in [specs] if isinstance(specs, str) else specs:
        report.extend(load_source(spec))
    return report
