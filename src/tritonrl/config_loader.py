"""Reading configs: YAML files and `--section.key value` overrides into a checked `Config`.

    load_config("configs/qwen7b-1gpu.yaml", ["--sft.max_steps", "10", "--lora.r=8"])

Precedence: dataclass defaults <- the YAML file <- overrides. Each value is converted by
its dataclass field's type (bool accepts true/false/yes/no/on/off/1/0; lists accept YAML
`[a, b]` or `a,b`; `X | None` accepts null/none); an unknown section or key is a
ValueError that names it and lists the valid ones, a key that was removed because
nothing reads it (`REMOVED`) is a ValueError that says so and why, and one that moved
(`MOVED`: `rl.temperature` is `sampling.temperature`) a ValueError naming its new place;
a key set twice in one section of a file is refused with both lines named; then every
section's own checks and `tritonrl.config.check_config` (option clashes) run,
before anything starts. An error in the file names it, whatever is wrong (`cfg/x.yaml:
sft.max_steps must be int, not 'four'`); an override's is said in its own words
(`sft.max_steps must be int, not 'four'`, `override: unknown key ...`).
`split_overrides` takes the overrides out of a command line's other arguments
(`tritonrl.cli_config` does that for every command).

A config a run recorded before a key moved is not refused: `upgrade_recorded` moves its
values to their new names, and `config_from_dict`, `override_config` and `diff_configs`
read it through that, so such a run still resumes and evaluates as it was trained.

What it does NOT do: it does not write the config anywhere (the run manifest does) and it
does not look at the environment beyond `torch.cuda.is_available()` for the clash checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import yaml

from tritonrl.config import PARTIAL_TORCH_OPS, Config, check_config

# Shipped in the package (the repository's top-level configs/ links here), so a name
# resolves in any install, editable or not.
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = "tiny-cpu"
# Names a config once had that nothing reads: a file or override that still sets one is
# told so, rather than "unknown key". They come back, wired, with the stage that reads them.
REMOVED = {
    "data.kernelbook": (
        "`tritonrl prepare --source` names the data (kernelbook, builtin, families or a PATH)"
    ),
}
# Names a config once had for a field that now lives elsewhere: a file or override that
# still sets one is told the new name; a run's recorded config is moved (`upgrade_recorded`).
MOVED = {
    "rl.temperature": "sampling.temperature",
    "rl.max_completion_length": "sampling.max_new_tokens",
}
# What a config that still has a MOVED name sampled with, where it had no key for it:
# the values the code then pinned.
IMPLIED = {"sampling.top_p": 1.0, "sampling.top_k": 0}
LIST_FORM = "write a list as '[a, b]' or 'a,b'"
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def sections() -> dict[str, type]:
    """YAML section name -> its dataclass."""
    return {f.name: f.default_factory for f in fields(Config)}  # type: ignore[misc]


def coerce(value: Any, tp: Any, where: str) -> Any:
    """`value` (from YAML, or an override's text) as type `tp`, or a ValueError naming
    `where` (`section.key`), the value and the type expected."""
    args = get_args(tp)
    if type(None) in args:  # X | None
        if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none")):
            return None
        tp = next(a for a in args if a is not type(None))
    if get_origin(tp) is list:
        if isinstance(value, str):
            value = _list_text(value, where)
        if not isinstance(value, list):
            raise ValueError(f"{where} must be a list, not {value!r}; {LIST_FORM}")
        return [coerce(v, get_args(tp)[0], f"{where}[{i}]") for i, v in enumerate(value)]
    try:
        return _scalar(value, tp)
    except (TypeError, ValueError):
        name = getattr(tp, "__name__", str(tp))
        raise ValueError(f"{where} must be {name}, not {value!r}") from None


def _list_text(text: str, where: str) -> Any:
    """An override's text for a list field: YAML `[a, b]` or `a,b`; a ValueError naming
    `where` for text that is neither (`[mm`, or a mapping `{a: 1}`)."""
    stripped = text.strip()
    if not stripped.startswith(("[", "{")):
        return [part.strip() for part in stripped.split(",") if part.strip()]
    try:
        value = yaml.safe_load(stripped)
    except yaml.YAMLError:
        raise ValueError(f"{where}: {text!r} is not a YAML list; {LIST_FORM}") from None
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, not {text!r}; {LIST_FORM}")
    return value


def _scalar(value: Any, tp: type) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError
    if isinstance(value, bool):
        raise TypeError  # bool is an int in Python, not in a config
    if tp is int:
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            return int(value.strip())
        if isinstance(value, float) and value.is_integer():
            return int(value)
    if tp is float and isinstance(value, (int, float, str)):
        return float(value)  # also "1e-5", which YAML 1.1 reads as a string
    if tp is str and isinstance(value, str):
        return value
    raise TypeError


def parse_overrides(args: Sequence[str]) -> list[tuple[str, str, str]]:
    """`["--sft.max_steps", "4", "--lora.enabled=false"]` -> [(section, key, text), ...]."""
    parsed, i = [], 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--") or "." not in token:
            bare = token.lstrip("-").partition("=")[0].replace("-", "_")
            owners = [f"--{name}.{bare}" for name, cls in sections().items()
                      if bare in {f.name for f in fields(cls)}]  # fmt: skip
            hint = f"; did you mean {' or '.join(owners)}?" if owners else ""
            raise ValueError(
                f"override {token!r} is not of the form --section.key VALUE "
                f"(e.g. --sft.max_steps 10 or --lora.enabled=false){hint}"
            )
        name, sep, text = token[2:].partition("=")
        if not sep:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ValueError(f"override --{name} has no value (e.g. --{name} VALUE)")
            text, i = args[i + 1], i + 1
        section, _, key = name.partition(".")
        parsed.append((section, key, text))
        i += 1
    return parsed


def split_overrides(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """(positional arguments, overrides) from a command line's leftover `tokens`, in order:
    a token that starts with `--` is an override, with the next token as its value unless
    it holds `=` or the next one starts with `--` too (`parse_overrides` then says so)."""
    positional, overrides, i = [], [], 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and len(token) > 2:
            overrides.append(token)
            if "=" not in token and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                overrides.append(tokens[i + 1])
                i += 1
        else:
            positional.append(token)
        i += 1
    return positional, overrides


def moved_message(old: str, new: str, source: str = "") -> str:
    """The refusal of a name that moved: `SOURCE: rl.temperature is now
    sampling.temperature: write it as ...`, naming the new one in a file and on a command
    line."""
    section, _, key = new.partition(".")
    return (
        f"{source + ': ' if source else ''}{old} is now {new}: write it as "
        f"`{section}: {{{key}: VALUE}}` in a config file, or --{new} VALUE on the command line"
    )


def _check_name(section: str, key: str | None, source: str) -> None:
    for name in (section,) if key is None else (section, f"{section}.{key}"):
        if name in REMOVED:
            raise ValueError(
                f"{source}: {name} is not used by any command ({REMOVED[name]}); remove it"
            )
        if name in MOVED:
            raise ValueError(moved_message(name, MOVED[name], source))
    known = sections()
    if section not in known:
        raise ValueError(
            f"{source}: unknown section {section!r}; valid sections: {', '.join(known)}"
        )
    if key is not None:
        names = [f.name for f in fields(known[section])]
        if key not in names:
            raise ValueError(
                f"{source}: unknown key {section}.{key}; valid keys of {section}: "
                f"{', '.join(names)}"
            )


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key set twice in one mapping (YAML keeps the last
    silently, so an edit above an old line would not take)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is set twice (lines {seen[key]} and {line}): "
                    "keep one", key_node.start_mark)  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep)


def _read_yaml(path: Path) -> dict[str, dict]:
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeys) or {}  # a SafeLoader
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"config {path} cannot be read as YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config {path}: the top level must be a mapping of sections")
    for section, values in data.items():
        _check_name(str(section), None, str(path))
        if not isinstance(values, dict):
            raise ValueError(f"config {path}: section {section!r} must be a mapping of keys")
        for key in values:
            _check_name(section, str(key), str(path))
    return data


def config_path(name: str | Path | None) -> Path:
    """A config file: a path, or the name of one shipped in configs/ (`tiny-cpu`,
    `qwen7b-1gpu`)."""
    name = DEFAULT_CONFIG if name is None else name
    path = Path(name).expanduser()
    if path.is_file():
        return path
    named = CONFIG_DIR / f"{name}.yaml"
    # A name, not a path: no folder and no .yaml ending (a dot may be in the name itself,
    # as in qwen-coder-1.5b-1gpu).
    if len(path.parts) == 1 and path.suffix not in (".yaml", ".yml") and named.is_file():
        return named
    available = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ValueError(
        f"config {str(name)!r}: no such file; give a YAML path or one of: {', '.join(available)}"
    )


def upgrade_recorded(data: dict[str, dict], source: str = "config") -> dict[str, dict]:
    """`{section: {key: value}}` with every key that moved (`MOVED`) at its new name (and a
    partial policy's empty `verify.allowed_torch_ops` at `PARTIAL_TORCH_OPS`), for
    a config a run recorded before the move (a copy; `data` is not changed). A ValueError
    when the old and the new name both hold a value and they differ."""
    out = {section: dict(values) if isinstance(values, dict) else values
           for section, values in data.items()}  # fmt: skip
    for old, new in MOVED.items():
        (a, x), (b, y) = old.split("."), new.split(".")
        values = out.get(a)
        if not isinstance(values, dict) or x not in values:
            continue
        value = values.pop(x)
        target = out[b] = out.get(b) or {}  # an empty section (YAML `sampling:`) is None
        if y in target and target[y] != value:
            raise ValueError(
                f"{source}: {old} ({value!r}) and {new} ({target[y]!r}) are both set; {old} "
                f"is the old name of {new}: keep {new} alone"
            )
        target[y] = value
        for name, implied in IMPLIED.items():  # what that code pinned, at their new names
            section, _, key = name.partition(".")
            out[section] = out.get(section) or {}
            out[section].setdefault(key, implied)
    verify = out.get("verify")
    if isinstance(verify, dict) and verify.get("policy") == "partial":
        # Recorded before an empty list meant PARTIAL_TORCH_OPS: those are what its
        # prompts named, and what the verifier allows now.
        verify["allowed_torch_ops"] = verify.get("allowed_torch_ops") or list(PARTIAL_TORCH_OPS)
    return out


def config_from_dict(
    data: dict[str, dict],
    source: str = "config",
    cuda_available: bool | None = None,
    stage: str | None = None,
) -> Config:
    """A checked `Config` from `{section: {key: value}}` (YAML, or a manifest's config;
    a key that moved since a run recorded it is read at its new name: `upgrade_recorded`)."""
    data = upgrade_recorded(data, source)
    _check_names(data, source)
    try:
        return _build(data, cuda_available, stage)
    except ValueError as e:  # a type, value or clash of `source`'s: said with its name
        raise ValueError(f"{source}: {e}") from None


def _check_names(data: dict[str, dict], source: str) -> None:
    for section, values in data.items():
        _check_name(section, None, source)
        for key in values or {}:
            _check_name(section, key, source)


def _build(data: dict[str, dict], cuda_available: bool | None, stage: str | None) -> Config:
    """A checked `Config` from `{section: {key: value}}` whose names are checked; a
    ValueError naming the key (not where it came from) for a bad type, value or clash."""
    built = {}
    for section, cls in sections().items():
        types = get_type_hints(cls)
        values = {key: coerce(value, types[key], f"{section}.{key}")
                  for key, value in (data.get(section) or {}).items()}  # fmt: skip
        built[section] = cls(**values)
    config = Config(**built)
    check_config(config, cuda_available, stage)
    return config


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    cuda_available: bool | None = None,
    stage: str | None = None,
) -> Config:
    """The resolved config: dataclass defaults <- YAML file <- `--section.key value`
    overrides, converted by field type and checked (`check_config`; `stage` None checks
    every section, a command's name what it uses). `path` None is the embedded default
    (configs/tiny-cpu.yaml). `cuda_available` None asks torch."""
    file = config_path(path)
    return override_config(_read_yaml(file), overrides, str(file), cuda_available, stage)


def override_config(
    data: dict[str, dict],
    overrides: Sequence[str] = (),
    source: str = "config",
    cuda_available: bool | None = None,
    stage: str | None = None,
) -> Config:
    """A checked `Config` from `{section: {key: value}}` (a YAML file's, or the config a
    run's manifest records; `upgrade_recorded` first) with `--section.key value` overrides
    applied on top."""
    data = upgrade_recorded(data, source)
    parsed = parse_overrides(overrides)
    if not parsed:
        return config_from_dict(data, source, cuda_available, stage)
    _check_names(data, source)
    merged = {section: dict(values or {}) for section, values in data.items()}
    for section, key, text in parsed:
        _check_name(section, key, "override")
        merged.setdefault(section, {})[key] = text
    try:
        return _build(merged, cuda_available, stage)
    except ValueError as e:
        # The file's own value when the file alone fails the same way: said with its
        # name, as an unknown key of it is; an override's error keeps its own words.
        try:
            _build(data, cuda_available, stage)
        except ValueError as alone:
            if str(alone) == str(e):
                raise ValueError(f"{source}: {e}") from None
        raise


def config_to_dict(config: Config) -> dict[str, dict]:
    return asdict(config)


def diff_configs(old: dict, new: dict) -> list[str]:
    """`section.key: old -> new` for every value that differs. Removed names (`REMOVED`)
    are not differences, and moved ones are compared at their new names
    (`upgrade_recorded`): a run recorded before the change still resumes."""
    old, new = upgrade_recorded(old), upgrade_recorded(new)
    changes = []
    for section in sorted((set(old) | set(new)) - set(REMOVED)):
        a, b = old.get(section) or {}, new.get(section) or {}
        for key in sorted(set(a) | set(b)):
            if f"{section}.{key}" not in REMOVED and a.get(key) != b.get(key):
                changes.append(f"{section}.{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return changes
