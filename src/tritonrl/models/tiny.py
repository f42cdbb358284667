"""A tiny model built from scratch, so that the whole pipeline runs offline, on a CPU, in CI.

    tritonrl tiny-model --out runs/tiny        # or: build_tiny_model("runs/tiny")

It trains a byte-level BPE tokenizer (`tokenizers`) on the text the pipeline shows a model:
the builtin tasks and their Triton solutions, generator tasks and theirs
(`tritonrl.tasks.generator.generate_tasks`), and the prompts of `tritonrl.data.prompts`;
gives it ChatML special tokens and a chat template (with `add_generation_prompt`, and
`{% generation %}` markers around assistant turns); and initialises a small
Qwen2-architecture causal LM (about 4M parameters with the defaults of
`TinyModelConfig`). Both are saved with `save_pretrained` into one directory, which the
later stages load with `AutoTokenizer` / `AutoModelForCausalLM.from_pretrained` exactly
as they load a hub model. Takes seconds.

What it does NOT do: it does not train the model (SFT does; the weights are random), and
the model is not meant to be good: it exists to exercise the machinery honestly.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from tritonrl.config import TinyModelConfig
from tritonrl.data.prompts import build_messages
from tritonrl.tasks import load_builtin
from tritonrl.tasks.generator import generate_tasks

log = logging.getLogger(__name__)

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]
# ChatML as Qwen2.5 writes it. The assistant's content and its <|im_end|> sit inside
# {% generation %} so that TRL's assistant_only_loss can find them.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def corpus(config: TinyModelConfig) -> Iterator[str]:
    """The tokenizer's training text: tasks, solutions and prompts."""
    tasks = list(load_builtin("all").tasks)
    if config.generated_tasks:
        tasks += generate_tasks(config.generated_tasks, seed=config.seed)
    for i, task in enumerate(tasks):
        yield task.source
        if task.solution:
            yield task.solution
        if i < 8:  # the fixed prompt text (system, example, contract) a few times over
            for message in build_messages(task.source):
                yield message["content"]


def train_tokenizer(texts: Iterator[str], vocab_size: int):
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1 << 20,
    )


def init_model(tokenizer, config: TinyModelConfig):
    """A randomly initialised Qwen2 causal LM sized by `config`, seeded."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    eos, pad = tokenizer.convert_tokens_to_ids([IM_END, PAD])
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    torch.manual_seed(config.seed)
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    return model


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _clear_target(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{out} exists and is not empty; choose another --out or pass overwrite "
                "(--overwrite) to replace it"
            )
        shutil.rmtree(out)
    elif out.is_dir():
        out.rmdir()


def build_tiny_model(
    out: str | Path, config: TinyModelConfig | None = None, overwrite: bool = False
) -> Path:
    """Train the tokenizer, initialise the model, save both into `out`; returns `out`.

    Written into a temp directory beside `out` and renamed into place, so `out` is either
    absent or complete. A non-empty `out` is refused unless `overwrite`.
    """
    config = config or TinyModelConfig()
    out = Path(out).expanduser().resolve()
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        _clear_target(out, overwrite)  # raises before any work
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = train_tokenizer(corpus(config), config.vocab_size)
        model = init_model(tokenizer, config)
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        _clear_target(out, overwrite)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info(
        "tiny model: %d parameters, vocabulary %d, saved to %s",
        count_parameters(model),
        len(tokenizer),
        out,
    )
    return out
