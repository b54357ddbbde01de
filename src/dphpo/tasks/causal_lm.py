"""Causal language modelling (perplexity): a GPT-2-family model fine-tuned with DP on private text
(Panda et al. Tables 7, 8, 20; Fig. 4).

Privacy unit: one sequence (a text, truncated to `max_len` tokens, with a leading end-of-text token so
its first token is predicted too). Per-example loss: the mean next-token negative log-likelihood
over the sequence's tokens. Metric: perplexity exp(Σ NLL / Σ tokens) over a split. Score released by
honest selection: a sequence's likelihood score 1 - min(NLL, ln V) / ln V in [0, 1], its mean token NLL
against that of the uniform predictor over the V-token vocabulary (public): the empirical loss Panda et
al. select by (§3), bounded so that one sequence moves the sum by at most 1. (Next-token accuracy, the
score before, ranked a model that predicts frequent public-corpus tokens above one with half its
perplexity on tweets: the selection must measure what the table reports.)

Models: `gpt2` from the hub at a pinned revision (paper rows), or a small GPT-2 pretrained here on
public text (`pretrain_small_lm`: a byte-level BPE vocabulary and the model trained non-privately on
the Python documentation that ships with Python; offline rows). Both go through `linearize_conv1d`
and `untie_lm_head` (dphpo.tasks.models) so opacus clips them exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from dphpo.data.overlap import check_deduplicated, drop_public_duplicates, load_texts
from dphpo.data.text import load_text
from dphpo.device import choose_device
from dphpo.errors import ConfigError
from dphpo.io import atomic_open, file_sha256
from dphpo.provenance import package_versions
from dphpo.tasks.device import OnDevice
from dphpo.tasks.models import (
    LORA_TARGETS,
    apply_lora,
    linearize_conv1d,
    model_positions,
    model_source,
    resolved_commit,
    set_trainable_gpt2,
    untie_lm_head,
)

EOS = "<|endoftext|>"


# --------------------------------------------------------------------------------------------
# tokenization


def train_bpe_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2 style) trained on `texts` (public), with one special token EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size), special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def encode_sequences(encode, eos_id: int, texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of shape (N, max_len): EOS + tokens, truncated, right-padded with EOS (mask 0)."""
    ids = torch.full((len(texts), max_len), eos_id, dtype=torch.long)
    mask = torch.zeros((len(texts), max_len), dtype=torch.float32)
    for i, text in enumerate(texts):
        seq = [eos_id] + list(encode(text))[: max_len - 1]
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1.0
    return ids, mask


def token_blocks(encode, eos_id: int, texts: list[str], block_len: int) -> torch.Tensor:
    """The texts as one EOS-separated token stream cut into blocks (pretraining)."""
    stream: list[int] = []
    for text in texts:
        stream += list(encode(text)) + [eos_id]
    n = len(stream) // block_len
    return torch.tensor(stream[: n * block_len], dtype=torch.long).view(n, block_len)


# --------------------------------------------------------------------------------------------
# the small LM pretrained on public text


def small_gpt2(vocab_size: int, n_layer: int, n_embd: int, n_head: int, n_positions: int, eos_id: int) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=int(vocab_size), n_positions=int(n_positions), n_embd=int(n_embd), n_layer=int(n_layer), n_head=int(n_head),
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eos_id, eos_token_id=eos_id, tie_word_embeddings=False,
    )
    return GPT2LMHeadModel(config)


def lm_losses(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sequence (NLL sum, correct next tokens, predicted tokens) of a batch."""
    # explicit per-example positions: GPT-2 otherwise embeds one (1, L) position row for the whole
    # batch, and opacus would see a batch of one in the position embedding's per-sample gradient
    positions = torch.arange(ids.shape[1], device=ids.device).repeat(ids.shape[0], 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, :-1]
    target, valid = ids[:, 1:], mask[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none").view_as(target)
    correct = (logits.argmax(-1) == target).float()
    return (nll * valid).sum(1), (correct * valid).sum(1), valid.sum(1)


def likelihood_score(mean_nll: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Per-sequence score in [0, 1]: 1 at zero loss, 0 at or beyond the uniform predictor's ln V (and for a
    NaN loss: a diverged model scores 0, so a sum of scores stays a number of sensitivity 1)."""
    uniform = math.log(vocab_size)
    return 1.0 - torch.nan_to_num(mean_nll, nan=uniform).clamp(0.0, uniform) / uniform


def pretrain_small_lm(spec: dict, out_path: str | Path, progress: bool = True, studies: list[dict] | None = None,
                      device: str | torch.device | None = "auto") -> dict:
    """Non-private pretraining on a public corpus (`language.pretrain.<name>`); writes the checkpoint atomically.

    `studies`: the `data` specs of the studies fine-tuned from it; public texts that occur in their test
    splits (normalized; public data) are dropped first (dphpo.data.overlap; none given: deduplicated
    against nothing, and those studies refuse the checkpoint). The private training data are never
    read here: each study drops its own training texts that occur in this corpus. The checkpoint holds
    the tokenizer (JSON), the GPT-2 config, the weights (on the CPU) and a report (public corpus specs,
    its checksum and dedup record, steps, final public test perplexity). Training runs on `device` (`auto`: the GPU when there is one);
    the model's initialization and the batches are drawn on the CPU, the same on any device."""
    seed = int(spec.get("seed", 0))
    data = load_texts(spec["data"], studies=list(studies or []))
    tok = train_bpe_tokenizer(data.train, int(spec.get("vocab_size", 2048)))
    eos_id = tok.token_to_id(EOS)
    encode = lambda t: tok.encode(t).ids  # noqa: E731
    block = int(spec.get("block_len", 64))
    device = choose_device(device)
    train_blocks = token_blocks(encode, eos_id, data.train, block).to(device)
    test_blocks = token_blocks(encode, eos_id, data.test, block).to(device)
    torch.manual_seed(seed)
    model = small_gpt2(tok.get_vocab_size(), spec.get("n_layer", 2), spec.get("n_embd", 128), spec.get("n_head", 4), spec.get("n_positions", 128), eos_id)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=float(spec.get("lr", 1e-3)), weight_decay=0.01)
    steps, batch = int(spec.get("steps", 1000)), int(spec.get("batch_size", 32))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=float(spec.get("lr", 1e-3)), total_steps=steps, pct_start=0.05)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in tqdm(range(steps), desc="pretrain LM (public)", disable=not progress, mininterval=10.0):
        ids = train_blocks[torch.randint(0, train_blocks.shape[0], (batch,), generator=gen).to(device)]
        nll, _, n = lm_losses(model, ids, torch.ones_like(ids, dtype=torch.float32))
        loss = nll.sum() / n.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        nll, correct, n = lm_losses(model, test_blocks, torch.ones_like(test_blocks, dtype=torch.float32))
    report = {
        "public_data": data.source | {"specs": list(spec["data"]), "checksum": data.checksum(), "n_train_texts": len(data.train),
                                      "n_test_texts": len(data.test)},
        "vocab_size": tok.get_vocab_size(),
        "train_tokens": int(train_blocks.numel()),
        "steps": steps,
        "batch_size": batch,
        "public_test_perplexity": float(math.exp(float(nll.sum() / n.sum()))),
        "public_test_token_accuracy": float(correct.sum() / n.sum()),
        "device": str(device),
        "settings": {k: v for k, v in spec.items() if k != "data"},
        "package_versions": package_versions(("torch", "transformers", "tokenizers")),
    }
    with atomic_open(out_path) as fh:
        torch.save({"tokenizer": tok.to_str(), "config": model.config.to_dict(), "state_dict": model.cpu().state_dict(), "report": report}, fh)
    return report


def load_lm(model_spec: dict, checkpoint: str | Path | None):
    """(model, encode, eos_id, provenance): the small pretrained LM from `checkpoint`, or a hub model."""
    if model_spec.get("pretrain"):
        if checkpoint is None:
            raise ConfigError("language.studies[].model.pretrain: the checkpoint of rule language_pretrain is needed")
        from tokenizers import Tokenizer
        from transformers import GPT2Config, GPT2LMHeadModel

        ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
        tok = Tokenizer.from_str(ckpt["tokenizer"])
        model = GPT2LMHeadModel(GPT2Config.from_dict(ckpt["config"]))
        model.load_state_dict(ckpt["state_dict"])
        encode, eos_id = (lambda t: tok.encode(t).ids), tok.token_to_id(EOS)
        prov = {"model": f"small GPT-2 pretrained on public text ({model_spec['pretrain']})", "checkpoint_sha256": file_sha256(checkpoint),
                "pretraining": ckpt["report"]}
        tied = False
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        target, prov = model_source(model_spec)
        model = AutoModelForCausalLM.from_pretrained(target, revision=model_spec.get("revision"), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        hf_tok = AutoTokenizer.from_pretrained(target, revision=model_spec.get("revision"))
        encode, eos_id = (lambda t: hf_tok(t, add_special_tokens=False)["input_ids"]), hf_tok.eos_token_id
        prov["resolved_commit"] = resolved_commit(model)
        tied = untie_lm_head(model)
    linearize_conv1d(model)
    trainable = set_trainable_gpt2(model, str(model_spec.get("train_layers", "all")))
    if model_spec.get("lora") is not None:  # adapters in the chosen blocks; nothing else trains
        blocks = sorted({".".join(n.split(".")[:3]) for n in trainable if n.startswith("transformer.h.")})
        prov["lora"] = apply_lora(model, model_spec["lora"], blocks, LORA_TARGETS["causal_lm"])
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    prov |= {"untied_lm_head": tied, "train_layers": model_spec.get("train_layers", "all"),
             "trainable_parameters": int(sum(p.numel() for p in model.parameters() if p.requires_grad)), "trainable": trainable}
    return model.eval(), encode, eos_id, prov


class CausalLMTask(OnDevice):
    """DP fine-tuning of a causal LM on private sequences (a task of the trainer protocol). `device`: where the
    model and the token tensors live (None: where the given model is; dphpo.tasks.device)."""

    metric = "perplexity"

    def __init__(self, model: nn.Module, ids_train, mask_train, ids_test, mask_test, provenance: dict, eval_batch: int = 256,
                 device: str | torch.device | None = None):
        self.prototype = model
        self.vocab_size = int(model.config.vocab_size)  # public: the likelihood score's uniform loss
        self.t = {"ids_train": ids_train, "mask_train": mask_train, "ids_test": ids_test, "mask_test": mask_test}
        self._provenance = provenance
        self.eval_batch = int(eval_batch)
        self.n_train, self.n_test = int(ids_train.shape[0]), int(ids_test.shape[0])
        self.to(next(model.parameters()).device if device is None else device)

    @classmethod
    def from_spec(cls, spec: dict, checkpoint: str | Path | None = None, device: str | torch.device | None = None) -> CausalLMTask:
        model, encode, eos_id, prov = load_lm(spec["model"], checkpoint)
        where = f"language.studies.{spec['name']}"
        data = load_text(spec["data"])
        if spec["model"].get("pretrain"):
            # its public text deduplicated against this test split; the private training texts it saw dropped, each on its own
            check_deduplicated(prov["pretraining"], spec["data"], where)
            specs = (prov["pretraining"].get("public_data") or {}).get("specs")
            if specs is None:
                raise ConfigError(f"{where}.model.pretrain: the checkpoint names no public corpus specs; rerun rule language_pretrain")
            prov["public_duplicates"] = drop_public_duplicates(data, specs)
        if data.train and isinstance(data.train[0], tuple):
            raise ConfigError(f"{where}.data.text_field: a causal LM takes one text column, not a pair")
        max_len = int(spec["model"].get("max_len", 48))
        if max_len > (positions := model_positions(model)):
            raise ConfigError(f"{where}.model.max_len: {max_len} exceeds the model's {positions} positions")
        ids_tr, m_tr = encode_sequences(encode, eos_id, data.train, max_len)
        ids_te, m_te = encode_sequences(encode, eos_id, data.test, max_len)
        prov |= {"data": data.source, "dataset_checksum": data.checksum(), "max_len": max_len}
        return cls(model, ids_tr, m_tr, ids_te, m_te, prov, device=device)

    def provenance(self) -> dict:
        return dict(self._provenance) | {"metric": self.metric, "n_train": self.n_train, "n_test": self.n_test}

    def example_losses(self, module: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        nll, _, n = lm_losses(module, self.take("ids_train", idx), self.take("mask_train", idx))
        return nll / n.clamp_min(1.0)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict:
        nll_sum = tokens = score = 0.0
        for s in range(0, self.t[f"ids_{split}"].shape[0], self.eval_batch):
            rows = slice(s, s + self.eval_batch)
            nll, _, n = lm_losses(model, self.take(f"ids_{split}", rows), self.take(f"mask_{split}", rows))
            nll_sum += float(nll.sum())
            tokens += float(n.sum())
            score += float(likelihood_score(nll / n.clamp_min(1.0), self.vocab_size).sum())
        return {"score_sum": score, "metric": float(np.exp(nll_sum / max(tokens, 1.0)))}
