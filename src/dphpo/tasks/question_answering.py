"""Extractive question answering by generation (SQuAD v2, F1): a causal LM fine-tuned with DP-SGD + LoRA
(Panda et al. Table 3's SQuAD row: OPT-13B on 1,000 SQuAD v2 training examples, the setting of
Malladi et al. 2024, "Fine-tuning language models with just forward passes", MeZO).

Prompt (MeZO's SQuAD template): "Title: {title}\\nContext: {context}\\nQuestion: {question}\\nAnswer:",
target " {answer}\\n" (the first gold answer, as MeZO). An unanswerable question's target is the empty
answer: the newline alone. The official SQuAD v2 evaluation scores an unanswerable question against
the empty string (dphpo.data.metrics.squad_scores), so an empty generation *is* the correct prediction:
no magic string ("No answer") has to be mapped back to "" before scoring, none can collide with a real
answer, and every example still teaches the model where to stop.

Privacy unit: one question (prompt + target). Per-example loss: the mean next-token negative
log-likelihood over the target tokens only (prompt tokens are context, never predicted). Only the
LoRA adapters train (Hu et al. 2022, peft; rank 8, α 16 on the attention's query and value
projections of OPT as in MeZO, `c_attn` of GPT-2): the frozen, tied embeddings are public and the
clipped norms are exact. Evaluation: greedy generation of at most `model.max_new_tokens` tokens,
cut at the first newline; metric: SQuAD F1 in percent (higher is better; exact match recorded beside
it); the score honest selection releases is an example's F1 in [0, 1] (sensitivity 1).

Data: the official `train-v2.0.json` (private training set) and `dev-v2.0.json` (test set) in the
folder `data.path`, each a per-record subset of about `max_train` / `max_test` questions
(`load_split`: a question is kept by a keyed hash of its content under the public salt
`subsample_seed`, dphpo.data.subsets, so adding a question changes the subset by at most that
question). The training share is max_train over the published 130,319 training questions; the
realized count is internal. The mechanism never counts the private set: `max_train` (or
`public_n_train`) is its declared public size (dphpo.studies.config.language_public_size).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dphpo.data import metrics
from dphpo.data.squad import FILES, PUBLISHED_QUESTIONS, SquadExample, read_squad
from dphpo.data.subsets import canonical_sha256, keep_records, subset_fraction
from dphpo.device import choose_device
from dphpo.errors import ConfigError
from dphpo.tasks.device import OnDevice
from dphpo.tasks.models import NO_DROPOUT, apply_lora, linearize_conv1d, model_positions, model_source, resolved_commit

PROMPT = "Title: {title}\nContext: {context}\nQuestion: {question}\nAnswer:"
STOP = "\n"
#: LoRA targets by architecture (config `model_type`): MeZO's q_proj, v_proj for OPT; GPT-2's fused qkv.
LORA_TARGETS = {"opt": ("q_proj", "v_proj"), "gpt2": ("c_attn",)}
#: Where each architecture keeps its decoder blocks (the LoRA scopes).
BLOCKS = {"opt": "model.decoder.layers", "gpt2": "transformer.h"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def prompt(example: SquadExample) -> str:
    return PROMPT.format(title=example.title, context=example.context, question=example.question.strip())


def target(example: SquadExample) -> str:
    """What the model is trained to generate after the prompt: " answer\\n", or "\\n" when unanswerable."""
    return (" " + example.answers[0].strip() if example.answerable else "") + STOP


@dataclass(frozen=True)
class Codec:
    """A tokenizer as the task uses it: encode (no special tokens), decode, and the special ids."""

    encode: object  # str -> list[int]
    decode: object  # list[int] -> str
    bos_id: int | None
    eos_id: int
    pad_id: int
    vocab_size: int

    @classmethod
    def from_hf(cls, tok) -> Codec:
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return cls(lambda t: tok(t, add_special_tokens=False)["input_ids"], lambda ids: tok.decode(ids, skip_special_tokens=True),
                   tok.bos_token_id, int(tok.eos_token_id), int(pad), len(tok))

    @classmethod
    def from_tokenizers(cls, tok, eos: str) -> Codec:
        """A `tokenizers.Tokenizer` (tests, small offline models): its `eos` token is BOS, EOS and padding."""
        eos_id = tok.token_to_id(eos)
        return cls(lambda t: tok.encode(t).ids, lambda ids: tok.decode(list(ids)), eos_id, eos_id, eos_id, tok.get_vocab_size())

    def stop_ids(self) -> list[int]:
        """EOS and every token whose text holds a newline: generation ends at the first of them."""
        return [self.eos_id] + [i for i in range(self.vocab_size) if i != self.eos_id and STOP in self.decode([i])]


def encode_examples(codec: Codec, examples: list[SquadExample], max_len: int) -> dict[str, torch.Tensor]:
    """(ids, attention mask, answer mask) of shape (N, max_len), right-padded: BOS + prompt + target.

    The prompt is truncated from the left when prompt and target do not fit (MeZO keeps the end: the
    question and "Answer:"); the answer mask is 1 on the target's tokens only, the tokens the loss predicts."""
    n = len(examples)
    ids = torch.full((n, max_len), codec.pad_id, dtype=torch.long)
    attn = torch.zeros((n, max_len), dtype=torch.float32)
    answer = torch.zeros((n, max_len), dtype=torch.float32)
    head = [codec.bos_id] if codec.bos_id is not None else []
    for i, ex in enumerate(examples):
        tgt = list(codec.encode(target(ex)))[: max_len - len(head) - 1]
        room = max_len - len(head) - len(tgt)
        p = list(codec.encode(prompt(ex)))
        seq = head + p[max(0, len(p) - room) :] + tgt if room > 0 else head + tgt  # a prompt that fits stays whole
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1.0
        answer[i, len(seq) - len(tgt) : len(seq)] = 1.0
    return {"ids": ids, "attn": attn, "answer": answer}


def encode_prompts(codec: Codec, examples: list[SquadExample], max_len: int) -> list[list[int]]:
    """BOS + prompt of each example (left-truncated to `max_len` tokens): what generation starts from."""
    head = [codec.bos_id] if codec.bos_id is not None else []
    return [head + list(codec.encode(prompt(ex)))[-(max_len - len(head)) :] for ex in examples]


def answer_losses(model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, answer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example (NLL summed over the answer tokens, number of answer tokens)."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    tgt, valid = ids[:, 1:], answer[:, 1:].to(logits.device)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none").view_as(tgt)
    return (nll * valid).sum(1), valid.sum(1)


@torch.no_grad()
def generate_answers(model: nn.Module, codec: Codec, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 8,
                     stop_ids: list[int] | None = None) -> list[str]:
    """Greedy generation (left-padded batches), cut at the first newline and stripped; a batch whose prompts
    leave fewer than `max_new_tokens` of the model's positions generates only as far as they go."""
    device = next(model.parameters()).device
    stop_ids = stop_ids if stop_ids is not None else codec.stop_ids()
    positions = model_positions(model)
    out: list[str] = []
    for s in range(0, len(prompts), batch_size):
        chunk = prompts[s : s + batch_size]
        width = max(len(p) for p in chunk)
        if positions is not None and width >= positions:
            raise ValueError(f"a prompt of {width} tokens leaves none of the model's {positions} positions to generate in")
        ids = torch.full((len(chunk), width), codec.pad_id, dtype=torch.long)
        attn = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, p in enumerate(chunk):
            ids[i, width - len(p) :] = torch.tensor(p)
            attn[i, width - len(p) :] = 1
        room = int(max_new_tokens) if positions is None else min(int(max_new_tokens), positions - width)
        gen = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), max_new_tokens=room,
                             do_sample=False, num_beams=1, eos_token_id=stop_ids, pad_token_id=codec.pad_id)
        for row in gen[:, width:].tolist():
            out.append(codec.decode(row).split(STOP)[0].strip())
    return out


def adapt(model: nn.Module, lora: dict | None, where: str) -> dict:
    """LoRA adapters in every decoder block of a GPT-2 or OPT model; nothing else trains."""
    if lora is None:
        raise ConfigError(f"{where}.model.lora: the question-answering task trains LoRA adapters (DP-SGD + LoRA, Malladi et al. 2024)")
    kind = getattr(model.config, "model_type", None)
    if kind not in BLOCKS:
        raise ConfigError(f"{where}.model: architecture {kind!r} not supported by the question-answering task; one of {sorted(BLOCKS)}")
    n_blocks = len(model.get_submodule(BLOCKS[kind]))
    return apply_lora(model, lora, [f"{BLOCKS[kind]}.{i}" for i in range(n_blocks)], LORA_TARGETS[kind])


def load_qa_model(model_spec: dict, where: str):
    """(model with LoRA adapters, codec, provenance) of a hub causal LM at a pinned revision, dropout off."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target_name, prov = model_source(model_spec)
    revision = model_spec.get("revision")
    config = AutoConfig.from_pretrained(target_name, revision=revision)
    for key, value in (NO_DROPOUT | {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0}).items():
        if hasattr(config, key):
            setattr(config, key, value)
    dtype = DTYPES[str(model_spec.get("dtype", "float32"))]
    model = AutoModelForCausalLM.from_pretrained(target_name, config=config, revision=revision, dtype=dtype)
    codec = Codec.from_hf(AutoTokenizer.from_pretrained(target_name, revision=revision))
    prov["resolved_commit"] = resolved_commit(model)
    prov["dtype"] = str(dtype).removeprefix("torch.")
    return model, codec, prov


def prepare(model: nn.Module, model_spec: dict, where: str, device: str | torch.device | None = "auto") -> tuple[nn.Module, dict]:
    """Linearize GPT-2's Conv1D, inject the adapters (float32 whatever the frozen weights' dtype), move to `model.device`
    if the study names one, else to `device` (the training device: a 13 B model is not first moved to another card)."""
    linearize_conv1d(model)
    prov = {"lora": adapt(model, model_spec.get("lora"), where)}
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    model.to(choose_device(model_spec.get("device") or device))
    prov["trainable_parameters"] = int(sum(p.numel() for p in model.parameters() if p.requires_grad))
    return model.eval(), prov


def data_provenance(data: dict, seed: int) -> dict:
    """A study's data block as its releases record it; `corpus` names the private dataset, so that every
    release about it composes in a published statement (`dphpo.release.Release.dataset`)."""
    return {"name": data["name"], "corpus": data["name"], "files": [FILES["train"], FILES["dev"]],
            "max_train": data.get("max_train"), "max_test": data.get("max_test"), "subsample_seed": seed}


def load_split(folder: str | Path, split: str, n_keep: int | None, seed: int, where: str,
               public_size: int | None = None) -> list[SquadExample]:
    """About `n_keep` questions of one official file (all when None), each kept by its own content
    (dphpo.data.subsets.keep_records, salt (split, seed)). The share is n_keep over `public_size`:
    by default the published size of the training file (PUBLISHED_QUESTIONS), and the count of the
    dev file (test data are public)."""
    examples = read_squad(Path(folder) / FILES[split], key=f"{where}.data.path")
    if public_size is None:
        public_size = PUBLISHED_QUESTIONS["train"] if split == "train" else len(examples)
    key = f"{where}.data.max_{'train' if split == 'train' else 'test'}"
    keep = keep_records(examples, None, subset_fraction(n_keep, public_size, key), seed=seed, purpose=split)
    return [e for e, k in zip(examples, keep) if k]


def examples_checksum(train: list[SquadExample], test: list[SquadExample]) -> str:
    """sha256 of both splits' questions, every field framed (`canonical_sha256`)."""
    return canonical_sha256(("squad", list(train), list(test)))


class QuestionAnsweringTask(OnDevice):
    """DP-SGD + LoRA fine-tuning of a causal LM on SQuAD v2 questions, scored by F1 (a task of the trainer protocol).
    `device`: where the model and the encoded training examples live (None: where the given model is)."""

    metric = "f1"

    def __init__(self, model: nn.Module, codec: Codec, train: list[SquadExample], test: list[SquadExample], provenance: dict,
                 max_len: int = 512, max_new_tokens: int = 50, eval_batch: int = 8, device: str | torch.device | None = None):
        self.prototype = model
        self.codec = codec
        self.examples = {"train": list(train), "test": list(test)}
        self.max_len, self.max_new_tokens, self.eval_batch = int(max_len), int(max_new_tokens), int(eval_batch)
        positions = model_positions(model)
        if positions is not None and self.max_len > positions:
            raise ConfigError(f"model.max_len: {self.max_len} exceeds the model's {positions} positions")
        # keys end in _train: sized by the declared public size, never the private count (memory.public_data_bytes)
        self.t = {f"{k}_train": v for k, v in encode_examples(codec, self.examples["train"], self.max_len).items()}
        # a generation prompt leaves at least one position to answer in
        prompt_len = self.max_len if positions is None else min(self.max_len, positions - 1)
        self.prompts = {k: encode_prompts(codec, v, prompt_len) for k, v in self.examples.items()}
        self._stop = codec.stop_ids()
        self._provenance = provenance
        self.n_train, self.n_test = len(train), len(test)
        self.to(next(model.parameters()).device if device is None else device)

    @classmethod
    def from_spec(cls, spec: dict, device: str | torch.device | None = None) -> QuestionAnsweringTask:
        where = f"language.studies.{spec['name']}"
        data, model_spec = spec["data"], spec["model"]
        if not data.get("path"):
            raise ConfigError(f"{where}.data.path: the folder holding the official {FILES['train']} and {FILES['dev']}")
        seed = int(data.get("subsample_seed", 0))
        train = load_split(data["path"], "train", data.get("max_train"), seed, where)
        test = load_split(data["path"], "dev", data.get("max_test"), seed, where)
        model, codec, prov = load_qa_model(model_spec, where)
        model, extra = prepare(model, model_spec, where, device)
        prov |= extra | {"data": data_provenance(data, seed), "dataset_checksum": examples_checksum(train, test)}
        try:
            return cls(model, codec, train, test, prov, max_len=int(model_spec.get("max_len", 512)),
                       max_new_tokens=int(model_spec.get("max_new_tokens", 50)), eval_batch=int(model_spec.get("eval_batch", 8)), device=device)
        except ConfigError as err:
            raise ConfigError(f"{where}.{err}") from None

    def provenance(self) -> dict:
        return dict(self._provenance) | {
            "metric": self.metric, "n_train": self.n_train, "n_test": self.n_test, "prompt": PROMPT,
            "unanswerable_target": "the empty answer (the newline alone), scored against '' as evaluate-v2.0.py does",
            "max_len": self.max_len, "max_new_tokens": self.max_new_tokens, "decoding": "greedy, cut at the first newline",
        }

    def example_losses(self, module: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        ids, attn, answer = (self.take(k, idx) for k in ("ids_train", "attn_train", "answer_train"))
        nll, n = answer_losses(module, ids, attn, answer)
        return nll / n.clamp_min(1.0)

    def predictions(self, model: nn.Module, split: str) -> dict[str, str]:
        texts = generate_answers(model, self.codec, self.prompts[split], self.max_new_tokens, self.eval_batch, self._stop)
        return {ex.id: text for ex, text in zip(self.examples[split], texts, strict=True)}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict:
        """metric: SQuAD F1 (%) over the split; exact_match (%) beside it (carried into the release as
        `test_extra`); score_sum: Σ per-question F1 in [0, 1]."""
        model.eval()
        preds = self.predictions(model, split)
        per_question = [max(metrics.f1(preds[ex.id], g) for g in metrics.gold_answers(ex.answers)) for ex in self.examples[split]]
        scores = metrics.squad_scores(preds, {ex.id: ex.answers for ex in self.examples[split]})
        return {"score_sum": float(sum(per_question)), "metric": float(scores["f1"]), "exact_match": float(scores["exact"])}
