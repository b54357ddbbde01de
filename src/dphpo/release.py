"""`dphpo release RESULTS_DIR OUT_DIR`: the publishable bundle of a results tree, and its check.

A results tree is a workspace: beside the DP releases it holds internal logs, stage files, feature
caches, job logs and wall times (a function of Papernot–Steinke's secret K), the non-private reference
and the test-selected grid oracle. A bundle holds only what a researcher may publish:

- every DP release (`result.json`) and its model, under the same relative paths;
- tables, figures and an HTML report rebuilt from those releases alone (no job runtimes), and rebuilt
  again by `verify --release`, which fails a table, figure or page the releases do not give;
- `PRIVACY.md` (and `privacy.json`, the same statement for programs): per private dataset the privacy
  unit, the adjacency, δ, what is treated as public, each release's (ε, δ), and the ε of all the
  bundle's releases about that dataset composed — releases about one dataset compose, whatever their
  method, seed, extractor or variant;
- `MANIFEST`: the sha256 of every other file.

Non-private references and test-selected oracles stay out unless `include_nonprivate`, which lists
them in the statement with ε = ∞. `verify_bundle` (`dphpo verify --release DIR`) fails on any file
that must not be published, a manifest that does not match, or a statement that does not match the
releases (the composed ε recomputed by `dphpo.verify`'s independent accounting).

Composition: the stage trials of one linear-scaling search are shared by its targets (Panda et al.
Fig. 2: one search serves every target), so a search's stages are counted once where its releases carry
the identical stage entries; every other ledger entry counts once per release. The statement's composition is dphpo's ledger (`Ledger.total`: exact GDP where
every entry is GDP, else RDP or PRV); `verify --release` recomputes it with dp_accounting or the GDP
closed form and requires agreement.
"""

from __future__ import annotations

import base64
import copy
import html
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from dphpo import layout
from dphpo.data.text import overlapping_parts
from dphpo.errors import ConfigError, OutputFileError
from dphpo.hpo.linear_scaling_plan import NULL_RELEASE
from dphpo.hpo.registry import NOT_DP_METHODS
from dphpo.hpo.selection import accounted
from dphpo.io import file_sha256, read_json, write_json, write_text
from dphpo.privacy.ledger import Ledger
from dphpo.report import comparison, linear_scaling
from dphpo.studies.config import check_identity, table_labels
from dphpo.studies.validate import load_config
from dphpo.verify import (
    MISSING,
    MODEL_FILES,
    check_record,
    claim_problems,
    missing_releases,
    model_problems,
    recompute,
    verify_tree,
)

STATEMENT = "PRIVACY.md"
STATEMENT_JSON = "privacy.json"
MANIFEST = "MANIFEST"
REPORT = "report.html"
#: What a bundle may hold (besides the three files above): releases and models, tables, figures.
RELEASE_NAMES = ("result.json",)
TABLE_SUFFIXES = {f".{ext}" for ext in layout.TABLE_FORMATS}
#: A release's own tables, rebuilt from the bundle's records.
BUNDLE_TABLES = ("linear_scaling", "hpo_comparison")
#: Names in a results tree that are never published (for the error message of `verify --release`).
INTERNAL_NAMES = {
    "internal.json": "an internal log (exact private statistics)",
    "logs": "job logs",
    "benchmarks": "job wall times (Papernot–Steinke's reveal its secret K)",
    "features": "feature caches of the private data",
    ".snakemake": "Snakemake's metadata",
    "noise.key": "the secret noise key",
}


@dataclass
class Release:
    """One record of a results tree, with what the statement needs to know of it."""

    rel: str  # path relative to the tree (and to the bundle)
    record: dict
    model_rel: str | None

    @property
    def provenance(self) -> dict:
        return self.record.get("provenance") or {}

    @property
    def dp(self) -> bool:
        """A DP release: trained with noise and its selection accounted (not the non-private reference,
        not an oracle selected on test data)."""
        return accounted(self.record)

    @property
    def selection_rule(self) -> str | None:
        return (self.record.get("selection") or {}).get("rule")

    @property
    def dataset(self) -> str:
        """The private dataset the release is about: a vision study's dataset, a language study's corpus
        (its task's `data.corpus`), so that every release about one corpus composes."""
        prov = self.provenance
        return str(prov.get("dataset") or _corpus(prov.get("trainer")) or prov.get("study") or "?")

    @property
    def search(self) -> str:
        """The search a release belongs to: its run folder without the target (method, variant, seed); for a
        Table-14 reduced release (`layout.REDUCED_METHOD`), the run folder of the result it reduced, whose
        search it carries."""
        folder = PurePosixPath(self.rel).parent.parent
        source = ((self.record.get("search") or {}).get("reduced") or {}).get("source_variant")
        if source and len(folder.parts) == 6 and folder.parts[3] == layout.REDUCED_METHOD:
            return str(PurePosixPath(*folder.parts[:3], self.record.get("method") or "linear_scaling", source, folder.parts[5]))
        return str(folder)

    @property
    def data_mac(self) -> str | None:
        """The keyed checksum of the private data the release was trained on (its `dataset_checksum_mac`, not
        an upstream stage's), or None: two dataset names over the same records carry the same one."""
        return _data_mac(self.provenance)

    @property
    def upstream(self) -> dict | None:
        """The DP continual pre-training of the release's extractor (its dataset, (ε, δ) and ledger entries)."""
        return (self.provenance.get("feature_cache") or {}).get("upstream_privacy") or None

    @property
    def pretraining_data(self) -> str | None:
        """The dataset the workflow pretrained the release's extractor on without noise."""
        return (self.provenance.get("feature_cache") or {}).get("pretraining_data") or None

    @property
    def task(self) -> dict:
        """A language release's task record (its trainer's `task`: model, data, pretraining), else {}."""
        trainer = self.provenance.get("trainer")
        task = trainer.get("task") if isinstance(trainer, dict) else None
        return task if isinstance(task, dict) else {}

    @property
    def language_model(self) -> str | None:
        """What a language release fine-tunes (its task's `model`), or None."""
        return str(self.task["model"]) if self.task.get("model") else None

    @property
    def pretraining_corpora(self) -> list[dict]:
        """The corpora (`{name, partition}`) the workflow pretrained the release's language model on without
        noise (`language.pretrain.<name>.data`, as its checkpoint records them)."""
        public = (self.task.get("pretraining") or {}).get("public_data") or {}
        return [spec for spec in public.get("specs") or [] if isinstance(spec, dict)]

    def trained_on(self, corpus: dict) -> bool:
        """Whether the release's private data may share records with `corpus` (`{name, partition}`): the same
        corpus, unless both take disjoint partitions (`dphpo.data.text.overlapping_parts`); a vision release
        (on the dataset's features) takes no partition."""
        data = _data_source(self.provenance.get("trainer"))
        private = {"name": data["corpus"], "partition": data.get("partition")} if data else {"name": self.dataset}
        return bool(overlapping_parts([corpus], private))

    @property
    def p_exceed(self) -> float:
        """P[K > max_trials] of a truncated number of trials (Papernot–Steinke, Koskela), else 0: the
        probability that the capped search differs from the one its ledger accounts."""
        privacy = self.record.get("privacy") or {}
        trunc = privacy.get("truncation") or (privacy.get("total") or {}).get("truncation") or {}
        return float(trunc.get("p_exceed", 0.0))


def _search_entry(entry: dict) -> bool:
    """A ledger entry of a linear-scaling search, which every release of that search carries: its stage
    trials and selections, and the null model's score released at stage 1."""
    what = str(entry.get("what", ""))
    return what.startswith("stage ") or what == NULL_RELEASE


def _data_mac(block: Any) -> str | None:
    """The first `dataset_checksum_mac` in a provenance block outside an upstream stage's record."""
    if not isinstance(block, dict):
        return None
    if isinstance(block.get("dataset_checksum_mac"), str):
        return block["dataset_checksum_mac"]
    return next((mac for key, value in block.items() if key != "upstream_privacy" and (mac := _data_mac(value))), None)


def same_data_names(releases: list[Release]) -> dict[str, str]:
    """Each dataset name → the name its statement goes under: the first, sorted, of the names whose releases
    (or DP pre-training stages) carry one keyed data checksum. The same records under two dataset names
    (a config that names one file twice, `dphpo init --add` of a file again) are one set of people: their
    releases compose into one statement, not two that each look cheaper."""
    groups: list[set[str]] = []
    by_mac: dict[str, set[str]] = {}
    for r in releases:
        pairs = [(r.dataset, r.data_mac)] + ([(str(r.upstream["dataset"]), r.upstream.get("dataset_checksum_mac"))] if r.upstream else [])
        for name, mac in pairs:
            if mac:
                by_mac.setdefault(mac, set()).add(name)
    for names in by_mac.values():  # groups sharing a name merge (a name whose data changed carries two MACs)
        touching = [g for g in groups if g & names]
        groups = [g for g in groups if not g & names] + [set(names).union(*touching)]
    return {name: min(g) for g in groups for name in g}


def _data_source(block: Any) -> dict | None:
    """The first `data` block naming a `corpus` anywhere in a language trainer's provenance block."""
    if isinstance(block, dict):
        data = block.get("data")
        if isinstance(data, dict) and data.get("corpus"):
            return data
        return next((c for c in map(_data_source, block.values()) if c), None)
    return None


def _corpus(block: Any) -> str | None:
    """The corpus a language trainer's provenance block names (`_data_source`)."""
    data = _data_source(block)
    return str(data["corpus"]) if data else None


@dataclass
class DatasetStatement:
    """The privacy statement of one private dataset: its releases and their composition."""

    dataset: str
    releases: list[Release] = field(default_factory=list)
    references: list[Release] = field(default_factory=list)  # non-private, ε = ∞ (only when included)
    # DP continual pre-training on this dataset of the extractors other releases use (each once: every
    # release built on one extractor is post-processing of that one stage)
    stages: list[dict] = field(default_factory=list)
    # releases about other datasets whose extractor the workflow pretrained on this one without noise
    public_uses: list[Release] = field(default_factory=list)
    # other names of the same records (`same_data_names`), whose releases are in this statement
    same_data: list[str] = field(default_factory=list)

    def entries(self) -> list[dict]:
        """Every ledger entry of the dataset's DP releases, a search's shared stages once (releases of one
        search (its folder) whose stage entries are identical, trial by trial (the workflow's one stage file
        per search, with its secretly drawn η), carry the same stage releases; anything else counts apart),
        and the entries of each DP continual pre-training stage on it."""
        out = [e for stage in self.stages for e in stage.get("entries") or []]
        seen = set()
        for r in self.releases:
            entries = (r.record.get("privacy") or {}).get("entries") or []
            stages = [e for e in entries if _search_entry(e)]
            block = (r.search, json.dumps(stages, sort_keys=True))
            if stages and block in seen:
                entries = [e for e in entries if e not in stages]
            seen.add(block)
            out += entries
        return out

    @property
    def delta(self) -> float:
        return max([float((r.record.get("target") or {}).get("delta", r.record["total_delta"])) for r in self.releases]
                   + [float(stage["delta"]) for stage in self.stages])

    @property
    def bundle_is_infinite(self) -> bool:
        """Publishing the bundle protects nobody in this dataset: it holds a non-private release about it, or
        a release built on an extractor pretrained on it without noise."""
        return bool(self.references or self.public_uses)

    def composed(self) -> dict:
        """(ε, δ) of every DP release about the dataset, composed (dphpo's ledger).

        A release whose number of trials is capped differs from the search its ledger accounts with
        probability p = P[K > max_trials], independently of the data; all of them together differ with
        probability at most Σp, so the composed (ε, δ) of the uncapped searches becomes
        (ε, δ + (1 + e^ε)·Σp) by the same TV coupling each release uses alone, at the composed ε, not at
        each release's own (a sum of the releases' own δ_cap would undercount it). Capped at 1, and
        computed in logarithms (e^ε overflows past ε = 709; clamping it there would undercount)."""
        total = Ledger.from_dict({"entries": self.entries()}).total(self.delta)
        eps = float(total["eps"])
        p_exceed = sum(r.p_exceed for r in self.releases)
        # log((1 + e^ε)·Σp) = ε + log1p(e^{-ε}) + log Σp
        truncation = math.exp(min(0.0, eps + math.log1p(math.exp(-eps)) + math.log(p_exceed))) if p_exceed else 0.0
        return {"eps": eps, "delta": min(1.0, self.delta + truncation), "truncation_delta": truncation,
                "accountant": total["accountant"], "composition": total["composition"]}

    def public_parts(self) -> list[str]:
        """What the releases treat as public, read from their provenance."""
        parts = set()
        for r in self.releases:
            prov = r.provenance
            cache = prov.get("feature_cache") or {}
            test = (prov.get("settings") or {}).get("test_split", "official")
            parts.add("the test split (" + ("your own data's, declared public by datasets." + self.dataset + ".test_split"
                                            if test == "public" else "of a published dataset: its official test split, "
                                            "or a per-record share of it")
                      + "; its metrics are published exactly)")
            declared = (((prov.get("settings") or {}).get("dataset") or {}).get("read") or {}).get("classes")
            if declared:
                parts.add(f"the declared label set ({len(declared)} classes: datasets.{self.dataset}.classes)")
            if cache.get("public_n_train") is not None:
                parts.add(f"the declared training-set size n = {cache['public_n_train']} (the normaliser, never counted)")
            if prov.get("extractor") and prov.get("extractor") not in ("raw", "identity"):
                parts.add(f"the extractor {prov['extractor']} and its pretraining data"
                          + (f" (its DP continual pre-training on {r.upstream['dataset']} is accounted in that "
                             "dataset's statement)" if r.upstream else ""))
            task = r.task  # a language release's (a vision release's trainer names its kind)
            if task.get("public_duplicates"):
                parts.add("the public corpus its language model was pretrained on: "
                          + task["public_duplicates"].get("rule", "private training texts that occur in it are dropped"))
            if prov.get("pretraining_overlap"):
                parts.add(f"overlap with the extractor's pretraining data: {prov['pretraining_overlap']}")
        return sorted(parts)

    def adjacencies(self) -> set[str]:
        found = {((r.provenance.get("accountant") or {}).get("adjacency") or "add_remove") for r in self.releases}
        if self.stages:
            found.add("add_remove")  # DP continual pre-training: Poisson-subsampled DP-SGD
        return found

    def adjacency(self) -> str:
        return ", ".join(sorted(self.adjacencies()))

    def mixed_adjacency(self) -> str | None:
        """Why the releases about the dataset cannot be composed: their guarantees are for different
        neighbouring relations (a ledger composes entries of one relation; an add/remove guarantee holds
        for replace-one only at about twice its ε), or None."""
        if len(self.adjacencies()) < 2:
            return None
        return (f"the releases about {self.dataset} are accounted for different adjacencies ({self.adjacency()}: "
                "privacy.adjacency, and add_remove for a DP pre-training stage), which no statement composes: "
                "bundle them apart (--methods, or a results tree per adjacency)")

    def to_dict(self) -> dict:
        composed = self.composed()
        return {
            "dataset": self.dataset,
            **({"same_data_as": self.same_data} if self.same_data else {}),
            "unit": "one record of its training split",
            "adjacency": self.adjacency(),
            "public": self.public_parts(),
            "composed": composed,
            # what the whole bundle costs the dataset: infinite once a non-private release is in it
            "bundle_eps": "inf" if self.bundle_is_infinite else composed["eps"],
            "releases": [{"file": r.rel, "method": r.record.get("method"), "eps": r.record.get("total_eps"),
                          "delta": r.record.get("total_delta")} for r in self.releases],
            "nonprivate": [{"file": r.rel, "method": r.record.get("method"), "eps": "inf"}
                           | ({"selection_rule": r.selection_rule} if r.record.get("private", True) else {}) for r in self.references],
            "pretraining_stages": [{"what": s.get("what"), "eps": s.get("eps"), "delta": s.get("delta"),
                                    "accountant": s.get("accountant")} for s in self.stages],
            "public_pretraining_for": [{"file": r.rel, "dataset": r.dataset,
                                        "extractor": r.provenance.get("extractor") or r.language_model} for r in self.public_uses],
        }


# ------------------------------------------------------------------------------------------
# reading a results tree


def find_releases(root: str | Path) -> list[Release]:
    """Every release record under `root` (vision `runs/`, language `language/`), sealed and readable."""
    root = Path(root)
    out = []
    for path in sorted(root.rglob("result.json")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] not in ("runs", "language"):
            continue
        record = read_json(path)  # refuses a damaged or edited record, naming it
        if not isinstance(record, dict):
            raise OutputFileError(f"{path}: expected a release record (a JSON object), got a JSON {type(record).__name__}")
        if lacking := [k for k in ("method", "total_eps", "total_delta", "privacy") if k not in record]:
            raise OutputFileError(f"{path}: a release record states its method, (total_eps, total_delta) and its ledger "
                                  f"(privacy); this one lacks {', '.join(lacking)}: not written by dphpo, or edited")
        check_identity(rel, record)  # and one moved into another run's folder
        model = next((path.with_name(m) for m in MODEL_FILES if path.with_name(m).is_file()), None)
        out.append(Release(rel, record, model.relative_to(root).as_posix() if model else None))
    return out


def statements(releases: list[Release], include_nonprivate: bool) -> list[DatasetStatement]:
    """One statement per private dataset the releases are about, or that an extractor of theirs was
    pretrained on with DP (its stage composes into that dataset's statement, once) or, where the dataset is
    private here, without noise (publishing those releases costs that dataset ε = ∞)."""
    names = same_data_names(releases)

    def home(name: Any) -> str:
        return names.get(str(name), str(name))

    by_dataset: dict[str, DatasetStatement] = {}
    for r in releases:
        st = by_dataset.setdefault(home(r.dataset), DatasetStatement(home(r.dataset)))
        if r.dp:
            st.releases.append(r)
        elif include_nonprivate:
            st.references.append(r)
    published = [r for r in releases if r.dp or include_nonprivate]
    for r in published:
        if r.upstream:
            st = by_dataset.setdefault(home(r.upstream["dataset"]), DatasetStatement(home(r.upstream["dataset"])))
            if r.upstream not in st.stages:
                st.stages.append(r.upstream)
    for r in published:
        st = by_dataset.get(home(r.pretraining_data))
        if st is not None and r.pretraining_data and home(r.pretraining_data) != home(r.dataset) and (st.releases or st.references or st.stages):
            st.public_uses.append(r)
        for corpus in r.pretraining_corpora:  # a language model pretrained on a private corpus's records
            st = by_dataset.get(home(corpus.get("name")))
            if st is not None and r not in st.public_uses and any(q.trained_on(corpus) for q in st.releases + st.references):
                st.public_uses.append(r)
    for name, st in by_dataset.items():
        st.same_data = sorted(n for n, h in names.items() if h == name and n != name)
    return [st for _, st in sorted(by_dataset.items()) if st.releases or st.references or st.stages]


def plain_summary(results_dir: str | Path) -> list[str]:
    """What a results tree's DP releases protect, one line per private dataset in plain words (the end of
    a workflow run prints it): the unit, the adjacency, each target's (ε, δ) including its search, every
    release about the dataset composed, what is treated as public; then the command that builds the
    bundle. [] when the tree holds no DP release."""
    root = Path(results_dir)
    sts = statements(find_releases(root), include_nonprivate=False) if root.is_dir() else []
    lines = []
    for st in sts:
        c = st.composed()
        if not st.releases:  # only the DP continual pre-training of an extractor the releases use
            lines.append(f"{st.dataset}: no release about it; the DP continual pre-training on it of the extractor that "
                         f"releases under {root} use is ({_eps(c['eps'])}, {c['delta']:.3g})-DP.")
            continue
        targets = sorted({float((r.record.get("target") or {}).get("eps", r.record.get("total_eps"))) for r in st.releases})
        sizes = sorted({(r.provenance.get("feature_cache") or {}).get("public_n_train") for r in st.releases} - {None})
        records = f"one of its {', '.join(f'{n:,}' for n in sizes)} training records" if sizes else "one training record"
        lines.append(
            f"{st.dataset}" + (f" (the same records as {', '.join(st.same_data)})" if st.same_data else "")
            + f": each released model is ({' / '.join(_eps(t) for t in targets)}, {st.delta:.3g})-DP at its target "
            f"ε, its search included, with respect to {records} ({st.adjacency()}); all {len(st.releases)} DP releases "
            f"about it under {root} together" + (" with the DP continual pre-training on it" if st.stages else "")
            + f": ({_eps(c['eps'])}, {c['delta']:.3g})-DP"
            + (f"; {len(st.public_uses)} release(s) use an extractor pretrained on it without noise, so publishing all "
               "of the tree costs it ε = ∞" if st.public_uses else "") + ". Treated as public: "
            + "; ".join(st.public_parts()) + "."
        )
    if lines:
        lines.append(f"{root} also holds internal files: publish the bundle of `dphpo release {root} release` "
                     "(checked by `dphpo verify --release release`), which states all of this in PRIVACY.md.")
    return lines


# ------------------------------------------------------------------------------------------
# writing the bundle


def build_bundle(results_dir: str | Path, out_dir: str | Path, *, include_nonprivate: bool = False,
                 methods: list[str] | None = None, config: dict | None = None) -> dict:
    """Write the bundle of `results_dir` into `out_dir` (which must not exist or be empty); returns the
    statement (`privacy.json`'s content)."""
    root, out = Path(results_dir), Path(out_dir)
    if not root.is_dir():
        raise ConfigError(f"RESULTS_DIR {root} is not a directory")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"OUT_DIR {out} is a file: a bundle is written into a new folder")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"OUT_DIR {out} exists and is not empty: a bundle is written into a new folder")
    if out.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"OUT_DIR {out} lies inside RESULTS_DIR {root}: write the bundle elsewhere")
    releases = find_releases(root)
    if methods:
        unknown = sorted(set(methods) - {str(r.record.get("method")) for r in releases})
        if unknown:
            raise ConfigError(f"--methods: no release of {', '.join(unknown)} under {root}")
        releases = [r for r in releases if r.record.get("method") in methods]
    chosen = [r for r in releases if r.dp or include_nonprivate]
    if not any(r.dp for r in chosen):
        raise ConfigError(f"no DP release (result.json of a private method) under {root}")
    for st in statements(chosen, include_nonprivate):
        if why := st.mixed_adjacency():
            raise ConfigError(why)
    final, out = out, out.with_name(f".{out.name}.partial")  # built aside, renamed when complete
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        statement = _write_bundle(root, out, chosen, include_nonprivate, methods, config)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # a failed build leaves nothing behind
        raise
    if final.exists():
        final.rmdir()  # empty (checked above)
    out.rename(final)
    return statement


def _write_bundle(root: Path, out: Path, chosen: list[Release], include_nonprivate: bool, methods: list[str] | None,
                  config: dict | None) -> dict:
    """Copy the chosen releases and models into `out`, then the tables, the statement and the MANIFEST."""
    for r in chosen:
        for rel in (r.rel, r.model_rel):
            if rel:
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / rel, out / rel)  # not copy2: a file's time is when its job ended
    labels = table_labels(config) if config is not None else recorded_labels(chosen)
    tables = build_tables(out, chosen, labels)
    statement = {
        "bundle": "dphpo release",
        "include_nonprivate": include_nonprivate,
        "methods": sorted(methods) if methods else None,  # --methods: the bundle holds only these by choice
        "noise_key_fingerprint": _fingerprint(chosen),
        "table_labels": labels,  # what of the config the tables read: verify --release rebuilds them from it
        "datasets": [st.to_dict() for st in statements(chosen, include_nonprivate)],
    }
    write_json(out / STATEMENT_JSON, statement)
    write_text(out / STATEMENT, statement_markdown(statement))
    write_text(out / REPORT, report_html(out, statement, tables))
    write_manifest(out)
    set_bundle_times(out)
    return statement


def unbundled(statement: dict, config: dict) -> list[str]:
    """The releases the config's study implies that a bundle (its `statement`) lacks: DP ones (and the
    non-private ones where it includes them), of its `--methods` where it was built with some."""
    files = [r["file"] for d in statement["datasets"] for r in d["releases"] + d["nonprivate"]]
    missing = missing_releases(config, files, () if statement.get("include_nonprivate") else NOT_DP_METHODS)
    chosen = statement.get("methods")
    return [rel for rel in missing if not chosen or layout.parse(layout.RESULT, rel)["method"] in chosen]


def _fingerprint(releases: list[Release]) -> str | None:
    found = {((r.provenance.get("randomness") or {}).get("noise_key_fingerprint")) for r in releases} - {None}
    return ", ".join(sorted(found)) or None


def recorded_labels(releases: list[Release]) -> dict:
    """Without the study's config: the table labels its releases' provenance records (`table_labels`),
    so the tables still label rows that use settings chosen on private data, name where each method's
    settings come from and mark studies on their extractor's pretraining data."""
    labels: dict = {}
    for r in releases:
        _merge(labels, r.provenance.get("table_labels") or {})
    return labels


def _merge(into: dict, more: Mapping) -> None:
    """Fold `more` into `into`: mappings key by key, lists as the union of their entries."""
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += [v for v in value if v not in into[key]]
        else:
            into.setdefault(key, copy.deepcopy(value))


def build_tables(out: Path, releases: list[Release], config: dict) -> list[str]:
    """The study's tables and figures, rebuilt from the bundle's vision releases alone and the table
    labels of the study's config (`studies.config.table_labels`); returns the names of the tables written."""
    vision = [r for r in releases if r.rel.startswith("runs/")]
    trained_private = [r for r in vision if r.record.get("private", True)]
    private = [str(out / r.rel) for r in trained_private]
    references = [str(out / r.rel) for r in vision if not r.record.get("private", True)]
    rule = [str(out / r.rel) for r in trained_private if r.record.get("method") == "linear_scaling"]
    written = []
    if rule:
        linear_scaling.make(rule, references, md=str(out / "tables/linear_scaling.md"),
                            csv_path=str(out / "tables/linear_scaling.csv"), html_path=str(out / "tables/linear_scaling.html"),
                            figure=str(out / "figures/linear_scaling_accuracy_vs_eps.png"), config=config)
        written.append("linear_scaling")
    if private:
        comparison.make(private, references, md=str(out / "tables/hpo_comparison.md"), csv_path=str(out / "tables/hpo_comparison.csv"),
                        tex=str(out / "tables/hpo_comparison.tex"), html_path=str(out / "tables/hpo_comparison.html"),
                        figure=str(out / "figures/hpo_comparison_accuracy_vs_eps.png"), config=config)
        written.append("hpo_comparison")
    return written


def _eps(value: Any) -> str:
    return "∞" if value in ("inf", None) or (isinstance(value, float) and math.isinf(value)) else f"{float(value):.4g}"


def statement_markdown(statement: dict) -> str:
    """PRIVACY.md: the statement in plain words."""
    lines = [
        "# Privacy statement",
        "",
        "Every model and number in this bundle is a differentially private release, unless listed under "
        "'not private' below. Each release's (ε, δ) includes its whole hyperparameter search. Releases "
        "about the same dataset compose: the line 'this whole bundle' is what publishing all of it costs "
        "that dataset's records (ε = ∞ where it holds a non-private release).",
        "",
        f"Noise key fingerprint: `{statement.get('noise_key_fingerprint')}` (identifies the secret key; reveals nothing of it).",
        "",
    ]
    for d in statement["datasets"]:
        c = d["composed"]
        lines += [
            f"## {d['dataset']}",
            "",
            *([f"The same records are released under the name(s) {', '.join(d['same_data_as'])} (their keyed data "
               "checksum is this dataset's): their releases are stated and composed here.", ""] if d.get("same_data_as") else []),
            f"- **Privacy unit:** {d['unit']}.",
            f"- **Adjacency:** {d['adjacency']} (neighbouring datasets differ in that one record).",
            f"- **All {len(d['releases'])} DP releases together:** ({_eps(c['eps'])}, {c['delta']:.3g})-DP "
            f"({c['accountant']}; a shared search counted once"
            + (f"; δ includes (1 + e^ε)·P[some capped K exceeded its cap] = {c['truncation_delta']:.3g}"
               + (", which `max_trials: auto` makes negligible" if cap_dominates(c) else "")
               if c.get("truncation_delta") else "")
            + "".join(f"; with the {s['what']} on it, ({_eps(s['eps'])}, {float(s['delta']):.3g})-DP alone, which "
                      "every release built on its extractor post-processes"
                      for s in d.get("pretraining_stages", [])) + ").",
            "- **This whole bundle:** " + _bundle_line(d, c),
            "- **Treated as public:** " + ("; ".join(d["public"]) or "nothing") + ".",
            "",
            "| release | method | ε | δ |",
            "|---|---|---|---|",
        ]
        lines += [f"| `{r['file']}` | {r['method']} | {_eps(r['eps'])} | {float(r['delta']):.3g} |" for r in d["releases"]]
        if d["nonprivate"]:
            lines += ["", "**Not private** (included with `--include-nonprivate`: trained without noise, or a search "
                      "selected on test data or on exact training scores; ε = ∞ — they protect nobody):", ""]
            lines += [f"- `{r['file']}` ({r['method']}{_rule_of(r)}): ε = ∞" for r in d["nonprivate"]]
        lines.append("")
    return "\n".join(lines)


def cap_dominates(composed: dict) -> bool:
    """Whether a composed statement's δ is mostly the truncation term of its capped trial counts (more than
    1 % on top of the releases' own δ): caps sized for one release, not for the bundle's ε."""
    t = float(composed.get("truncation_delta") or 0.0)
    return t > 0.01 * (float(composed["delta"]) - t)


def _rule_of(entry: dict) -> str:
    """`, selected by <rule>` for a statement entry whose search chose by a non-private rule."""
    rule = entry.get("selection_rule")
    return f", selected by {rule}" if rule else ""


def _bundle_line(d: dict, c: dict) -> str:
    """What publishing the whole bundle costs a dataset (PRIVACY.md): ε = ∞ where it holds a non-private
    release about it, or releases built on an extractor pretrained on it without noise."""
    why = []
    if d["nonprivate"]:
        why.append(f"it also holds {len(d['nonprivate'])} non-private release(s) about {d['dataset']} (below), which "
                   "protect nobody")
    uses = d.get("public_pretraining_for") or []
    if uses:
        users = sorted({f"{u['dataset']} (extractor {u['extractor']})" for u in uses})
        why.append(f"{len(uses)} release(s) about {', '.join(users)} use an extractor pretrained on {d['dataset']} "
                   "without noise, treating it as public; publish them in a bundle of their own to keep this one's ε")
    return f"ε = ∞: {'; '.join(why)}." if why else f"({_eps(c['eps'])}, {c['delta']:.3g})-DP."


def report_html(out: Path, statement: dict, tables: list[str]) -> str:
    """One self-contained page: the statement, the tables and the figures of the bundle."""
    parts = [f"<pre>{html.escape(statement_markdown(statement))}</pre>"]
    for name in tables:
        page = (out / "tables" / f"{name}.html").read_text()
        parts.append(f"<h2>{html.escape(name)}</h2>" + page.split("<body>", 1)[-1].rsplit("</body>", 1)[0])
    for png in sorted((out / "figures").rglob("*.png")):
        data = base64.b64encode(png.read_bytes()).decode()
        parts.append(f"<h3>{html.escape(png.name)}</h3><img alt='{html.escape(png.name)}' src='data:image/png;base64,{data}'>")
    return "<!DOCTYPE html><html><head><meta charset='utf-8'><title>dphpo release</title></head><body>" + "".join(parts) + "</body></html>\n"


#: Every file and folder of a bundle carries this modification time (1980-01-02 UTC: zip stores no earlier
#: one): the times a results tree's files were written are when their jobs ended, and the gaps between them
#: are the jobs' run times, which grow with the private N and with Papernot-Steinke's secret number of trials K.
BUNDLE_MTIME = 315_619_200
#: How far apart a bundle's file times may lie in `verify --release` (a copy with `cp -r` rewrites them
#: within a moment; the gaps of a results tree are the jobs' run times, seconds to hours)
MTIME_SPREAD_S = 2.0


def set_bundle_times(out: Path) -> None:
    for p in [*out.rglob("*"), out]:
        os.utime(p, (BUNDLE_MTIME, BUNDLE_MTIME), follow_symlinks=False)


def time_problems(bundle: Path) -> list[str]:
    """Modification times that vary across a bundle's files: they would publish when each job ended."""
    times = {p.relative_to(bundle).as_posix(): p.stat().st_mtime for p in bundle.rglob("*") if p.is_file()}
    if times and max(times.values()) - min(times.values()) > MTIME_SPREAD_S:
        late = max(times, key=times.get)
        return [f"{late}: the bundle's file modification times differ by {max(times.values()) - min(times.values()):.0f} s; "
                "they reveal when each job ended (its run time grows with the private data and the secret K): rebuild "
                f"the bundle with `dphpo release`, or reset them (touch -d @{BUNDLE_MTIME} on every file) before publishing"]
    return []


def write_manifest(out: Path) -> None:
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)
    write_text(out / MANIFEST, "".join(f"{file_sha256(out / f)}  {f}\n" for f in files))


# ------------------------------------------------------------------------------------------
# checking a bundle (`dphpo verify --release`)


def allowed(rel: str) -> str | None:
    """Why a file may not be in a bundle, or None when it may."""
    parts = PurePosixPath(rel).parts
    for part in parts:
        if part in INTERNAL_NAMES:
            return INTERNAL_NAMES[part]
    name = parts[-1]
    if len(parts) == 1 and name in (STATEMENT, STATEMENT_JSON, MANIFEST, REPORT):
        return None
    if parts[0] in ("runs", "language") and (name in RELEASE_NAMES or name in MODEL_FILES):
        return None
    if parts[0] == "tables" and len(parts) == 2 and PurePosixPath(name).suffix in TABLE_SUFFIXES:
        return None
    if parts[0] == "figures" and name.endswith(".png"):
        return None
    if name.startswith("stage") and name.endswith(".json"):
        return "a stage file (every trial's exact training accuracy)"
    return "not a file a bundle holds (releases, models, tables, figures, PRIVACY.md, privacy.json, MANIFEST, report.html)"


def verify_bundle(bundle: str | Path, config_paths: list[str] | None = None) -> list[str]:
    """Every problem of a bundle, each naming its file; empty when it may be published as it is. With
    `config_paths` (as given to snakemake --configfile), also each release's config hash and every release
    the config's study implies present (`unbundled`)."""
    bundle = Path(bundle)
    problems = []
    for name in (MANIFEST, STATEMENT, STATEMENT_JSON):
        if not (bundle / name).is_file():
            problems.append(f"{name}: missing (build the bundle with `dphpo release RESULTS_DIR OUT_DIR`)")
    if problems:
        return problems
    files = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file() or p.is_symlink())
    for rel in files:
        why = allowed(rel)
        if why:
            problems.append(f"{rel}: must not be published ({why})")
    listed = {}
    for i, line in enumerate((bundle / MANIFEST).read_text().splitlines(), 1):
        digest, _, rel = line.partition("  ")
        if len(digest) != 64 or not rel:
            problems.append(f"{MANIFEST}:{i}: not 'sha256  path'")
            continue
        listed[rel] = digest
    for rel in sorted(set(files) - set(listed) - {MANIFEST}):
        problems.append(f"{rel}: not in {MANIFEST}")
    for rel, digest in listed.items():
        if not (bundle / rel).is_file():
            problems.append(f"{rel}: listed in {MANIFEST} but missing")
        elif file_sha256(bundle / rel) != digest:
            problems.append(f"{rel}: its sha256 does not match {MANIFEST} (edited after the bundle was built)")
    problems += time_problems(bundle)
    problems += _verify_statement(bundle, config_paths)
    return problems


def _record_problems(bundle: Path, releases: list[Release], statement: dict, config: dict | None) -> list[str]:
    """Each release's own check (`check_record`); with the study's `config`, `verify_tree`'s, which also checks
    its config hash, and the releases the config's study implies that the bundle lacks."""
    if config is None:
        return [f"{r.rel}: {p}" for r in releases
                for p in check_record(r.record, r.rel).problems + model_problems(bundle / r.rel, r.record)]
    checks, _ = verify_tree(bundle, None, config)
    problems = [f"{c.file}: {p}" for c in checks if c.problems != [MISSING] for p in c.problems]
    return problems + [f"{rel}: {MISSING}, the bundle lacks it (build it from the complete results tree)"
                       for rel in unbundled(statement, config)]


def rebuilt_problems(bundle: Path, releases: list[Release], statement: dict, config: dict | None = None) -> list[str]:
    """The tables, figures, PRIVACY.md and report.html rebuilt from the bundle's releases and statement:
    each file that differs (or is missing, or is extra) was not built from them. The tables' labels are
    the statement's `table_labels`, or with `config` that config's (`studies.config.table_labels`)."""
    labels = statement.get("table_labels", {}) if config is None else table_labels(config)
    with_recorded = copy.deepcopy(labels)
    _merge(with_recorded, recorded_labels(releases))
    if with_recorded != labels:  # tables rebuilt without them would pass, unlabelled
        return [f"{STATEMENT_JSON}: its table_labels lack labels the releases record (e.g. settings chosen on private "
                "data); tables built from them would drop those labels"]
    with tempfile.TemporaryDirectory() as tmp:
        again = Path(tmp)
        for r in releases:
            (again / r.rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bundle / r.rel, again / r.rel)
        tables = build_tables(again, releases, labels)
        write_text(again / STATEMENT, statement_markdown(statement))
        write_text(again / REPORT, report_html(again, statement, tables))
        made = {p.relative_to(again).as_posix(): p for p in [again / STATEMENT, again / REPORT]
                + sorted((again / "tables").glob("*")) + sorted((again / "figures").glob("*"))}
        held = {p.relative_to(bundle).as_posix() for folder in ("tables", "figures") for p in (bundle / folder).glob("*")}
        problems = [f"{rel}: not a table or figure of the bundle's releases" for rel in sorted(held - set(made))]
        for rel, path in made.items():
            if not (bundle / rel).is_file():
                problems.append(f"{rel}: missing: the bundle's releases give it (build the bundle with `dphpo release`)")
            elif (bundle / rel).read_bytes() != path.read_bytes():
                problems.append(f"{rel}: not what the bundle's releases and {'the config' if config else STATEMENT_JSON} "
                                f"give (rebuilt here with {_versions()}): edited, built with another config's "
                                "design_notes or settings_sources, or by other versions")
    return problems


def _versions() -> str:
    return ", ".join(f"{name} {metadata.version(name)}" for name in ("dphpo", "matplotlib"))


def _verify_statement(bundle: Path, config_paths: list[str] | None) -> list[str]:
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp_accounting's per-order convergence chatter
    try:
        statement = read_json(bundle / STATEMENT_JSON)
        releases = find_releases(bundle)
        config = load_config(config_paths) if config_paths else None
        problems = _record_problems(bundle, releases, statement, config) + rebuilt_problems(bundle, releases, statement, config)
    except Exception as err:  # a damaged record or statement, a bad config: name it, never a traceback
        return [str(err)]
    for r in releases:
        if not r.dp and not statement.get("include_nonprivate"):
            problems.append(f"{r.rel}: a non-private release (ε = ∞) in a bundle built without --include-nonprivate")
    beside = {PurePosixPath(r.rel).parent for r in releases}
    models: dict[PurePosixPath, list[str]] = {}
    for model in sorted(p for name in MODEL_FILES for p in bundle.rglob(name)):
        rel = model.relative_to(bundle).as_posix()
        models.setdefault(PurePosixPath(rel).parent, []).append(rel)
        if PurePosixPath(rel).parent not in beside:  # a model is published with the release that accounts for it
            problems.append(f"{rel}: a model without its release (no result.json beside it states what it costs)")
    for folder, names in models.items():  # one release, one model: a second one is accounted by nothing
        if len(names) > 1:
            problems.append(f"{folder}: {len(names)} models ({', '.join(names)}) beside one release, which accounts for one")
    stated = {d["dataset"]: d for d in statement.get("datasets", [])}
    found = statements(releases, bool(statement.get("include_nonprivate")))
    for st in found:
        if why := st.mixed_adjacency():
            problems.append(f"{STATEMENT_JSON}: {why}")
        d = stated.get(st.dataset)
        if d is None:
            problems.append(f"{STATEMENT_JSON}: no statement for dataset {st.dataset}")
            continue
        files = {r["file"] for r in d["releases"]} | {r["file"] for r in d.get("nonprivate", [])}
        missing = sorted({r.rel for r in st.releases + st.references} - files)
        extra = sorted(files - {r.rel for r in st.releases + st.references})
        if missing or extra:
            problems.append(f"{STATEMENT_JSON}: {st.dataset}'s releases differ from the bundle's "
                            f"(unstated: {missing[:3]}, stated but absent: {extra[:3]})")
        composed = {"privacy": {"entries": st.entries()}, "total_delta": st.delta}
        eps, how = recompute(composed)
        try:
            claimed = float((d.get("composed") or {})["eps"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"{STATEMENT_JSON}: datasets.{st.dataset}.composed.eps: expected a number, got "
                            f"{(d.get('composed') or {}).get('eps')!r}")
            continue
        if eps is not None and (why := claim_problems(claimed, composed, eps, how)):
            problems.append(f"{STATEMENT_JSON}: {st.dataset}'s composed ε is not the releases' ({how}): {why[0]}")
        if st.bundle_is_infinite and d.get("bundle_eps") != "inf":  # PRIVACY.md: rebuilt from the statement
            problems.append(f"{STATEMENT_JSON}: the bundle holds non-private releases about {st.dataset}, or "
                            "releases on an extractor pretrained on it without noise, but does not state that "
                            "publishing it costs ε = ∞")
        elif where := _differs(st.to_dict(), d, f"datasets.{st.dataset}", skip={f"datasets.{st.dataset}.composed.eps"}):
            # the rest of what it states (δ, the truncation δ, each release's (ε, δ), what is public) as the releases give it
            problems.append(f"{STATEMENT_JSON}: {where}")
    for name in sorted(set(stated) - {st.dataset for st in statements(releases, True)}):
        problems.append(f"{STATEMENT_JSON}: states dataset {name}, which has no release in the bundle")
    return problems


def _differs(found: Any, stated: Any, where: str, skip: set[str] = frozenset()) -> str | None:
    """Where `stated` (a statement read back) first departs from `found` (recomputed from the releases), as
    'PATH states X, the releases give Y'; numbers agree to 1e-9 relative (JSON keeps floats exact; the margin
    is for another machine's accountant arithmetic), None when all agrees."""
    if where in skip:
        return None
    if isinstance(found, dict) and isinstance(stated, dict):
        for key in sorted(set(found) | set(stated)):
            if why := _differs(found.get(key), stated.get(key), f"{where}.{key}", skip):
                return why
        return None
    if isinstance(found, list) and isinstance(stated, list) and len(found) == len(stated):
        return next((why for i, (a, b) in enumerate(zip(found, stated)) if (why := _differs(a, b, f"{where}[{i}]", skip))), None)
    numbers = (int, float)
    if isinstance(found, numbers) and isinstance(stated, numbers) and not isinstance(found, bool) and not isinstance(stated, bool):
        same = math.isclose(found, stated, rel_tol=1e-9, abs_tol=1e-300)
    else:
        same = found == stated
    return None if same else f"{where} states {json.dumps(stated)[:80]}, the releases give {json.dumps(found)[:80]}"


def is_bundle(root: str | Path) -> bool:
    return (Path(root) / MANIFEST).is_file() and (Path(root) / STATEMENT_JSON).is_file()

