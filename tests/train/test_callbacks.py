"""Shared trainer helpers (`tritonrl.train.callbacks`): a tied output embedding is saved
once, so a checkpoint load that lacks its key is missing nothing."""

import pytest

torch = pytest.importorskip("torch")


def _qwen2(tied: bool):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         tie_word_embeddings=tied)  # fmt: skip
    return Qwen2ForCausalLM(config)


def test_a_tied_output_embedding_is_no_missing_key():
    from tritonrl.train.callbacks import untied_missing_keys

    tied = _qwen2(tied=True)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert untied_missing_keys(tied, ["lm_head.weight"]) == []
    # both gone: nothing loaded the shared tensor, so both are reported
    both = ["lm_head.weight", "model.embed_tokens.weight"]
    assert untied_missing_keys(tied, both) == both
    assert untied_missing_keys(tied, ["model.norm.weight"]) == ["model.norm.weight"]
    apart = _qwen2(tied=False)
    assert untied_missing_keys(apart, ["lm_head.weight"]) == ["lm_head.weight"]
