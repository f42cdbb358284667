"""What an evaluation folder holds answers of, and the check that keeps one evaluation in
one folder.

    ident = eval_identity(model.identity, samples, config)   # model + generation settings
    check_folder("evals/sft", ident, tasks)  # ValueError, one line naming both, if another's
    record(Path("evals/sft"), ident, tasks)  # evals/sft/eval.json

An evaluation is its model, its generation settings and its tasks:

* the model (`model_identity`): the path it resolved to (a run's latest model; an adapter
  with its base) and a fingerprint of the files that decide its answers (weights, config,
  tokenizer): a file up to WHOLE_BYTES is hashed whole, a larger one by its size, its
  first and last MiB and SPREAD chunks spread through it, so a multi-GB model costs a few
  MB of reading. Both must match: a model retrained in place is another model, and so is
  one at another path even with the same files (an RL stage whose rewards were all 0
  leaves rl/final byte for byte sft/final's; its evaluation is still not sft's). No
  mtimes. An adapter's `base_model_name_or_path` is left out of its config's hash
  (loading rewrites it when a run moves; the base is fingerprinted itself). An `openai:`
  model is its name and URL.
* the generation: the backend (transformers, vllm, openai), greedy (one sample a task) or
  the sampling (`sampling.temperature`, `top_p`, `top_k`), and the token limit
  (`sampling.max_new_tokens`). A record from before top_p and top_k were settings
  (temperature alone) reads as top_p 1 and top_k off, what was sampled then
  (`generation_of`), so its folder still goes on and compares; and the turns of a
  multi-turn evaluation (`turns`, written only when more than 1: a record without it is
  of one turn, so an evaluation of 3 turns never counts as one of 1);
* the tasks: each id with a hash of its source. More tasks or samples may be added to a
  folder; a task whose source changed under the same id may not.

The record is OUT/eval.json, written before the first answer. A folder that holds answers
but no eval.json (an older tritonrl's) is refused too: nothing says whose they are.

What it does NOT do: it does not see a change in a large weight file that spares every
sampled chunk (a fine-tune changes them all), nor a new revision of a hub model named as
an adapter's base (a hub id is its name).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tritonrl.config import Config, describe_sampling

IDENTITY = "eval.json"
WHOLE_BYTES = 8 << 20  # files up to this size are hashed whole
EDGE_BYTES, CHUNK_BYTES, SPREAD = 1 << 20, 64 << 10, 16  # a larger one: edges + SPREAD chunks
MODEL_FILES = ("*.safetensors", "*.safetensors.index.json", "*.gguf", "pytorch_model*.bin",
               "adapter_model.bin", "config.json", "adapter_config.json", "tokenizer*",
               "vocab*", "merges.txt", "special_tokens_map.json", "added_tokens.json",
               "chat_template*")  # fmt: skip


def _file_digest(path: Path, h) -> None:
    size = path.stat().st_size
    h.update(f"{path.name}\0{size}\0".encode())
    if path.name == "adapter_config.json":  # its base is hashed on its own
        config = json.loads(path.read_text())
        config.pop("base_model_name_or_path", None)
        h.update(json.dumps(config, sort_keys=True).encode())
        return
    with open(path, "rb") as f:
        if size <= WHOLE_BYTES:
            h.update(f.read())
            return
        step = (size - CHUNK_BYTES) // (SPREAD + 1)
        spots = [(0, EDGE_BYTES), (size - EDGE_BYTES, EDGE_BYTES)]
        spots += [(step * (i + 1), CHUNK_BYTES) for i in range(SPREAD)]
        for offset, length in spots:
            f.seek(offset)
            h.update(f.read(length))


def fingerprint(parts: list[Path | str]) -> str:
    """A short hex digest of the model files in `parts` (directories, files, or names
    such as a hub id, hashed as they are)."""
    h = hashlib.sha256()
    unique = {str(p.resolve()) if isinstance(p, Path) else p: p for p in parts}
    for part in unique.values():  # a run's tokenizer is often its model's folder
        if isinstance(part, str) or not part.exists():
            h.update(f"name\0{part}\0".encode())
            continue
        files = [part] if part.is_file() else sorted(
            {f for pattern in MODEL_FILES for f in part.glob(pattern) if f.is_file()})  # fmt: skip
        for f in files:
            _file_digest(f, h)
    return h.hexdigest()[:16]


def model_identity(name: str, parts: list[Path | str], backend: str) -> dict:
    """A local model: its name, its resolved path (the first of `parts`), its files'
    fingerprint and the backend that generates."""
    main = parts[0]
    path = str(Path(main).resolve()) if isinstance(main, Path) else main
    return {"name": name, "path": path, "fingerprint": fingerprint(parts), "backend": backend}


def eval_identity(model: dict, samples: int, config: Config, turns: int = 1) -> dict:
    """The model's identity with the generation settings of `samples` answers a task,
    each a conversation of up to `turns` answers (recorded only when more than 1)."""
    greedy, sampling = samples == 1, config.sampling
    generation = {
        "backend": model.get("backend"), "greedy": greedy,
        "temperature": None if greedy else sampling.temperature,
        "top_p": None if greedy else sampling.top_p,
        "top_k": None if greedy else sampling.top_k,
        "max_tokens": sampling.max_new_tokens}  # fmt: skip
    if turns > 1:
        generation["turns"] = turns
    return {"model": model, "generation": generation}


def generation_of(record: dict | None) -> dict:
    """A recorded `generation` (eval.json, summary.json) with every setting named: one
    written before top_p and top_k were settings sampled with top_p 1 and top_k off, and
    one without turns had one turn."""
    g = dict(record or {})
    if g:
        g.setdefault("turns", 1)
    if "temperature" in g and not g.get("greedy"):
        g.setdefault("top_p", 1.0)
        g.setdefault("top_k", 0)
    elif "temperature" in g:
        g.setdefault("top_p", None)
        g.setdefault("top_k", None)
    return g


def sampling_text(record: dict | None) -> str | None:
    """A recorded generation's sampling in words (`greedy`, `temperature 0.8`, `temperature
    0.8, top_p 0.95`); None when nothing was recorded."""
    g = generation_of(record)
    if not g:
        return None
    if g.get("greedy"):
        return "greedy"
    return describe_sampling(g.get("temperature"), g.get("top_p"), g.get("top_k"))


def token_limit(summary: dict) -> int | None:
    """The new-token limit a summary.json's answers had: its generation's `max_tokens`,
    else (an evaluation from before eval.json) its config's `max_completion_length`."""
    limit = (summary.get("generation") or {}).get("max_tokens")
    return (
        limit if limit is not None else (summary.get("config") or {}).get("max_completion_length")
    )


def shown(path: str | None) -> str:
    """A model's path as a reader knows it: relative to here when under here."""
    if not path or not os.path.isabs(path):
        return path or "?"
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def describe(ident: dict) -> str:
    """`runs/a/sft/final (files 3f2a19c0e1d2a4b5; transformers, greedy, 64 tokens)`."""
    m, g = ident["model"], ident["generation"]
    what = shown(m.get("path")) if m.get("path") else m.get("name")
    files = f"files {m['fingerprint']}; " if m.get("fingerprint") else ""
    sampling = sampling_text(g)
    turns = f", {g['turns']} turns" if g.get("turns", 1) > 1 else ""
    return f"{what} ({files}{g.get('backend')}, {sampling}, {g.get('max_tokens')} tokens{turns})"


def task_hashes(tasks) -> dict[str, str]:
    return {t.id: hashlib.sha256(t.source.encode()).hexdigest()[:16] for t in tasks}


def _read(out: Path) -> dict | None:
    path = out / IDENTITY
    return json.loads(path.read_text()) if path.is_file() else None


def model_key(model: dict) -> tuple:
    """What tells two models apart: path and files, or an API model's name and URL."""
    if model.get("fingerprint"):
        return model.get("path"), model["fingerprint"]
    return (model.get("name"),)


def check_folder(out_dir: str | Path, ident: dict, tasks) -> None:
    """Nothing when `out_dir` is empty or holds this evaluation (the same model path and
    files, generation settings, no task changed); else a ValueError, one line naming both."""
    out = Path(out_dir)
    old = _read(out)
    if old is None:
        if (out / "samples.jsonl").is_file() or (out / "summary.json").is_file():
            raise ValueError(
                f"{out} holds an evaluation that does not record its model's files or "
                f"settings (an older tritonrl wrote it), so this one of {describe(ident)} "
                "cannot go on in it: give another --out"
            )
        return
    a, b = old["model"], ident["model"]
    same = generation_of(old["generation"]) == generation_of(ident["generation"])
    if model_key(a) != model_key(b) or not same:
        also = ""
        if a.get("path") and a.get("path") == b.get("path") and a != b:
            also = " (its files have changed since)"
        elif a.get("fingerprint") and a.get("fingerprint") == b.get("fingerprint") and a != b:
            also = " (the same files at another path)"
        raise ValueError(
            f"{out} holds an evaluation of {describe(old)}; this one is of "
            f"{describe(ident)}{also}: give another --out, never one folder for both"
        )
    recorded = old.get("tasks", {})
    for task_id, digest in task_hashes(tasks).items():
        if recorded.get(task_id, digest) != digest:
            raise ValueError(
                f"{out} holds answers to another version of task {task_id} (its source has "
                "changed since): give another --out"
            )


def record(out: Path, ident: dict, tasks) -> None:
    """Write (or extend with new tasks) OUT/eval.json."""
    old = _read(out) or {}
    data = {**ident, "tasks": {**old.get("tasks", {}), **task_hashes(tasks)}}
    tmp = out / f".{IDENTITY}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(out / IDENTITY)
