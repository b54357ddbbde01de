"""`training.physical_batch: auto` (dphpo.train.memory): the largest chunk of a Poisson batch the device holds,
from the model's size and the device's memory. The paper's GPU studies are sized on torch's `meta` device
(their architectures from the published sizes, no download) against an 80 GB card given as a number, so
nothing here depends on this machine's memory; one test resolves `auto` on the CPU for real."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from dphpo.errors import ConfigError
from dphpo.train import memory
from dphpo.train.dpzo import DPZOSettings, DPZOTrainer
from dphpo.train.finetune import FinetuneSettings, FinetuneTrainer
from dphpo.train.memory import GB, KEY, SAFETY, Architecture, MemoryEstimate, estimate

PAPER = Path(__file__).resolve().parents[1] / "config" / "paper.yaml"
CARD = 80 * GB  # one 80 GB GPU (an H100 or A100 80GB), as the budget the estimate may fill SAFETY of
#: the fixed values config/paper.yaml's GPU studies had before `auto`: what `auto` must not fall below on 80 GB
BEFORE_AUTO = {"sst2_roberta": 64, "sst2_roberta_dpzo": 64, "personachat_gpt2": 16, "wikitext2_gpt2": 16,
               "squad_opt13b": 4}
#: GLUE SST-2's published training-set size: the classification task keeps its cached hidden states on the device
SST2_TRAIN = 67_349
# OPT-13B's published sizes (Zhang et al. 2022, Table 1; facebook/opt-13b's config.json)
OPT13B = {"num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "ffn_dim": 20480,
          "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 5120}


def paper_study(name: str) -> dict:
    studies = yaml.safe_load(PAPER.read_text())["language"]["studies"]
    return next(s for s in studies if s["name"] == name)


def settings_of(study: dict):
    return (DPZOSettings if study.get("trainer") == "dpzo" else FinetuneSettings).from_config(study["training"])


def opt13b_lora_on_meta(model_spec: dict) -> torch.nn.Module:
    """OPT-13B as the question-answering task builds it (`prepare`: LoRA adapters in fp32, frozen weights in the
    configured dtype), on `meta`: shapes and dtypes, no values, no download."""
    from transformers import OPTConfig, OPTForCausalLM

    from dphpo.tasks.question_answering import DTYPES, prepare

    config = OPTConfig(**OPT13B, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    with torch.device("meta"):
        model = OPTForCausalLM(config).to(DTYPES[model_spec["dtype"]])
    model, _ = prepare(model, model_spec | {"device": "meta"}, "language.studies.squad_opt13b")
    return model


def gpt2_small_on_meta(train_layers: str) -> torch.nn.Module:
    """GPT-2 small (124M; GPT2Config's defaults are its sizes) as the causal-LM task prepares it: untied head,
    Conv1D linearized, the configured layers trainable."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from dphpo.tasks.models import linearize_conv1d, set_trainable_gpt2, untie_lm_head

    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
        untie_lm_head(model)
        linearize_conv1d(model)
    set_trainable_gpt2(model, train_layers)
    return model


def roberta_base_top_layers_on_meta(k: int) -> torch.nn.Module:
    """RoBERTa-base's top k layers + the head (`TopLayersClassifier`, as the classification task trains them)."""
    from transformers import RobertaConfig
    from transformers.models.roberta.modeling_roberta import RobertaLayer

    from dphpo.tasks.classification import TopLayersClassifier

    config = RobertaConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    with torch.device("meta"):
        return TopLayersClassifier([RobertaLayer(config) for _ in range(k)], 768, 2)


# --------------------------------------------------------------------------------------------
# the paper's GPU studies on one 80 GB card


def test_opt13b_lora_fits_one_80gb_gpu_with_its_bf16_weights_counted():
    study = paper_study("squad_opt13b")
    spec, settings = study["model"], settings_of(study)
    # hooks: ghost clipping's second backward through bf16 frozen layers breaks the per-example bound
    assert settings.physical_batch == "auto" and settings.clipping == "hooks" and spec["dtype"] == "bfloat16"
    model = opt13b_lora_on_meta(spec)
    frozen = [p for p in model.parameters() if not p.requires_grad]
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert {p.dtype for p in frozen} == {torch.bfloat16} and {p.dtype for p in trainable} == {torch.float32}
    assert Architecture.of(model) == Architecture(layers=40, hidden=5120, heads=40, vocab=50272)

    est = estimate(model, spec["max_len"], settings, device="meta")
    weights = sum(p.numel() for p in frozen) * 2
    assert 25.5 * GB < weights < 26 * GB  # 12.85e9 bf16 parameters (the tied embedding once)
    assert est.parts["task"] >= weights and est.fixed >= weights
    assert est.parts["trial_model"] < 0.1 * GB  # a trial copies the adapters, shares the frozen weights
    # per-example gradients of LoRA's 6.6M trainable parameters only: small beside the activations
    assert est.parts["per_example_gradients"] == sum(p.numel() for p in trainable) * 4
    batch = est.largest_batch(CARD, settings.batch_size)
    assert batch >= BEFORE_AUTO["squad_opt13b"]
    assert est.fixed + batch * est.per_example <= SAFETY * CARD < est.fixed + (batch + 1) * est.per_example


@pytest.mark.parametrize("name", ["sst2_roberta", "sst2_roberta_dpzo", "personachat_gpt2", "wikitext2_gpt2"])
def test_gpt2_small_and_roberta_base_pick_at_least_their_former_physical_batch_on_80gb(name):
    study = paper_study(name)
    spec, settings = study["model"], settings_of(study)
    assert settings.physical_batch == "auto"
    if study["task"] == "classification":
        assert spec["train_layers"] == "all"
        model = roberta_base_top_layers_on_meta(12)
        states = SST2_TRAIN * spec["max_len"] * 768 * 4  # the cached hidden states entering layer 1, fp32
        est = estimate(model, spec["max_len"], settings, device="meta", data_bytes=states)
    else:
        est = estimate(gpt2_small_on_meta(spec["train_layers"]), spec["max_len"], settings, device="meta")
    batch = est.largest_batch(CARD, settings.batch_size)
    assert BEFORE_AUTO[name] <= batch <= settings.batch_size


# --------------------------------------------------------------------------------------------
# the estimate's terms


def test_hooks_pay_per_example_gradients_and_bf16_half_again():
    model = gpt2_small_on_meta("last_block")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ghost = estimate(model, 64, FinetuneSettings(clipping="ghost"), device="meta")
    fp32 = estimate(model, 64, FinetuneSettings(clipping="hooks"), device="meta")
    bf16 = estimate(model, 64, FinetuneSettings(clipping="hooks", precision="bfloat16"), device="meta")
    assert fp32.parts["per_example_gradients"] == 4 * trainable
    assert bf16.parts["per_example_gradients"] == 6 * trainable  # the bf16 grad_samples and their fp32 copies
    assert bf16.parts["activations"] * 2 == fp32.parts["activations"]  # 16-bit activations under autocast
    assert ghost.per_example < fp32.per_example
    adam = estimate(model, 64, FinetuneSettings(optimizer="adam"), device="meta")
    assert adam.parts["trainable_state"] - ghost.parts["trainable_state"] == 4 * trainable  # Adam's second moment


def test_dpzo_keeps_no_graph_and_scales_with_the_sequence():
    model = gpt2_small_on_meta("all")
    zo = estimate(model, 128, DPZOSettings(), device="meta")
    sgd = estimate(model, 128, FinetuneSettings(), device="meta")
    assert zo.parts["activations"] * (12 + memory.BACKWARD_LAYERS) == sgd.parts["activations"] * memory.ZO_LAYERS
    assert "per_example_gradients" not in zo.parts
    assert zo.parts["direction"] == 4 * sum(p.numel() for p in model.parameters())
    # audit: θ, the copy each chunk is restored from (dphpo.train.dpzo), was not counted
    assert zo.parts["theta"] == sum(p.numel() * p.element_size() for p in model.parameters())
    longer = estimate(model, 256, FinetuneSettings(), device="meta")
    assert 2 * sgd.per_example < longer.per_example < 4 * sgd.per_example  # s·h terms double, s² terms quadruple


def test_a_batch_of_one_that_does_not_fit_is_refused_with_the_key_and_the_numbers():
    est = MemoryEstimate(fixed=int(30 * GB), per_example=int(8 * GB))
    with pytest.raises(ConfigError, match=r"language.studies\[\].training.physical_batch") as err:
        est.largest_batch(40 * GB, 1000)
    assert "38.0 GB" in str(err.value) and "32.0 GB usable" in str(err.value) and "clipping: ghost" in str(err.value)
    assert "max_len" in str(err.value) and "lora" in str(err.value)
    assert est.largest_batch(80 * GB, 1000) == 4  # (64 − 30) / 8
    assert est.largest_batch(800 * GB, 20) == 20  # never above the expected batch


def test_physical_batch_is_an_int_of_at_least_one_or_auto():
    for settings_class in (FinetuneSettings, DPZOSettings):
        assert settings_class.from_config({"physical_batch": "auto"}).physical_batch == "auto"
        assert settings_class.from_config({"physical_batch": 3}).physical_batch == 3
        for bad in (0, -2, 2.5, "64", "max", True, None):
            with pytest.raises(ConfigError, match=r"language.studies\[\].training.physical_batch"):
                settings_class.from_config({"physical_batch": bad})
    assert KEY == "language.studies[].training.physical_batch"


def test_the_budget_is_the_devices_memory_a_public_fact_not_what_is_free(monkeypatch):
    import psutil

    assert memory.device_bytes("cpu") == psutil.virtual_memory().total
    with pytest.raises(ConfigError, match="meta"):
        memory.device_bytes("meta")

    class Card:
        total_memory = int(80 * GB)

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Card())
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(1 * GB), int(80 * GB)))  # busy: unused
    assert memory.device_bytes("cuda:0") == int(80 * GB)


# --------------------------------------------------------------------------------------------
# the trainers resolve `auto` once


def tiny_trainer(trainer_class, settings_class, task=None, **extra):
    from dphpo.privacy.accountant import make_accountant

    from test_finetune import TinyTask

    task = task or TinyTask(n=40)
    settings = settings_class(batch_size=8, **extra)
    return trainer_class(task, make_accountant("prv", 1e-5, sample_rate=settings.sample_rate(40)), settings, 40)


TRAINERS = [(FinetuneTrainer, FinetuneSettings), (DPZOTrainer, DPZOSettings)]


@pytest.mark.parametrize("trainer_class, settings_class", TRAINERS)
def test_auto_resolves_on_the_cpu_and_provenance_records_both_values(trainer_class, settings_class):
    trainer = tiny_trainer(trainer_class, settings_class, physical_batch="auto")
    assert isinstance(trainer.physical_batch, int) and 1 <= trainer.physical_batch <= 8  # capped at the expected batch
    prov = trainer.provenance()
    assert prov["settings"]["physical_batch"] == "auto" and prov["compute_physical_batch"] == trainer.physical_batch
    assert prov["physical_batch_estimate"]["available_gb"] > 0 and prov["physical_batch_estimate"]["safety"] == SAFETY
    fixed = tiny_trainer(trainer_class, settings_class, physical_batch=3)
    assert fixed.physical_batch == 3 and "physical_batch_estimate" not in fixed.provenance()
    assert fixed.provenance()["compute_physical_batch"] == 3 and fixed.provenance()["settings"]["physical_batch"] == 3


def test_auto_trains_what_its_resolved_int_trains(monkeypatch):
    monkeypatch.setattr(memory, "device_bytes", lambda device: 10**12)  # plenty: the expected batch, 8
    auto = tiny_trainer(FinetuneTrainer, FinetuneSettings, physical_batch="auto")
    assert auto.physical_batch == 8
    fixed = tiny_trainer(FinetuneTrainer, FinetuneSettings, physical_batch=8)
    a, _ = auto.train_one(0.1, 3, 1.0, 5, False, "auto")
    b, _ = fixed.train_one(0.1, 3, 1.0, 5, False, "fixed")
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_a_real_task_sizes_its_data_for_the_public_count_not_the_private_one(monkeypatch):
    """The estimate reads the training tensors' bytes per record × n_public: two data sets that differ in
    their private count give the same physical batch and the same recorded estimate."""
    from test_language_device import causal_lm_task

    task = causal_lm_task()
    n_public = 12
    data = memory.public_data_bytes(task, n_public)
    rows = task.t["ids_train"].shape[0]
    train = sum(t.numel() * t.element_size() for k, t in task.t.items() if k.endswith("_train"))
    assert data == sum(t.numel() * t.element_size() for k, t in task.t.items() if not k.endswith("_train")) + train // rows * n_public
    est = estimate(task.prototype, 10, FinetuneSettings(), data_bytes=data)  # a trial copies the trainable state
    usable = est.fixed + 3 * est.per_example - 1  # one byte short of room for three examples
    monkeypatch.setattr(memory, "device_bytes", lambda device: usable / SAFETY)
    batch, resolved = memory.resolve_physical_batch(task, FinetuneSettings(batch_size=8), torch.device("cpu"), n_public)
    assert memory.sequence_length(task) == 10
    assert (resolved.fixed, resolved.per_example) == (est.fixed, est.per_example)
    assert batch == 2  # one byte short of three
    task.t = {k: (t[:-3] if k.endswith("_train") else t) for k, t in task.t.items()}  # a neighbour: fewer private rows
    assert memory.resolve_physical_batch(task, FinetuneSettings(batch_size=8), torch.device("cpu"), n_public) == (batch, resolved)


def test_a_trial_shares_the_frozen_weights_and_leaves_the_prototype_unchanged():
    from test_language_device import classification_task

    task = classification_task(lora={"rank": 2})
    before = {k: v.clone() for k, v in task.prototype.state_dict().items()}
    model = task.build_model()
    frozen = {id(p) for p in task.prototype.parameters() if not p.requires_grad}
    assert frozen and all((id(p) in frozen) != p.requires_grad for p in model.parameters())
    trainer = tiny_trainer(FinetuneTrainer, FinetuneSettings, task=task, clipping="hooks", physical_batch="auto")
    trained, _ = trainer.train_one(0.5, 3, 1.0, 1, False, "trial")
    assert any(not torch.equal(p, before[k]) for k, p in trained.state_dict().items() if "lora_" in k or "head" in k)
    for key, value in task.prototype.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("train", ["finetune", "dpzo"])
def test_a_training_loop_handed_an_unresolved_auto_refuses_it(train):
    """`auto` is the trainer's to resolve from public facts; a loop called with it directly must not guess."""
    from dphpo.train.dpzo import train_dpzo
    from dphpo.train.finetune import train_dp

    from test_finetune import TinyTask

    task = TinyTask(n=40)
    fn, settings = (train_dp, FinetuneSettings(batch_size=8, physical_batch="auto")) if train == "finetune" else (
        train_dpzo, DPZOSettings(batch_size=8, physical_batch="auto"))
    with pytest.raises(ValueError, match="resolve_physical_batch"):
        fn(task.build_model(), task.example_losses, 40, n_public=40, lr=0.1, steps=1, sigma=1.0, seed=0, settings=settings)


def test_ghost_clipping_on_low_precision_frozen_weights_is_refused():
    """The second backward of ghost clipping re-rounds the clipped backprops through bf16 layers (per-example
    contributions measured up to 1.0035·C): refused before any job and at run time."""
    import copy

    from dphpo.errors import ConfigError
    from dphpo.studies.validate import check_language_study

    study = copy.deepcopy(paper_study("squad_opt13b"))
    study["training"]["clipping"] = "ghost"
    config = {"privacy": {"delta": 1e-5, "target_eps": [1]}, "language": {"studies": [study]}}
    with pytest.raises(ConfigError, match="model.dtype: bfloat16 with training.clipping: ghost is refused"):
        check_language_study(config, study)
    study["model"]["dtype"] = "float32"
    try:
        check_language_study(config, study)
    except ConfigError as err:  # anything else the minimal config lacks, never the precision refusal
        assert "clipping: ghost is refused" not in str(err)
