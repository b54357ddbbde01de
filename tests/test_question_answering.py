"""The SQuAD v2 question-answering task (Panda et al. Table 3's SQuAD row) on a tiny random GPT-2 with a
BPE tokenizer trained here: MeZO's prompt, the loss on the answer tokens only, the empty answer for an
unanswerable question, DP-SGD + LoRA through the fine-tuning trainer, greedy generation and F1 / EM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dphpo.data.squad import read_squad
from dphpo.errors import ConfigError
from dphpo.privacy.accountant import make_accountant
from dphpo.tasks.causal_lm import EOS, small_gpt2, train_bpe_tokenizer
from dphpo.tasks.question_answering import (
    Codec,
    QuestionAnsweringTask,
    answer_losses,
    encode_examples,
    load_split,
    prepare,
    prompt,
    target,
)
from dphpo.train.finetune import FinetuneSettings, FinetuneTrainer
from dphpo.train.protocol import best_index, higher_is_better

ARTICLES = [
    ("Normans", "The Normans lived in Normandy, a region in France. Their leader was Rollo.",
     [("In what country is Normandy?", ["France"]), ("Who was the leader?", ["Rollo"]), ("Who ate the moon?", [])]),
    ("Cats", "A cat is a small animal. Cats sleep for sixteen hours a day.",
     [("How long do cats sleep?", ["sixteen hours", "sixteen hours a day"]), ("What color is the sky of cats?", [])]),
]


def write_fixture(folder):
    """A 5-question SQuAD v2 file (3 answerable, 2 unanswerable), written as train and dev."""
    data = []
    for title, context, qas in ARTICLES:
        items = [{"id": f"{title}{j}", "question": q, "is_impossible": not answers,
                  "answers": [{"text": a, "answer_start": context.find(a)} for a in answers]} for j, (q, answers) in enumerate(qas)]
        data.append({"title": title, "paragraphs": [{"context": context, "qas": items}]})
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        (folder / name).write_text(json.dumps({"version": "v2.0", "data": data}))
    return folder


@pytest.fixture
def squad(tmp_path):
    return write_fixture(tmp_path)


def tiny_task(folder, max_len=160, lora=None):
    train = load_split(folder, "train", None, 0, "test")
    test = load_split(folder, "dev", None, 0, "test")
    texts = [prompt(e) + target(e) for e in train] * 4
    tok = train_bpe_tokenizer(texts, 320)
    codec = Codec.from_tokenizers(tok, EOS)
    torch.manual_seed(0)
    model = small_gpt2(tok.get_vocab_size(), n_layer=2, n_embd=16, n_head=2, n_positions=max_len, eos_id=codec.eos_id)
    model, prov = prepare(model, {"lora": lora or {"rank": 2, "alpha": 4}, "device": "cpu"}, "language.studies.squad_test")
    return QuestionAnsweringTask(model, codec, train, test, prov, max_len=max_len, max_new_tokens=6, eval_batch=2)


def test_prompt_is_mezo_template_and_unanswerable_target_is_the_empty_answer(squad):
    ex = read_squad(squad / "train-v2.0.json")
    assert prompt(ex[0]) == ("Title: Normans\nContext: The Normans lived in Normandy, a region in France. Their leader was Rollo.\n"
                             "Question: In what country is Normandy?\nAnswer:")
    assert target(ex[0]) == " France\n"
    assert not ex[2].answerable and target(ex[2]) == "\n"
    assert target(ex[3]) == " sixteen hours\n"  # the first gold answer


def test_loss_covers_the_answer_tokens_only(squad):
    task = tiny_task(squad)
    codec, t = task.codec, {k.removesuffix("_train"): v for k, v in task.t.items()}
    for i, ex in enumerate(task.examples["train"]):
        n_target = len(codec.encode(target(ex)))
        ans = t["answer"][i].nonzero().flatten().tolist()
        assert len(ans) == n_target and t["attn"][i, ans].eq(1).all()
        assert codec.decode(t["ids"][i, ans].tolist()) == target(ex)  # exactly the target's tokens
        last = int(t["attn"][i].sum())
        assert ans[-1] == last - 1  # the target ends the sequence; padding is neither attended nor predicted
        assert codec.decode(t["ids"][i, 1 : ans[0]].tolist()) == prompt(ex)
    # changing a prompt token's *target* (the logits) does not move the loss: only answer positions count
    model = task.build_model()
    ids, attn, answer = t["ids"][:1], t["attn"][:1], t["answer"][:1]
    nll, n = answer_losses(model, ids, attn, answer)
    assert int(n) == int(answer[0, 1:].sum())
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[0, :-1]
    pos = answer[0, 1:].nonzero().flatten()
    manual = torch.nn.functional.cross_entropy(logits[pos], ids[0, 1:][pos], reduction="sum")
    torch.testing.assert_close(nll[0], manual, rtol=1e-5, atol=1e-5)


def test_long_prompts_are_truncated_from_the_left_keeping_the_target(squad):
    task = tiny_task(squad, max_len=24)
    for i, ex in enumerate(task.examples["train"]):
        ans = task.t["answer_train"][i].nonzero().flatten().tolist()
        assert task.codec.decode(task.t["ids_train"][i, ans].tolist()) == target(ex)
        assert task.codec.decode(task.t["ids_train"][i, 1 : ans[0]].tolist()).endswith("Answer:")


def test_a_prompt_that_fits_is_kept_whole(squad):
    """With room for prompt and target the whole prompt is trained on, also when it fills more than half the
    room (a negative slice start kept only its last room − len(prompt) tokens: title and context lost)."""
    codec = tiny_task(squad).codec
    need = max(1 + len(codec.encode(prompt(e))) + len(codec.encode(target(e))) for e in load_split(squad, "train", None, 0, "t"))
    task = tiny_task(squad, max_len=need)
    for i, ex in enumerate(task.examples["train"]):
        ans = task.t["answer_train"][i].nonzero().flatten().tolist()
        assert task.codec.decode(task.t["ids_train"][i, 1 : ans[0]].tolist()) == prompt(ex)


def test_generation_fits_the_models_positions(squad):
    """Prompts as long as the model's positions leave room to answer (generation indexed past them and
    crashed after training), and a max_len beyond them is refused, naming the key."""
    task = tiny_task(squad, max_len=24)  # a 24-position model: every prompt is cut to 24 tokens for training
    texts = task.predictions(task.build_model(), "test")
    assert set(texts) == {e.id for e in task.examples["test"]}
    with pytest.raises(ConfigError, match="model.max_len: 40 exceeds the model's 24 positions"):
        QuestionAnsweringTask(task.prototype, task.codec, task.examples["train"], task.examples["test"], {}, max_len=40)


def test_dp_sgd_lora_end_to_end_gives_f1_and_exact_match(squad):
    task = tiny_task(squad)
    trainable = [n for n, p in task.prototype.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    settings = FinetuneSettings(batch_size=4, clip_norm=1.0, clipping="ghost", physical_batch=2)
    acc = make_accountant("prv", 1e-3, sample_rate=settings.sample_rate(5), eps_error=0.01)
    trainer = FinetuneTrainer(task, acc, settings, n_public=5)
    before = {n: p.detach().clone() for n, p in task.prototype.named_parameters()}
    out = trainer.run_trials([0.5, 0.1], [2, 2], [1.0, 1.0], [0, 1], progress=False)
    assert trainer.metric == "f1" and higher_is_better("f1")
    for h in range(2):
        assert 0.0 <= out.test_metric[h] <= 100.0 and 0.0 <= out.train_metric[h] <= 100.0
        assert 0.0 <= out.train_score_sums[h] <= task.n_train
        assert set(out.models[h]) == set(trainable)  # the released model: the adapters
        assert any(not torch.equal(out.models[h][n], before[n]) for n in trainable)
    ev = task.evaluate(task.build_model(), "test")
    assert 0.0 <= ev["exact_match"] <= ev["metric"] + 1e-9 <= 100.0 + 1e-9
    assert best_index("f1", [10.0, 30.0]) == 1
    # exact match is carried beside F1 into the released record (issue 31), and only where a task reports it
    from dphpo.hpo.common import result_metrics

    assert [set(e) for e in out.test_extra] == [{"exact_match"}] * 2
    fields = result_metrics(trainer, out, 1)
    assert fields["test_extra"] == out.test_extra[1] and fields["test_metric"] == out.test_metric[1]
    out.test_extra = None
    assert "test_extra" not in result_metrics(trainer, out, 1)


def test_empty_prediction_scores_unanswerable_questions(squad, monkeypatch):
    task = tiny_task(squad)
    monkeypatch.setattr(task, "predictions", lambda model, split: {
        "Normans0": "France", "Normans1": "Rollo", "Normans2": "", "Cats0": "sixteen hours a day", "Cats1": "blue"})
    ev = task.evaluate(task.build_model(), "test")
    assert ev["metric"] == pytest.approx(80.0) and ev["exact_match"] == pytest.approx(80.0)
    assert ev["score_sum"] == pytest.approx(4.0)


def test_generation_stops_at_the_newline(squad):
    task = tiny_task(squad)
    texts = task.predictions(task.build_model(), "test")
    assert set(texts) == {e.id for e in task.examples["test"]}
    assert all("\n" not in t for t in texts.values())


def test_the_task_needs_lora_and_a_data_folder(squad):
    model = small_gpt2(300, 1, 8, 2, 32, 0)
    with pytest.raises(ConfigError, match="model.lora"):
        prepare(model, {"device": "cpu"}, "language.studies.x")
    with pytest.raises(ConfigError, match="data.path"):
        QuestionAnsweringTask.from_spec({"name": "x", "model": {}, "data": {"name": "squad_v2"}})


def test_encode_handles_a_tokenizer_without_bos(squad):
    train = load_split(squad, "train", None, 0, "t")[:2]  # two questions of the public fixture
    codec = Codec(lambda s: [ord(c) % 50 + 1 for c in s], lambda ids: "", None, 0, 0, 51)
    t = encode_examples(codec, train, 300)
    assert t["ids"].shape == (2, 300) and int(t["attn"][0].sum()) == len(prompt(train[0])) + len(target(train[0]))


# --------------------------------------------------------------------------------------------
# Table 3's SQuAD row: plan and builder (torch-free), and the paper config


SQUAD_STUDY = {"name": "squad_opt", "paper_ref": "SQuAD", "task": "question_answering",
               "model": {"name": "facebook/opt-13b", "revision": "main", "lora": {"rank": 8}},
               "data": {"name": "squad_v2", "path": "data/squad_v2", "max_train": 1000},
               "methods": ["linear_scaling", "random_search", "grid_oracle"], "overrides": {"privacy": {"target_eps": [1]}}}


def _paper_config(study=SQUAD_STUDY) -> dict:
    return {"studies": [{"dataset": "cifar10", "extractor": "vit"}], "extractors": {"vit": {"kind": "timm"}},
            "privacy": {"target_eps": [1], "delta": 1e-5}, "seeds": [0, 1],
            "language": {"studies": [study]},
            "paper": {"table3": [{"dataset": "cifar10", "extractor": "vit"}, {"language": study["name"]}]}}


def _f1_record(method: str, f1: float) -> dict:
    return {"method": method, "metric": "f1", "test_metric": f1, "test_accuracy": None, "total_eps": 0.99, "total_delta": 5e-4, "target": {"eps": 1.0},
            "private": True, "selection": {"rule": "noisy_train_accuracy", "private": method != "grid_oracle"},
            "privacy": {"total": {"accountant": "prv"}}, "released": {"r": 1.0}, "trials": [{}, {}]}


def test_table3_plans_and_builds_the_squad_row_from_language_results():
    from dphpo.report import paper, plan

    cfg = _paper_config()
    p = paper.Paper(cfg, [("cifar10", "vit", "random_search"), ("cifar10", "vit", "grid_oracle")])
    tp = plan.PLANS["table3"](p)
    row = tp.rows[1]
    assert row.key["_language"] == "squad_opt" and row.key["extractor"] == "facebook/opt-13b + LoRA"
    files = row.sources["ours"].files
    assert len(files) == 2 and all("/squad_opt/linear_scaling/" in f and f.endswith("result.json") for f in files)
    assert all(f in tp.inputs() for f in files + row.sources["random"].files + row.sources["oracle"].files)
    values = {"random": ("random_search", [50.0, 48.0]), "oracle": ("grid_oracle", [82.0, 84.0]), "ours": ("linear_scaling", [78.0, 80.0])}
    by_file = {f: _f1_record(m, v) for k, (m, vs) in values.items() for f, v in zip(row.sources[k].files, vs)}

    class Fake(paper.Results):
        def __init__(self):
            super().__init__()
            self._cache = by_file

        def many(self, src):
            return [self._cache[f] for f in src.files if f in self._cache] if src.ok else []

    table = paper.BUILDERS["table3"](p, tp, Fake())
    squad = table.rows[1]
    assert squad["metric"] == "F1" and squad["ours (%)"].startswith("79.00") and squad["oracle (%)"].startswith("83.00")
    assert squad["RERR (%)"] == pytest.approx(100 * (79 - 49) / (83 - 49), abs=0.01)
    assert squad["Panda et al. R / O / ours / RERR"] == "49.33 / 82.43 / 78.08 / 86.85"
    assert not any(c.startswith("_") for c in table.columns)
    # the δ its records state (1/(2N) of the study's 1,000 questions), not privacy.delta's 1e-05
    assert "at target ε = 1 (δ = 0.0005)" in table.caption
    # the paper's numbers are at ε = 1: beside rows at another ε they would read as a comparison
    cfg["paper"]["eps"] = 2
    p2 = paper.Paper(cfg, [("cifar10", "vit", "random_search"), ("cifar10", "vit", "grid_oracle")])
    table2 = paper.BUILDERS["table3"](p2, plan.PLANS["table3"](p2), Fake())
    assert [r["Panda et al. R / O / ours / RERR"] for r in table2.rows] == [None, None]


def test_table3_squad_row_says_what_the_config_lacks():
    from dphpo.report import paper, plan

    study = dict(SQUAD_STUDY, methods=["linear_scaling"], overrides={"privacy": {"target_eps": [2]}})
    tp = plan.PLANS["table3"](paper.Paper(_paper_config(study), []))
    needs = tp.rows[1].needs
    assert any("language.studies.squad_opt.methods: add random_search" in n for n in needs)
    assert any("overrides.privacy.target_eps: add 1" in n for n in needs)


def test_paper_yaml_has_the_squad_study_in_table3():
    import yaml

    from dphpo.studies.config import language_public_size

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "paper.yaml").read_text())
    study = next(s for s in cfg["language"]["studies"] if s["task"] == "question_answering")
    assert {"language": study["name"]} in cfg["paper"]["table3"] and study["paper_ref"] == "SQuAD"
    assert study["model"]["name"] == "facebook/opt-13b" and study["model"]["lora"]["rank"] == 8
    assert language_public_size(study) == study["data"]["max_train"] == 1000  # declared, never counted
    assert set(study["methods"]) >= {"linear_scaling", "random_search", "grid_oracle"}


def test_the_memory_estimate_sizes_the_questions_by_the_public_count_not_the_private_one(squad):
    """The encoded training questions are training tensors (keys ending in _train): the released memory
    estimate multiplies their bytes per record by the declared public size, so a neighbour with one
    question fewer gives the same bytes (before, the realized count showed through to about ±6 records)."""
    from dphpo.train.memory import public_data_bytes

    task = tiny_task(squad)
    assert set(task.t) == {"ids_train", "attn_train", "answer_train"}
    before = public_data_bytes(task, 1000)
    task.t = {k: t[:-1] for k, t in task.t.items()}
    assert public_data_bytes(task, 1000) == before
