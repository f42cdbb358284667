"""The weighted fine-tuning of best-of-n and rwsft on the tiny model: the loss is TRL's
SFT loss times the weights, a weight of 0 changes nothing, a weight of 1 learns."""

import pytest

from tritonrl.config_loader import load_config
from tritonrl.data.prompts import build_messages
from tritonrl.tasks import load_builtin

pytest.importorskip("trl")
RELU = load_builtin("level1/1_ReLU").tasks[0]
GOOD = f"```python\n{RELU.solution}```"
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.abs(x)")


def _pairs(weights):
    prompt = build_messages(RELU.source, include_example=False)
    texts = [GOOD, WRONG]
    return [{"prompt": prompt, "completion": t, "weight": w}
            for t, w in zip(texts, weights, strict=True)]  # fmt: skip


@pytest.mark.slow  # loads a model
def test_the_weighted_loss_is_trls_sft_loss_times_the_weights(sft_run, tmp_path):
    from trl import SFTTrainer

    from tritonrl.train.sft import load_sft_model
    from tritonrl.train.sft.weighted import pair_dataset, trainer_args, weighted_trainer_class

    model, tokenizer = load_sft_model(sft_run)
    args = trainer_args(load_config(None, []), tmp_path, "cpu", seed=0)
    dataset = pair_dataset(_pairs([1.0, 1.0]))
    trainer = weighted_trainer_class()(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    assert batch["weight"].tolist() == [1.0, 1.0]
    assert (batch["labels"][:, :5] == -100).all()  # the prompt is not in the loss

    def loss(weights):
        import torch

        inputs = {**batch, "weight": torch.tensor(weights)}
        return trainer.compute_loss(model, inputs, num_items_in_batch=None).item()

    unweighted = {k: v for k, v in batch.items() if k != "weight"}
    plain = SFTTrainer.compute_loss(trainer, model, unweighted).item()
    assert plain > 1.0  # random weights are far from these kernels
    assert loss([1.0, 1.0]) == pytest.approx(plain, rel=1e-5)
    assert loss([2.0, 2.0]) == pytest.approx(2 * plain, rel=1e-5)
    assert loss([1.0, 0.0]) + loss([0.0, 1.0]) == pytest.approx(plain, rel=1e-5)
    assert loss([0.0, 0.0]) == 0.0


@pytest.mark.slow  # trains a model
def test_a_weight_of_0_changes_nothing_and_1_learns_the_kernel(sft_run, tmp_path):
    from tritonrl.train.sft import load_sft_model
    from tritonrl.train.sft.weighted import fine_tune

    config = load_config(None, ["--best_of_n.learning_rate", "3e-4", "--best_of_n.epochs", "4"])
    model, tokenizer = load_sft_model(sft_run)
    before = [p.detach().clone() for p in model.parameters()]
    fine_tune(model, tokenizer, _pairs([0.0, 0.0]), config, "cpu", tmp_path, seed=0)
    assert all((a == b).all() for a, b in zip(before, model.parameters(), strict=True))
    history = fine_tune(model, tokenizer, _pairs([1.0, 1.0]), config, "cpu", tmp_path, seed=0)
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 4  # 2 pairs in one batch of 2 (tiny-cpu sft), 4 epochs
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < losses[0] - 0.3, losses
