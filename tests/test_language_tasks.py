"""The language tasks under opacus: GPT-2 (Conv1D linearized, head untied) clips exactly with ghost
clipping and with hooks; the MiniLM top layers on cached states reproduce the sentence embedding."""

from __future__ import annotations

import math

import torch

from dphpo.tasks.causal_lm import CausalLMTask, likelihood_score, small_gpt2
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
        model, trace = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.1, steps=3, sigma=1.0, seed=4, settings=s)
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad]))
        assert trace["clipped_fraction"] > 0
    torch.testing.assert_close(runs[0], runs[1], rtol=1e-4, atol=1e-5)


def test_last_block_trains_only_the_last_block_embeddings_and_head():
    task, _ = tiny_lm_task(train_layers="last_block")
    names = [n for n, p in task.prototype.named_parameters() if p.requires_grad]
    assert not any(n.startswith("transformer.h.0.") for n in names)
    assert any(n.startswith("transformer.h.1.") for n in names) and "lm_head.weight" in names
    before = {n: p.detach().clone() for n, p in task.prototype.named_parameters()}
    model, _ = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.1, steps=2, sigma=1.0, seed=0,
                        settings=FinetuneSettings(batch_size=6))
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) == (n not in names)


def test_lm_evaluation_is_perplexity_and_a_likelihood_score():
    task, _ = tiny_lm_task()
    out = task.evaluate(task.build_model(), "test")
    assert 20 < out["metric"] < 200  # near-uniform over 50 tokens
    assert 0 <= out["score_sum"] <= task.n_test
    # the score is the perplexity's bounded form: a model with lower perplexity scores higher
    trained, _ = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.5, steps=20, sigma=0.0,
                          seed=0, settings=FinetuneSettings(batch_size=12))
    better = task.evaluate(trained, "test")
    assert better["metric"] < out["metric"] and better["score_sum"] > out["score_sum"]


def test_likelihood_score_is_bounded_by_the_uniform_predictor():
    nll = torch.tensor([0.0, math.log(50) / 2, math.log(50), 3 * math.log(50), math.inf, math.nan])
    # in [0, 1]: sensitivity 1; a diverged sequence (inf or NaN loss) scores 0, never NaN in a score sum
    torch.testing.assert_close(likelihood_score(nll, 50), torch.tensor([1.0, 0.5, 0.0, 0.0, 0.0, 0.0]))


def lora_lm_task(train_layers="all", lora=None):
    from dphpo.tasks.models import LORA_TARGETS, apply_lora

    task, reference = tiny_lm_task(train_layers=train_layers)
    blocks = sorted({".".join(n.split(".")[:3]) for n, p in task.prototype.named_parameters() if p.requires_grad and n.startswith("transformer.h.")})
    prov = apply_lora(task.prototype, lora or {"rank": 2, "alpha": 4}, blocks, LORA_TARGETS["causal_lm"])
    return task, reference, prov


def test_lora_starts_as_the_pretrained_model_and_trains_only_its_adapters():
    task, reference, prov = lora_lm_task()
    assert prov["adapted_modules"] == ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]
    ids = task.t["ids_train"][:4]
    with torch.no_grad():  # B = 0: the adapted model is the pretrained one
        torch.testing.assert_close(task.prototype(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    names = [n for n, p in task.prototype.named_parameters() if p.requires_grad]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert sum(p.numel() for n, p in task.prototype.named_parameters() if n in names) == 2 * 2 * (16 + 48)
    before = {n: p.detach().clone() for n, p in task.prototype.named_parameters()}
    runs = []
    for clipping in ("ghost", "hooks"):  # opacus clips the adapters exactly with both engines
        s = FinetuneSettings(batch_size=6, clipping=clipping, clip_norm=0.05)
        model, trace = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.5, steps=3, sigma=1.0, seed=4, settings=s)
        assert trace["clipped_fraction"] > 0
        for n, p in model.named_parameters():
            assert torch.equal(p, before[n]) == (n not in names), n
        runs.append(torch.cat([p.detach().flatten() for n, p in model.named_parameters() if n in names]))
    torch.testing.assert_close(runs[0], runs[1], rtol=1e-4, atol=1e-5)


def test_lora_scope_follows_the_trained_layers_and_bad_targets_are_named():
    import pytest

    from dphpo.errors import ConfigError

    _, _, prov = lora_lm_task(train_layers="last_block", lora={"rank": 1, "targets": ["c_fc", "c_proj"]})
    assert prov["adapted_modules"] == ["transformer.h.1.attn.c_proj", "transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_proj"]
    with pytest.raises(ConfigError, match="lora.targets"):
        lora_lm_task(lora={"targets": ["query"]})


def test_lora_on_classification_top_layers_trains_adapters_and_head():
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    from dphpo.tasks.classification import SequenceClassificationTask

    torch.manual_seed(0)
    layer = BertLayer(BertConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0, attn_implementation="eager"))
    g = torch.Generator().manual_seed(0)
    t = {"h_train": torch.randn(10, 5, 8, generator=g), "mask_train": torch.ones(10, 5), "y_train": torch.randint(0, 3, (10,), generator=g)}
    t |= {"h_test": t["h_train"], "mask_test": t["mask_train"], "y_test": t["y_train"]}
    task = SequenceClassificationTask([layer], t, 3, {}, lora={"rank": 2})
    names = {n for n, p in task.prototype.named_parameters() if p.requires_grad}
    assert names == {"head.weight", "head.bias"} | {f"layers.0.attention.self.{m}.lora_{ab}.default.weight" for m in ("query", "value") for ab in "AB"}
    assert task.provenance()["trainable_parameters"] == 3 * 8 + 3 + 2 * (2 * 8 + 2 * 8)
    model, _ = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.5, steps=2, sigma=0.5, seed=0,
                        settings=FinetuneSettings(batch_size=5))
    assert not torch.equal(model.head.weight, torch.zeros_like(model.head.weight))


def test_classification_accuracy_is_over_the_whole_split_not_its_last_chunk():
    """The test split of 7 in chunks of 3 (the last holds 1): accuracy = correct / 7, in [0, 1]."""
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    from dphpo.tasks.classification import SequenceClassificationTask

    layer = BertLayer(BertConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16, attn_implementation="eager"))
    g = torch.Generator().manual_seed(0)
    t = {f"{k}_{split}": v for split in ("train", "test") for k, v in
         (("h", torch.randn(7, 5, 8, generator=g)), ("mask", torch.ones(7, 5)), ("y", torch.randint(0, 3, (7,), generator=g)))}
    task = SequenceClassificationTask([layer], t, 3, {}, eval_batch=3)
    model = task.build_model().eval()
    with torch.no_grad():
        correct = int((model(t["h_test"], t["mask_test"]).argmax(1) == t["y_test"]).sum())
    out = task.evaluate(model, "test")
    assert out["score_sum"] == correct and math.isclose(out["metric"], correct / 7)


def test_sentence_pairs_are_encoded_as_pairs():
    import numpy as np

    from dphpo.data.text import TextSplits
    from dphpo.tasks.classification import encode_hidden_states
    from dphpo.tasks.models import load_encoder

    model, tokenizer, _ = load_encoder({"name": "minilm"})
    pairs = [("is it raining", "it rains today"), ("a b", "c")]
    h, m = encode_hidden_states(model, tokenizer, pairs, 12, 6, progress=False)
    enc = tokenizer(["is it raining", "a b"], ["it rains today", "c"], truncation=True, max_length=12, padding="max_length")
    np.testing.assert_array_equal(m, np.asarray(enc["attention_mask"]))
    assert m[1].sum() == 6  # [CLS] a b [SEP] c [SEP]
    joined, _ = encode_hidden_states(model, tokenizer, ["is it raining it rains today"], 12, 6, progress=False)
    assert not np.allclose(h[0], joined[0])  # the pair's [SEP] and segments change the states
    a = TextSplits("p", pairs, [], np.array([0, 1]), np.array([], np.int64)).checksum()
    b = TextSplits("p", [("is it", "raining it rains today"), ("a b", "c")], [], np.array([0, 1]), np.array([], np.int64)).checksum()
    assert a != b


def test_exclude_leaves_out_another_studys_texts_before_subsampling():
    import pytest

    from dphpo.data.text import load_text, select
    from dphpo.errors import ConfigError

    full = load_text({"name": "tweets"})  # the whole corpus: nothing selected yet
    study = {"name": "tweets", "max_train": 300, "max_test": 50}
    proxy = {"name": "tweets", "max_train": 300, "max_test": 50, "exclude": {"max_train": 300, "max_test": 50}}
    tr, te = select(full, study)
    ptr, pte = select(full, proxy)
    assert abs(int(ptr.sum()) - 300) < 60 and abs(int(pte.sum()) - 50) < 25  # per-record subsets: about max_train
    assert not (tr & ptr).any() and not (te & pte).any()  # disjoint
    # without exclude another seed's subset overlaps
    assert (select(full, {"name": "tweets", "max_train": 300, "max_test": 50, "subsample_seed": 1})[0] & tr).any()
    # a partition is applied first, then the other study's texts are left out of it
    half = select(full, {"name": "tweets", "partition": [1, 2]})[0]
    part = select(full, {"name": "tweets", "partition": [1, 2], "exclude": {"partition": [1, 2], "max_train": 100}})[0]
    assert not (part & ~half).any() and 50 < int(half.sum() - part.sum()) < 150
    loaded = load_text(proxy)
    assert loaded.source["exclude"] == {"max_train": 300, "max_test": 50} and len(loaded.train) == int(ptr.sum())
    with pytest.raises(ConfigError, match="data.exclude: expected a data spec of the same corpus 'tweets'"):
        select(full, {"name": "tweets", "exclude": {"name": "python_docs"}})


def test_partitions_split_a_corpus_into_disjoint_parts_and_overlap_is_refused():
    import pytest

    from dphpo.data.overlap import load_texts
    from dphpo.data.text import load_text, overlapping_parts, select
    from dphpo.errors import ConfigError
    from dphpo.studies.validate import check_language_study

    full = load_text({"name": "tweets"})
    a, b = load_text({"name": "tweets", "partition": [0, 2]}), load_text({"name": "tweets", "partition": [1, 2]})
    # per-record parts (a keyed hash of text and label): every text in exactly one, each about half
    in_a, in_b = select(full, {"name": "tweets", "partition": [0, 2]}), select(full, {"name": "tweets", "partition": [1, 2]})
    for split in (0, 1):
        assert (in_a[split] ^ in_b[split]).all()
    assert a.train == [t for t, k in zip(full.train, in_a[0]) if k] and b.test == [t for t, k in zip(full.test, in_b[1]) if k]
    assert len(a.train) + len(b.train) == len(full.train) and abs(len(a.train) - len(full.train) / 2) < 500
    sub = {"name": "tweets", "partition": [0, 2], "max_train": 50, "max_test": 5}
    both = load_texts([{"name": "python_docs"}, sub])
    n_sub = len(load_text(sub).train)
    assert len(both.train) == len(load_text({"name": "python_docs"}).train) + n_sub and both.train[-n_sub:][0] in a.train
    public = [{"name": "python_docs"}, {"name": "tweets", "partition": [0, 2]}]
    assert overlapping_parts(public, {"name": "tweets", "partition": [1, 2]}) == []
    assert overlapping_parts(public, {"name": "tweets"}) == ["tweets"]
    assert overlapping_parts(public, {"name": "tweets", "partition": [0, 2]}) == ["tweets"]
    config = {"language": {"pretrain": {"lm": {"data": public}}}, "privacy": {"delta": 1e-5, "target_eps": [1]}}
    spec = {"name": "s", "task": "causal_lm", "model": {"pretrain": "lm"}, "data": {"name": "tweets", "max_train": 100}, "methods": []}
    with pytest.raises(ConfigError, match="language.studies.s.data: the public pretraining corpus of 'lm' includes 'tweets'"):
        check_language_study(config, spec)


def test_language_proxy_repeats_the_minilm_study_on_tweets_it_never_reads():
    """config/language_proxy.yaml (where the safeguard's constants for language classifiers are
    chosen) layered over the embedded config validates, and its study is MiniLM's on disjoint tweets."""
    import copy
    from pathlib import Path

    import yaml
    from snakemake.utils import update_config

    from dphpo.data.text import load_text, select
    from dphpo.studies.validate import validate_config

    repo = Path(__file__).resolve().parents[1]
    embedded = yaml.safe_load((repo / "config" / "paper_embedded.yaml").read_text())
    overlay = yaml.safe_load((repo / "config" / "language_proxy.yaml").read_text())
    config = copy.deepcopy(embedded)
    update_config(config, copy.deepcopy(overlay))
    validate_config(config, repo / "workflow" / "schemas" / "config.schema.yaml")
    (proxy,) = overlay["language"]["studies"]
    study = next(s for s in embedded["language"]["studies"] if s["name"] == "tweets_minilm_last1")
    same = ("task", "model", "training", "overrides")
    assert {k: proxy[k] for k in same} == {k: study[k] for k in same}
    assert proxy["data"]["exclude"] == {k: v for k, v in study["data"].items() if k != "name"}
    tweets = load_text({"name": "tweets"})
    (ptr, pte), (tr, te) = select(tweets, proxy["data"]), select(tweets, study["data"])
    assert abs(int(ptr.sum()) - int(tr.sum())) < 300 and not (ptr & tr).any() and not (pte & te).any()


def test_a_hub_corpus_takes_its_classes_from_the_card_never_from_the_private_labels():
    import types

    import pytest

    from dphpo.data.text import card_num_classes
    from dphpo.errors import ConfigError

    assert card_num_classes(types.SimpleNamespace(num_classes=3, names=["a", "b", "c"]), "hf:glue", "label") == 3
    with pytest.raises(ConfigError, match="label_field 'label' is not a ClassLabel"):
        card_num_classes(types.SimpleNamespace(dtype="int64"), "hf:x", "label")  # a plain integer column


def _fake_hub(monkeypatch, splits: dict[str, dict[str, list]], n_classes: int = 2) -> None:
    """A stand-in `datasets` module (no network): load_dataset returns `splits` (split: {column: values})."""
    import sys
    import types

    class Split:
        def __init__(self, cols):
            self.cols, self.column_names = cols, list(cols)
            self.info = types.SimpleNamespace(splits={})
            self.features = {"label": types.SimpleNamespace(num_classes=n_classes)}

        def __getitem__(self, key):
            return self.cols[key]

    fake = types.ModuleType("datasets")
    fake.__version__ = "fake"
    fake.load_dataset = lambda path, config=None, revision=None: {k: Split(v) for k, v in splits.items()}
    monkeypatch.setitem(sys.modules, "datasets", fake)


def test_a_hub_corpus_is_read_as_texts_with_labels_of_its_card_or_refused_naming_the_key(monkeypatch):
    import pytest

    from dphpo.data.text import load_text
    from dphpo.errors import ConfigError

    pinned = {"revision": "0" * 40}
    # a dialogue column (PersonaChat's history): its turns one per line, never the list's Python repr
    _fake_hub(monkeypatch, {"train": {"history": [["Hi!", "Hello, how are you?"], ["Fine."]]}, "test": {"history": [["Yo"]]}})
    corpus = load_text({"name": "hf:chat", "text_field": "history", **pinned})
    assert list(corpus.train) == ["Hi!\nHello, how are you?", "Fine."]
    _fake_hub(monkeypatch, {"train": {"text": [{"a": 1}]}, "test": {"text": ["x"]}})
    with pytest.raises(ConfigError, match="text_field 'text' holds dict values"):
        load_text({"name": "hf:odd", **pinned})
    # GLUE's test split: every label -1 (no answers); a label past the card's classes
    glue = {"train": {"sentence": ["good", "bad"], "label": [1, 0]}, "test": {"sentence": ["fine"], "label": [-1]}}
    _fake_hub(monkeypatch, glue)
    sst2 = {"name": "hf:glue", "config": "sst2", "text_field": "sentence", "label_field": "label", **pinned}
    with pytest.raises(ConfigError, match=r"split 'test' has labels outside 0..1 .*use another test_split"):
        load_text(sst2)
    glue["validation"] = {"sentence": ["fine"], "label": [1]}
    _fake_hub(monkeypatch, glue)
    assert load_text({**sst2, "test_split": "validation"}).y_test.tolist() == [1]
    with pytest.raises(ConfigError, match=r"data.test_split: hf:glue has no split 'dev'; its splits: train, test, validation"):
        load_text({**sst2, "test_split": "dev"})
    with pytest.raises(ConfigError, match=r"split 'train' has no column 'sentence2'"):
        load_text({**sst2, "text_field": ["sentence", "sentence2"], "test_split": "validation"})


def test_data_checksums_frame_every_part():
    """Audit: texts and arrays were hashed back to back, so moving a text from train to test, a 2/3 and a 3/2
    split of the same rows, or one question's fields spread over two, gave equal checksums."""
    import numpy as np

    from dphpo.data.squad import SquadExample
    from dphpo.data.text import TextSplits
    from dphpo.tasks.classification import hidden_content_sha256
    from dphpo.tasks.question_answering import examples_checksum

    a, b = TextSplits("t", ["alpha", "beta"], ["gamma"]), TextSplits("t", ["alpha"], ["beta", "gamma"])
    assert a.checksum() != b.checksum() and a.checksum() == TextSplits("t", ["alpha", "beta"], ["gamma"]).checksum()
    assert TextSplits("t", [("a", "b")], []).checksum() != TextSplits("t", ["a\x1fb"], []).checksum()  # a pair is a pair
    rows = np.arange(10.0).reshape(5, 2)
    assert hidden_content_sha256({"h_test": rows[:2], "h_train": rows[2:]}) != hidden_content_sha256({"h_test": rows[:3], "h_train": rows[3:]})
    one = SquadExample("1", "t", "ctx", "q?", ("a",))
    assert examples_checksum([one], []) != examples_checksum([], [one])
    assert examples_checksum([SquadExample("1", "t", "ctx", "q?", ("a", "b"))], []) != examples_checksum(
        [SquadExample("1", "t", "ctx", "q?\x1fa", ("b",))], [])
