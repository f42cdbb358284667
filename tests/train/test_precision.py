"""Mixed precision (`tritonrl.train.precision`) and the NaN guard (`NonFiniteGuard`):
bf16 training keeps float32 trainable weights under bf16 autocast, and a diverging run
stops naming the step, with its last good checkpoint kept and every JSON file strict.

The bf16 runs use a small Qwen2-like model stored in bf16 (tied embeddings, q/k/v bias,
rope theta 1e6, RMSNorm eps 1e-6, the tiny tokenizer's vocabulary), trained on the CPU
through the product's own trainer (`sft.trainer_args`, `_trainer_class`) with a config
whose bf16 is on, as a CUDA machine resolves it (`check_config` refuses bf16 on the CPU;
CPU autocast runs it all the same)."""

import dataclasses
import json
import math

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

SMALL_DATA = ["--data.generated_tasks", "20", "--tiny_model.generated_tasks", "50"]  # conftest's


def _strict(text: str):
    """json.loads that refuses NaN and Infinity (Python's accepts them)."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def qwen2_bf16(tmp_path_factory):
    """A Qwen2-like causal LM saved in bfloat16, with the tiny model's tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from tritonrl.config import TinyModelConfig
    from tritonrl.models.tiny import IM_END, PAD, build_tiny_model

    tiny = build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TinyModelConfig(generated_tasks=50)
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    eos, pad = tokenizer.convert_tokens_to_ids([IM_END, PAD])
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=eos, pad_token_id=pad,
    )  # fmt: skip
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("qwen2") / "model"
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _bf16_config(*overrides: str):
    """The tiny-cpu config with `overrides`, then sft.bf16 and rl.bf16 on (a GPU's)."""
    from tritonrl.config_loader import load_config

    config = load_config(None, [*SMALL_DATA, "--run.report_to", "[]", *overrides])
    return dataclasses.replace(
        config,
        sft=dataclasses.replace(config.sft, bf16=True),
        rl=dataclasses.replace(config.rl, bf16=True),
    )


def _examples(config):
    import datasets

    from tritonrl.train.sft.data import builtin_examples

    rows = [{"prompt": r["prompt"], "completion": r["completion"]}
            for r in builtin_examples(config)]  # fmt: skip
    return datasets.Dataset.from_list(rows)


def test_bf16_full_fine_tuning_updates_float32_weights_under_bf16_autocast(qwen2_bf16, tmp_path):
    """Pure bf16 (the weights loaded in bf16 and trained there) rounded away 85-90% of
    the weights' updates at lr 1e-5 (bench/bf16_probe.py); with float32 master weights
    every trained weight moves, while the matmuls still run in bf16."""
    from transformers import AutoTokenizer

    from tritonrl.train.sft import _trainer_class, load_model, trainer_args

    config = _bf16_config("--sft.max_steps", "2", "--sft.learning_rate", "1e-5",
                          "--sft.max_length", "1024", "--sft.save_steps", "100")  # fmt: skip
    model = load_model(str(qwen2_bf16), config, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # upcast at load
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    seen = []
    q_proj = model.model.layers[0].self_attn.q_proj
    q_proj.register_forward_hook(lambda m, args, out: seen.append(out.dtype))
    trainer = _trainer_class()(
        model=model,
        args=trainer_args(config, tmp_path / "checkpoints", "cpu", has_validation=False),
        train_dataset=_examples(config),
        processing_class=AutoTokenizer.from_pretrained(qwen2_bf16),
    )
    trainer.train()

    assert seen and set(seen) == {torch.bfloat16}  # the forward ran under bf16 autocast
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # and AdamW's states
    unchanged = sum(int((p.detach() == before[n]).sum()) for n, p in model.named_parameters())
    total = sum(p.numel() for p in model.parameters())
    assert unchanged / total < 0.01, f"{unchanged / total:.1%} of the weights never moved"
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)


def test_bf16_lora_keeps_the_frozen_base_in_bf16_and_the_adapters_in_float32(qwen2_bf16):
    from tritonrl.train.sft import load_model, peft_config

    config = _bf16_config("--lora.enabled", "true", "--lora.target_modules", "[q_proj,v_proj]")
    base = load_model(str(qwen2_bf16), config, "cpu")
    assert {p.dtype for p in base.parameters()} == {torch.bfloat16}  # read only: half the memory
    from peft import get_peft_model

    model = get_peft_model(base, peft_config(config))  # as SFTTrainer wraps it
    trained = {p.dtype for p in model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.bfloat16}


def test_rl_loads_a_full_policy_in_float32_under_rl_bf16(sft_run):
    """GRPO, RLOO, best-of-n and rwsft all train what `load_policy` returns."""
    from tritonrl.runs import Run
    from tritonrl.train.rl.common import load_policy

    run = Run.open(sft_run)
    assert run.has_artifact("sft", "model")  # the tiny run trains every parameter
    policy, _ = load_policy(run, _bf16_config(), "cpu")
    assert {p.dtype for p in policy.parameters()} == {torch.float32}


def test_a_diverging_run_stops_naming_the_step_and_keeps_its_last_good_checkpoint(tmp_path):
    """A learning rate of 1e12 (warmed up from 0, so step 1 changes nothing) blows the
    weights up at step 2: the eval loss is NaN. The stage fails there, before step 2 is
    saved; checkpoint-1 stays recorded and finite; every JSON file is strict JSON."""
    from safetensors.torch import load_file

    from tritonrl.config_loader import load_config
    from tritonrl.runs import Run
    from tritonrl.train.callbacks import NonFiniteError
    from tritonrl.train.sft import run_sft

    config = load_config(None, [
        *SMALL_DATA, "--run.report_to", "[]", "--sft.max_steps", "4",
        "--sft.learning_rate", "1e12", "--sft.lr_scheduler", "constant_with_warmup",
        "--sft.warmup_steps", "2", "--sft.save_steps", "1", "--sft.eval_steps", "1",
    ])  # fmt: skip
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError, match="at step 2 of 4") as raised:
        run_sft(config, run_dir)
    assert "--sft.learning_rate" in str(raised.value)
    assert "sft/checkpoints/checkpoint-1, is kept" in str(raised.value)

    manifest = _strict((run_dir / "manifest.json").read_text())
    sft = manifest["stages"]["sft"]
    assert sft["status"] == "failed" and "step 2" in sft["error"]
    assert sft["artifacts"]["checkpoint"] == "sft/checkpoints/checkpoint-1"
    checkpoints = sorted(p.name for p in (run_dir / "sft" / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-1"]  # nothing of step 2 was saved
    weights = load_file(run_dir / "sft/checkpoints/checkpoint-1/model.safetensors")
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())
    _strict((run_dir / "sft/checkpoints/checkpoint-1/trainer_state.json").read_text())

    history = _strict((run_dir / sft["artifacts"]["log_history"]).read_text())
    assert history[-1]["step"] == 2 and history[-1]["eval_loss"] == "nan"  # seen, not 0
    json.dumps(Run.open(run_dir).status_dict(), allow_nan=False)  # `tritonrl status`


def _float32_config(*overrides: str):
    from tritonrl.config_loader import load_config

    return load_config(None, [*SMALL_DATA, "--run.report_to", "[]", "--sft.max_steps", "1",
                              *overrides])  # fmt: skip


def test_tf32_is_asked_for_only_where_a_gpu_has_it(tmp_path):
    """TrainingArguments refuses `tf32=True` without an Ampere-class GPU: the CPU gets
    None (torch's setting left alone), whatever the config says."""
    from tritonrl.train.precision import tf32_arg
    from tritonrl.train.sft import trainer_args

    assert tf32_arg(True, "cpu") is None and tf32_arg(False, "cpu") is None
    config = _float32_config()
    assert config.sft.tf32 and config.rl.tf32
    assert trainer_args(config, tmp_path, "cpu", has_validation=False).tf32 is None


@pytest.mark.gpu
def test_float32_training_on_a_gpu_multiplies_on_tf32_tensor_cores(tmp_path):
    """With bf16 off a stage computes in float32; on an Ampere-or-newer GPU its products
    run as TF32 (TrainingArguments sets torch's switch), and `--sft.tf32 false` keeps
    them exact."""
    from tritonrl.train.sft import trainer_args

    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("TF32 needs compute capability 8 or newer")
    config = _float32_config()
    trainer_args(config, tmp_path / "a", "cuda", has_validation=False)
    assert torch.backends.cuda.matmul.allow_tf32
    off = _float32_config("--sft.tf32", "false")
    trainer_args(off, tmp_path / "b", "cuda", has_validation=False)
    assert not torch.backends.cuda.matmul.allow_tf32


@pytest.fixture
def matmul_precision(monkeypatch):
    """torch's float32 precision switches and VLLM_FLOAT32_MATMUL_PRECISION, put back."""
    monkeypatch.delenv("VLLM_FLOAT32_MATMUL_PRECISION", raising=False)
    yield
    torch.backends.fp32_precision = "none"
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("tf32", [True, False])
def test_a_colocated_vllm_start_leaves_the_trainers_tf32_choice(tf32, matmul_precision):
    """vLLM's worker runs in the trainer's process under TRL's colocate mode and sets
    float32 products to its own precision as it starts (`set_float32_matmul_precision`
    of VLLM_FLOAT32_MATMUL_PRECISION, "highest" by default: exact IEEE). Around building
    the trainer, vLLM is told the stage's choice and the trainer gets it back after."""
    import os

    from tritonrl.train.precision import tf32_kept

    torch.backends.fp32_precision = "tf32" if tf32 else "ieee"  # TrainingArguments' switch
    with tf32_kept(tf32):
        wanted = os.environ["VLLM_FLOAT32_MATMUL_PRECISION"]
        torch.set_float32_matmul_precision("highest")  # what vLLM's worker did by default
    assert wanted == ("high" if tf32 else "highest")
    assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")


def test_tf32_left_alone_where_the_stage_leaves_it_alone(matmul_precision):
    """On the CPU (TrainingArguments' tf32 None) neither vLLM nor torch is told anything."""
    import os

    from tritonrl.train.precision import tf32_kept

    torch.set_float32_matmul_precision("highest")  # a known start: IEEE
    with tf32_kept(None):
        torch.set_float32_matmul_precision("high")  # what a vLLM told "high" would do
    assert "VLLM_FLOAT32_MATMUL_PRECISION" not in os.environ
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # not set back to IEEE
