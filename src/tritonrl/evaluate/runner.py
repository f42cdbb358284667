"""`tritonrl eval`'s work: a model's answers to tasks, verified, written and summarized.

    tasks = eval_tasks(["builtin:level1", "gen:20:7", "run:runs/demo"], levels=[1, 2])
    model = open_model("runs/demo")            # or a model dir, an adapter dir, a .gguf,
                                               # or "openai:MODEL@http://host:8000/v1"
    summary = evaluate(model, tasks, samples=4, out_dir="evals/rl", config=config)

Models: a local HF model directory; a LoRA adapter directory (its base from
adapter_config.json); a `.gguf` file (`tritonrl.train.models`); a run directory (the
latest model its manifest names: rl's when that stage is done, else sft's, a LoRA
adapter on the run's base); `openai:MODEL@URL`, any OpenAI-compatible endpoint (the key
from $OPENAI_API_KEY), so API models are measured by the same verifier. Sampling: one
greedy answer when `samples` is 1, else `samples` answers at temperature `rl.temperature`;
at most `rl.max_completion_length` new tokens. Prompts are `tritonrl.data.prompts`'s.

Tasks: `load_tasks` sources (the builtin suite, a KernelBench checkout: every level),
`gen:N[:SEED]` (N generated tasks, seed 1 by default: not the training generator's 0),
`run:RUN` (the run's held-out tasks: prepare's validation split, or the one SFT held out).

Files in `out_dir`: `samples.jsonl` (a line per sample: task, level, sample, prompt,
completion, verdict, reward), appended as each batch is verified, and `summary.json`
(model, tasks, samples, metrics per level and overall, notes, config, versions). An
interrupted eval continues: samples already in the file are not asked again.

What it does NOT do: no multi-turn refinement; vLLM is used when installed only through
its OpenAI-compatible server (`openai:MODEL@URL`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from tritonrl.config import Config
from tritonrl.tasks import Task

log = logging.getLogger(__name__)
SAMPLES, SUMMARY = "samples.jsonl", "summary.json"
BATCH_TASKS = 8  # tasks generated and verified together


def eval_tasks(specs: list[str], levels: list[int] | None = None, limit: int | None = None):
    """The tasks `specs` name (see the module docstring), filtered by level, first `limit`."""
    from tritonrl.tasks import load_tasks
    from tritonrl.tasks.generator import generate_tasks

    tasks: list[Task] = []
    for spec in specs:
        if spec.startswith("gen:"):
            parts = spec.split(":")
            tasks += generate_tasks(int(parts[1]), seed=int(parts[2]) if len(parts) > 2 else 1)
        elif spec.startswith("run:"):
            from tritonrl.runs import Run
            from tritonrl.train.rl_data import heldout_tasks

            run = Run.open(spec[4:])
            from tritonrl.config_loader import config_from_dict

            tasks += heldout_tasks(run, config_from_dict(run.config, f"run {run.path}"))
        else:
            report = load_tasks(spec)
            if report.errors:
                log.warning("%s: %d tasks could not be loaded", spec, len(report.errors))
            tasks += report.tasks
    if levels:
        tasks = [t for t in tasks if t.level in levels]
    tasks = list({t.id: t for t in tasks}.values())[:limit]
    if not tasks:
        raise ValueError(f"no tasks in {' '.join(specs)} (levels {levels}, limit {limit})")
    return tasks


class LocalModel:
    """A transformers model on this machine (see `open_model`)."""

    def __init__(self, model, tokenizer, name: str):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"

    def answers(self, prompts: list[list[dict]], n: int, config: Config) -> list[list[str]]:
        import torch

        texts = [self.tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                 for p in prompts]  # fmt: skip
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        batch = batch.to(self.model.device)
        sampling = {"do_sample": True, "temperature": config.rl.temperature} if n > 1 else {
            "do_sample": False}  # fmt: skip
        with torch.no_grad():
            ids = self.model.generate(**batch, **sampling, num_return_sequences=n,
                                      max_new_tokens=config.rl.max_completion_length,
                                      pad_token_id=self.tokenizer.pad_token_id)  # fmt: skip
        done = self.tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1] :],
                                           skip_special_tokens=True)  # fmt: skip
        return [done[i * n : (i + 1) * n] for i in range(len(prompts))]


class ApiModel:
    """An OpenAI-compatible chat endpoint (`openai:MODEL@URL`)."""

    def __init__(self, model: str, url: str):
        from tritonrl.data.distill import ChatClient

        self.name = f"openai:{model}@{url}"
        self.client = ChatClient(url, model, api_key=os.environ.get("OPENAI_API_KEY"),
                                 rate_limit_per_s=None)  # fmt: skip

    def answers(self, prompts: list[list[dict]], n: int, config: Config) -> list[list[str]]:
        params = {"max_tokens": config.rl.max_completion_length,
                  "temperature": config.rl.temperature if n > 1 else 0.0}  # fmt: skip
        return [[self.client.chat(p, **params)["content"] for _ in range(n)] for p in prompts]


def _run_model(path: Path):
    from tritonrl.runs import Run

    run = Run.open(path)
    stage = "rl" if run.status("rl") == "done" else "sft"
    if run.status(stage) != "done":
        raise ValueError(f"run {path}: neither rl nor sft is done; there is no model to evaluate")
    if run.has_artifact(stage, "model"):
        return _local(run.artifact(stage, "model"), f"{path.name}/{stage}")
    from tritonrl.train.sft_run import relocate_adapters

    relocate_adapters(run)  # the adapter's base is found where the run now is
    return _local(run.artifact(stage, "adapter"), f"{path.name}/{stage}")


def _local(path: Path, name: str) -> LocalModel:
    from transformers import AutoTokenizer

    from tritonrl.train.models import load_causal_lm, load_tokenizer

    if (path / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(path))
        return LocalModel(model.eval(), AutoTokenizer.from_pretrained(path), name)
    return LocalModel(load_causal_lm(str(path)).eval(), load_tokenizer(str(path)), name)


def open_model(spec: str, device: str = "cpu"):
    """The model `spec` names (see the module docstring), on `device`."""
    if spec.startswith("openai:"):
        model, sep, url = spec[len("openai:") :].partition("@")
        if not (model and sep and url):
            raise ValueError(
                f"{spec!r}: write openai:MODEL@URL, e.g. openai:gpt-4o@http://h:8000/v1"
            )
        return ApiModel(model, url)
    path = Path(spec).expanduser()
    if not path.exists():
        raise ValueError(
            f"--model {spec}: no such file or directory (a model or adapter directory, a "
            ".gguf file, a run directory, or openai:MODEL@URL)"
        )
    m = _run_model(path) if (path / "manifest.json").is_file() else _local(path, path.name)
    m.model.to(device)
    return m


def _done(path: Path) -> dict[tuple[str, int], dict]:
    rows: dict[tuple[str, int], dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: asked again
            rows[(r["task"], r["sample"])] = r
    return rows


def evaluate(model, tasks: list[Task], samples: int, out_dir: str | Path, config: Config,
             progress: Callable[[int, int], None] | None = None) -> dict:  # fmt: skip
    """Every (task, sample) not yet in out_dir's samples.jsonl asked, verified, appended;
    then summary.json. `progress(done, total)` is called as samples are written."""
    from tritonrl.data.prompts import build_messages
    from tritonrl.evaluate.metrics import k_values, summarize
    from tritonrl.reward.schemes import reward_for
    from tritonrl.runs.manifest import versions
    from tritonrl.verify.pool import shared_pool

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = _done(out / SAMPLES)
    total = len(tasks) * samples
    todo = [t for t in tasks if any((t.id, i) not in done for i in range(samples))]
    verify = config.verify
    if progress:
        progress(total - len(todo) * samples, total)
    for start in range(0, len(todo), BATCH_TASKS):
        batch = todo[start : start + BATCH_TASKS]
        prompts = [build_messages(t.source, include_example=config.data.include_example,
                                  policy=verify.policy, allowed_torch_ops=verify.allowed_torch_ops)
                   for t in batch]  # fmt: skip
        answers = model.answers(prompts, samples, config)
        pairs = [(t, a) for t, texts in zip(batch, answers, strict=True) for a in texts]
        results = shared_pool(verify).verify_many(pairs, verify)
        with open(out / SAMPLES, "a", encoding="utf-8") as f:
            for i, ((task, text), r) in enumerate(zip(pairs, results, strict=True)):
                row = {"task": task.id, "level": task.level, "sample": i % samples,
                       "prompt": prompts[i // samples], "completion": text,
                       "verdict": r.to_dict(), "reward": reward_for(r, verify)}  # fmt: skip
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                done[(task.id, i % samples)] = row
        if progress:
            progress(min(total, (start + len(batch)) * samples + total - len(todo) * samples),
                     total)  # fmt: skip
    wanted = {t.id for t in tasks}
    rows = [r for (task, i), r in done.items() if task in wanted and i < samples]
    metrics = summarize(rows, k_values(samples))
    summary = {"model": model.name, "tasks": len(tasks), "samples": samples,
               "metrics": {k: metrics[k] for k in ("overall", "levels")},
               "notes": metrics["notes"], "versions": versions(),
               "config": {"verify": json.loads(json.dumps(verify.__dict__, default=str)),
                          "temperature": config.rl.temperature,
                          "max_completion_length": config.rl.max_completion_length}}  # fmt: skip
    tmp = out / f".{SUMMARY}.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(out / SUMMARY)
    return summary
