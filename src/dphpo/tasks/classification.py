"""Sequence classification (accuracy): fine-tune the top k transformer layers of a pretrained encoder
plus a linear head (Panda et al. Table 6 with k = all layers; Table 20 style with k < all).

The model is: frozen bottom (embeddings and the first L − k layers) → top k layers (trainable) →
mean pooling over the attention mask (as the sentence-transformers MiniLM) → linear head (zero init,
with bias). The frozen bottom does not depend on the trial, so for k < L its output — the hidden
states entering layer L − k + 1 — is computed once and cached in HDF5 (`write_hidden_cache`); every
trial then runs only the top k layers. Privacy unit: one text; score: 1{correct}.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from dphpo.data.metrics import majority_label_scores
from dphpo.data.subsets import canonical_sha256
from dphpo.data.text import load_text
from dphpo.device import choose_device
from dphpo.errors import ConfigError, FeatureCacheError
from dphpo.io import atomic_path
from dphpo.provenance import package_versions
from dphpo.tasks.device import OnDevice
from dphpo.tasks.models import LORA_TARGETS, apply_lora, load_encoder


class TopLayersClassifier(nn.Module):
    """Top transformer layers + masked mean pooling + linear head (zero init)."""

    def __init__(self, layers: list[nn.Module], hidden_size: int, num_classes: int):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.head = nn.Linear(hidden_size, num_classes)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def encode(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        additive = (1.0 - mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        for layer in self.layers:
            out = layer(hidden, additive)
            hidden = out[0] if isinstance(out, tuple) else out
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(hidden, mask))


@torch.no_grad()
def encode_hidden_states(model, tokenizer, texts: list[str], max_len: int, layer: int, batch_size: int = 64, progress: bool = True,
                         device: str | torch.device = "auto"):
    """(hidden states entering encoder layer `layer` (0-based), attention masks) of `texts`, (N, max_len, d) float32,
    the encoder run on `device` (`auto`: the GPU when there is one; a GPU's cache differs by float rounding, and its
    content checksum with it). Sentence pairs (tuples) are encoded as pairs (`<s> a </s></s> b </s>` for RoBERTa),
    truncated longest first."""
    device = choose_device(device)
    model.to(device)
    hidden = np.zeros((len(texts), max_len, model.config.hidden_size), np.float32)
    masks = np.zeros((len(texts), max_len), np.uint8)
    for start in tqdm(range(0, len(texts), batch_size), desc=f"hidden states (layer {layer})", disable=not progress, mininterval=5.0):
        chunk = texts[start : start + batch_size]
        pair = (list(t[0] for t in chunk), list(t[1] for t in chunk)) if isinstance(chunk[0], tuple) else (chunk,)
        enc = tokenizer(*pair, truncation=True, max_length=max_len, padding="max_length", return_tensors="pt")
        out = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device), output_hidden_states=True)
        hidden[start : start + batch_size] = out.hidden_states[layer].float().cpu().numpy()
        masks[start : start + batch_size] = enc["attention_mask"].numpy()
    return hidden, masks


def write_hidden_cache(path: str | Path, spec: dict, progress: bool = True, device: str | torch.device = "auto") -> dict:
    """Cache the frozen bottom's output for a classification study (`language.studies[]` entry `spec`), computed
    on `device` (the study's training.device)."""
    model, tokenizer, model_prov = load_encoder(spec["model"])
    n_layers = int(model.config.num_hidden_layers)
    k = top_k(spec["model"], n_layers)
    data = load_text(spec["data"])
    if data.y_train is None:
        raise ConfigError(f"language.studies.{spec['name']}.data: corpus {data.name} has no labels (classification needs them)")
    max_len = int(spec["model"].get("max_len", 32))
    parts = {}
    for split, texts in (("train", data.train), ("test", data.test)):
        parts[f"h_{split}"], parts[f"mask_{split}"] = encode_hidden_states(
            model, tokenizer, texts, max_len, n_layers - k, progress=progress, device=device
        )
    parts["y_train"], parts["y_test"] = data.y_train, data.y_test
    content = hidden_content_sha256(parts)
    attrs = {
        "study": spec["name"],
        "model": model_prov,
        "num_hidden_layers": n_layers,
        "train_layers": k,
        "max_len": max_len,
        "num_classes": int(data.num_classes),
        "data": data.source,
        "dataset_checksum": data.checksum(),
        "content_sha256": content,
        "format": HIDDEN_CACHE_FORMAT,
        "package_versions": package_versions(("torch", "transformers", "tokenizers", "h5py")),
    }
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as fh:
            for key, value in parts.items():
                fh.create_dataset(key, data=value)
            fh.attrs["provenance"] = json.dumps(attrs)
    return attrs


#: Format 2 frames each array by name, dtype and shape (`hidden_content_sha256`); format 1 hashed the bytes alone.
HIDDEN_CACHE_FORMAT = 2


def hidden_content_sha256(parts: dict[str, np.ndarray]) -> str:
    """sha256 of a hidden-state cache's arrays by name, each framed by dtype and shape (a 2/3 and a 3/2
    split of the same rows differ)."""
    return canonical_sha256(tuple((key, np.asarray(parts[key])) for key in sorted(parts)))


def top_k(model_spec: dict, n_layers: int) -> int:
    k = model_spec.get("train_layers", "all")
    k = n_layers if k == "all" else int(k)
    if not 0 <= k <= n_layers:
        raise ConfigError(f"language.studies[].model.train_layers: expected 'all' or 0..{n_layers} (0: the head only), got {model_spec.get('train_layers')!r}")
    return k


def read_hidden_cache(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    try:
        with h5py.File(path, "r", locking=False) as fh:
            parts = {key: np.asarray(fh[key]) for key in fh.keys()}
            attrs = json.loads(fh.attrs["provenance"])
    except (OSError, KeyError) as exc:
        raise FeatureCacheError(f"{path}: not a readable hidden-state cache ({exc}); delete it and rerun") from exc
    if attrs.get("format") != HIDDEN_CACHE_FORMAT:
        raise FeatureCacheError(f"{path}: a hidden-state cache of an older dphpo (format {attrs.get('format', 1)}, this one reads "
                                f"{HIDDEN_CACHE_FORMAT}); delete it and rerun")
    if hidden_content_sha256(parts) != attrs["content_sha256"]:
        raise FeatureCacheError(f"{path}: content checksum mismatch (corrupt cache); delete it and rerun")
    tensors = {k: torch.from_numpy(v) for k, v in parts.items()}
    tensors["mask_train"], tensors["mask_test"] = tensors["mask_train"].float(), tensors["mask_test"].float()
    return tensors, attrs


class SequenceClassificationTask(OnDevice):
    """Top-k fine-tuning on cached hidden states (a task for FinetuneTrainer / DPZOTrainer). `device`: where the
    model and the states live (None: where the given states are; dphpo.tasks.device)."""

    metric = "accuracy"

    def __init__(self, top_layers: list[nn.Module], tensors: dict[str, torch.Tensor], num_classes: int, provenance: dict,
                 eval_batch: int = 512, lora: dict | None = None, device: str | torch.device | None = None):
        self.prototype = TopLayersClassifier([copy.deepcopy(m) for m in top_layers], tensors["h_train"].shape[-1], num_classes)
        for p in self.prototype.parameters():
            p.requires_grad = True
        if lora is not None:  # adapters in the top layers, the head trained in full
            scopes = [f"layers.{i}" for i in range(len(top_layers))]
            provenance = provenance | {"lora": apply_lora(self.prototype, lora, scopes, LORA_TARGETS["classification"], ("head.",))}
        provenance = provenance | {"trainable_parameters": sum(p.numel() for p in self.prototype.parameters() if p.requires_grad)}
        self.t = tensors
        self.num_classes = int(num_classes)
        self._provenance = provenance
        self.eval_batch = int(eval_batch)
        self.n_train = int(tensors["y_train"].shape[0])
        self.n_test = int(tensors["y_test"].shape[0])
        self.to(tensors["h_train"].device if device is None else device)

    @classmethod
    def from_cache(cls, path: str | Path, model_spec: dict, device: str | torch.device | None = None) -> SequenceClassificationTask:
        tensors, attrs = read_hidden_cache(path)
        model, _, _ = load_encoder(model_spec)
        k = int(attrs["train_layers"])
        layers = list(model.encoder.layer)[len(model.encoder.layer) - k :]  # k = 0: the head alone
        return cls(layers, tensors, attrs["num_classes"], {"hidden_cache": attrs, "cache_file": Path(path).name}, lora=model_spec.get("lora"),
                   device=device)

    def provenance(self) -> dict:
        return dict(self._provenance) | {"metric": self.metric, "n_train": self.n_train, "n_test": self.n_test}

    def null_scores(self) -> tuple[float, float, float]:
        """The majority label's train and test counts and test accuracy (`PrivateTrainer.null_scores`)."""
        return majority_label_scores(self.t["y_train"], self.t["y_test"], self.num_classes)

    def example_losses(self, module: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        logits = module(self.take("h_train", idx), self.take("mask_train", idx))
        return F.cross_entropy(logits, self.take("y_train", idx), reduction="none")

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict:
        correct, n = 0, self.t[f"y_{split}"].shape[0]
        for s in range(0, n, self.eval_batch):
            h, m, y = (self.take(f"{key}_{split}", slice(s, s + self.eval_batch)) for key in ("h", "mask", "y"))
            correct += int((model(h, m).argmax(1) == y).sum())
        return {"score_sum": float(correct), "metric": correct / max(1, n)}  # over the split, not its last chunk
