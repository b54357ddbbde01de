"""What a study writes, the same for both halves: the provenance block and, per target ε, result.json
(the release), the released model and the internal log (dphpo.layout: RESULT, MODEL, INTERNAL and
their LANGUAGE_ twins). The ε is inside the record; readers never parse it from the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dphpo.data.overlap import overlap_record
from dphpo.hpo.common import release_record
from dphpo.io import file_sha256, write_json
from dphpo.privacy.accountant import accountant_from_config
from dphpo.privacy.randomness import NoiseScope
from dphpo.provenance import DATA_CHECKSUM_KEYS, config_hash, package_versions
from dphpo.studies import config as study_config
from dphpo.studies.trainers import TRAINERS, trainer_settings
from dphpo.train.linear_head import save_weights


def provenance(config: dict, trainer: Any | None = None, result: Any | None = None,
               noise: NoiseScope | None = None, **extra: Any) -> dict:
    """The provenance block of every result file, stage file and internal log.

    accountant: how each training run was accounted — the trainer's run accountant (`describe()`:
    name and parameters; read off the config when no trainer is given) — and, for a result, what
    composed its ledger (`ledger_total`: gdp_closed_form, rdp, or the PRV accountant). The trainer adds
    its own block, as its kind lays it out (dphpo.studies.trainers.TrainerKind): the linear head merges
    its feature cache checksums and training settings, with the torch thread count and, for a job of a
    (dataset, extractor), the run settings and their hash that consumers check; a language trainer
    nests its block under `trainer` and records the versions of its extra packages. A study on its
    extractor's public pretraining data (`studies[i].pretraining_overlap`) names the overlap.
    """

    kind = TRAINERS[trainer.kind if trainer is not None else study_config.VISION_TRAINERS[0]]
    accountant = trainer.accountant.describe() if trainer is not None else accountant_from_config(config).describe()
    if result is not None and result.private:
        accountant["ledger_total"] = result.total["accountant"]
    block: dict[str, Any] = {
        "config_hash": config_hash(config),
        "package_versions": package_versions() | (package_versions(kind.packages) if kind.packages else {}),
        "accountant": accountant,
    }
    if kind.provenance_key is not None:
        block[kind.provenance_key] = trainer.provenance()
    else:
        block["torch_threads"] = torch.get_num_threads()
        block.update(trainer.provenance() if trainer is not None else {"training": trainer_settings(config).__dict__})
    if "dataset" in extra and "extractor" in extra:  # what Snakemake's params hash: consumers check it
        block["settings"] = study_config.run_settings(config, extra["extractor"], extra["dataset"], extra["method"])
        block["settings_hash"] = config_hash(block["settings"])
        overlap = overlap_record(config, extra["dataset"], extra["extractor"])
        if overlap is not None:  # a study on its extractor's public pretraining data, acknowledged
            block["pretraining_overlap"] = overlap
    labels = study_config.table_labels(config)
    if labels:  # what the tables read of the config: a bundle built without the config still labels its rows
        block["table_labels"] = labels
    if noise is not None:
        block["randomness"] = noise.describe()
        block = _with_macs(block, noise)
    block.update(extra)
    return block


def _with_macs(value: Any, noise: NoiseScope) -> Any:
    """`value` with, beside each checksum of private data (DATA_CHECKSUM_KEYS, at any depth: a feature cache's,
    a language task's), its keyed MAC `<name>_mac`: the release keeps the MACs, the plain checksums stay in the
    internal log (dphpo.hpo.common.INTERNAL_KEYS)."""
    if isinstance(value, list):
        return [_with_macs(item, noise) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _with_macs(item, noise) for key, item in value.items()}
    for name in DATA_CHECKSUM_KEYS:
        if isinstance(out.get(name), str):
            out[name + "_mac"] = noise.mac(out[name])
    return out


def write_result(result: Any, result_path: str | Path, model_path: str | Path, provenance: dict, internal_path: str | Path) -> dict:
    """One target ε of a method (a dphpo.hpo.common.MethodResult): result.json (the release), the internal
    log and the released model, all atomic. Returns the release record."""

    if result.save_model is not None:
        result.save_model(model_path)
    else:
        save_weights(result.weights, model_path)
    # the model's hash sealed into its record: a model swapped for another (and the MANIFEST rebuilt) fails verify
    release = release_record(result, provenance) | {"model_sha256": file_sha256(model_path)}
    write_json(internal_path, result.record(provenance))
    write_json(result_path, release)
    return release
