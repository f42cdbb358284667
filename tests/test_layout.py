"""The package's layering: its modules import each other without a cycle, every import
runs down the layers below, and the project's own imports sit at the top of a file
unless a comment on the line says why one is lazy.

Imports inside functions count (that is how a loop hides: each side imports the other
lazily); imports for type checkers only are left out. `python tests/test_layout.py`
prints every finding."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tritonrl

ROOT = Path(tritonrl.__file__).parent
PACKAGE = "tritonrl"

# Rooms from the bottom up: a room imports only rooms of a lower rank (its own modules
# aside). Rooms of one rank do not import each other.
RANKS: dict[str, int] = {
    "astlock": 0,
    "config": 1,
    "config_loader": 2,
    "cli_config": 3,
    "runs": 3,
    "tasks": 3,
    "extract": 3,
    "verify": 4,
    "reward": 5,
    "data": 6,
    "models": 7,
    "train": 8,
    "evaluate": 8,
    "commands": 9,  # every package's `commands.py`: the typer commands over it
    "pipeline": 10,
    "cli": 11,
    "__main__": 12,
}
LAZY_MARK = "lazy"  # an import inside a function says why: `# lazy: loads torch`


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[-1] == "commands":
        return "commands"
    return parts[1] if len(parts) > 1 else ""


def _sources() -> dict[str, Path]:
    skip = ROOT / "tasks" / "builtin"  # task files, not the package's code
    return {_module(p): p for p in ROOT.rglob("*.py") if skip not in p.parents}


def _imports(path: Path, modules: dict[str, Path]):
    """(line, target module, inside a function, the line's text) for every import of the
    project's own modules, type-checking blocks left out."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    nested = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found = set()
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found = {a.name for a in node.names}
        else:
            continue
        source = "\n".join(lines[node.lineno - 2 : node.end_lineno])
        for target in found:
            if target in modules:
                yield node.lineno, target, id(node) in nested, source


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, target, _, _ in _imports(path, modules):
            if target != name and not name.startswith(target + "."):
                graph[name].add(target)  # a package's own __init__ is not an edge back
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def wrong_way(modules: dict[str, Path]) -> list[str]:
    found = []
    for name, path in sorted(modules.items()):
        room = _room(name)
        for line, target, _, _ in _imports(path, modules):
            other = _room(target)
            if not room or not other or other == room:
                continue
            if room not in RANKS or other not in RANKS:
                found.append(f"{name}:{line} -> {target}: a room missing from RANKS")
            elif RANKS[other] >= RANKS[room]:
                found.append(f"{name}:{line} -> {target} ({room} {RANKS[room]} -> "
                             f"{other} {RANKS[other]})")  # fmt: skip
    return found


def unexplained_lazy(modules: dict[str, Path]) -> list[str]:
    return [
        f"{name}:{line} -> {target}"
        for name, path in sorted(modules.items())
        for line, target, inside, source in _imports(path, modules)
        if inside and LAZY_MARK not in source
    ]


def test_no_import_cycle_in_the_package():
    modules = _sources()
    graph = _graph(modules)
    assert "tritonrl.verify.job" in graph["tritonrl.verify.funnel"]  # the graph is read
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_every_import_runs_down_the_layers():
    modules = _sources()
    assert {_room(m) for m in modules} - {""} <= set(RANKS), "a room missing from RANKS"
    assert wrong_way(modules) == []


def test_the_projects_own_imports_are_at_the_top_unless_said_lazy():
    assert unexplained_lazy(_sources()) == []


def test_the_cycle_finder_finds_a_lazy_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]


def test_the_layer_check_sees_an_upward_import(tmp_path, monkeypatch):
    pkg = tmp_path / PACKAGE
    (pkg / "runs").mkdir(parents=True)
    (pkg / "train").mkdir()
    (pkg / "runs" / "resume.py").write_text(
        "def go():\n    from tritonrl.train import sft\n", encoding="utf-8"
    )
    (pkg / "train" / "sft.py").write_text("from tritonrl.runs import resume\n", "utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    modules = _sources()
    assert wrong_way(modules) == [
        "tritonrl.runs.resume:2 -> tritonrl.train.sft (runs 3 -> train 8)",
    ]
    assert unexplained_lazy(modules) == ["tritonrl.runs.resume:2 -> tritonrl.train.sft"]
    assert _cycle(_graph(modules)) is not None


if __name__ == "__main__":
    sources = _sources()
    print("cycle:", " -> ".join(_cycle(_graph(sources)) or ["none"]))
    for finding in wrong_way(sources):
        print("wrong way:", finding)
    for finding in unexplained_lazy(sources):
        print("lazy, unexplained:", finding)
