"""The language tasks under opacus: GPT-2 (Conv1D linearized, head untied) clips exactly with ghost
clipping and with hooks; the MiniLM top layers on cached states reproduce the sentence embedding."""

from __future__ import annotations

import torch

from dphpo.tasks.causal_lm import CausalLMTask, small_gpt2
from dphpo.tasks.models import linearize_conv1d, set_trainable_gpt2
from dphpo.train.finetune import FinetuneSettings, train_dp


def tiny_lm_task(n=12, train_layers="all"):
    torch.manual_seed(0)
    model = small_gpt2(vocab_size=50, n_layer=2, n_embd=16, n_head=2, n_positions=16, eos_id=0)
    reference = model
    model = linearize_conv1d(__import__("copy").deepcopy(model))
    set_trainable_gpt2(model, train_layers)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (n, 10), generator=g)
    mask = torch.ones(n, 10)
    mask[::3, 7:] = 0  # some padded sequences
    return CausalLMTask(model, ids, mask, ids, mask, {"tiny": True}), reference


def test_linearized_gpt2_computes_the_same_function():
    task, reference = tiny_lm_task()
    ids = task.t["ids_train"][:4]
    with torch.no_grad():
        torch.testing.assert_close(task.prototype(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_ghost_and_hooks_agree_on_gpt2():
    task, _ = tiny_lm_task()
    runs = []
    for clipping in ("ghost", "hooks"):
        s = FinetuneSettings(batch_size=6, clipping=clipping, clip_norm=0.5)
        model, trace = train_dp(task.build_model(), task.example_losses, task.n_train, lr=0.1, steps=3, sigma=1.0, seed=4, settings=s)
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad]))
        assert trace["clipped_fraction"] > 0
    torch.testing.assert_close(runs[0], runs[1], rtol=1e-4, atol=1e-5)


def test_last_block_trains_only_the_last_block_embeddings_and_head():
    task, _ = tiny_lm_task(train_layers="last_block")
    names = [n for n, p in task.prototype.named_parameters() if p.requires_grad]
    assert not any(n.startswith("transformer.h.0.") for n in names)
    assert any(n.startswith("transformer.h.1.") for n in names) and "lm_head.weight" in names
    before = {n: p.detach().clone() for n, p in task.prototype.named_parameters()}
    model, _ = train_dp(task.build_model(), task.example_losses, task.n_train, lr=0.1, steps=2, sigma=1.0, seed=0,
                        settings=FinetuneSettings(batch_size=6))
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) == (n not in names)


def test_lm_evaluation_is_perplexity_and_token_accuracy():
    task, _ = tiny_lm_task()
    out = task.evaluate(task.build_model(), "test")
    assert 20 < out["metric"] < 200  # near-uniform over 50 tokens
    assert 0 <= out["score_sum"] <= task.n_test
