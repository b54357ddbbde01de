"""The provenance table of the paper target: where every number of its tables and figures comes from.

One row per (study, method, variant), each taken from the records themselves (their provenance block),
never from the path they were read from.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dphpo.hpo.selection import accounted
from dphpo.io import read_json
from dphpo.report.tables import Table, as_float, label_key, selection_label, stated_delta


def provenance_table(paths: Iterable[str]) -> Table:
    """One row per (study, method, variant): where its numbers come from and how they were accounted."""
    groups: dict[tuple, list[dict]] = {}
    for path in paths:
        record = read_json(path)
        where = record.get("provenance") or {}
        # a non-private reference has no variant
        variant = where.get("variant", "–") if record.get("private", True) else "–"
        key = (where.get("dataset", "?"), where.get("extractor", "?"), record.get("method", "?"), variant)
        groups.setdefault(key, []).append(record)
    rows = []
    for (d, e, m, v), results in sorted(groups.items()):
        prov = [r.get("provenance") or {} for r in results]
        cache = [pv.get("feature_cache") or {} for pv in prov]
        versions = prov[0].get("package_versions") or {}

        def distinct(values: Iterable[Any], n: int = 12) -> str:
            vals = sorted({str(x)[:n] for x in values if x is not None and x != ""}, key=label_key)
            return ", ".join(vals) or "–"

        rows.append(
            {
                "dataset": d,
                "extractor": e,
                "method": m,
                "variant": v,
                "results": len(results),
                "seeds": distinct((pv.get("seed") for pv in prov), 6),
                "target ε": distinct((as_float(r["target"]["eps"]) for r in results), 8),
                # an unaccounted search (the oracle: total ε = ∞) has no overrun to show, and no total δ of its own
                "max total ε − target": max(as_float(r["total_eps"]) - as_float(r["target"]["eps"]) for r in results) if all(accounted(r) for r in results) else None,
                "δ": distinct((f"{stated_delta(r):.3g}" for r in results if r.get("private", True)), 10),
                "accountant": distinct(
                    (((r.get("privacy") or {}).get("total", {}).get("accountant") if r.get("private", True) else "none (non-private)") for r in results),
                    40,
                ),
                "selection": distinct((selection_label(r.get("selection") or {}) for r in results), 60),
                "config sha256": distinct(pv.get("config_hash") for pv in prov),
                # keyed MACs (dphpo.privacy.randomness.NoiseScope.mac): a plain hash of private data is a
                # membership oracle; the key's holder can still check which data made a result
                "feature cache MAC": distinct(c.get("content_sha256_mac") for c in cache),
                "dataset MAC": distinct(c.get("dataset_checksum_mac") for c in cache),
                "extractor's private pre-training": distinct(
                    (_upstream_label(c.get("upstream_privacy")) for c in cache), 60
                ),
                "packages": ", ".join(f"{k} {versions.get(k)}" for k in ("dphpo", "torch", "timm", "snakemake") if versions.get(k)),
            }
        )
    cols = ["dataset", "extractor", "method", "variant", "results", "seeds", "target ε", "max total ε − target", "δ", "accountant", "selection", "config sha256", "feature cache MAC", "dataset MAC", "extractor's private pre-training", "packages"]
    caption = (
        "Provenance of every result file the paper tables and figures read, grouped by study, method and variant: the "
        "config hash (the variant's merged config), the keyed MACs of the feature cache's content and of the dataset "
        "(the plain checksums are a membership oracle; compare with the .h5 attributes' *_mac), the accountant of the reported totals, the selection rule and the package "
        "versions. 'max total ε − target' ≤ 0 means no private result exceeds its target ('–': a search not accounted, "
        "whose δ is each run's; sha256 and MAC prefixes shown). "
        "An extractor pre-trained with DP-SGD on other private data (Bu et al.) shows that data and its own (ε, δ)."
    )
    return Table(cols, rows, caption, ["each result.json holds the full provenance block and the privacy ledger of every release"])


def _upstream_label(upstream: dict | None) -> str:
    if not upstream:
        return "none"
    return f"{upstream['dataset']}: ε = {upstream['eps']:.4g}, δ = {upstream['delta']:g}"
