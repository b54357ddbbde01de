"""The audit report: one row per (budget, threat model), claimed ε beside its empirical lower bounds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dphpo.audit.run import AuditResult
from dphpo.io import write_json
from dphpo.report.tables import Table

COLUMNS = {
    "mechanism": "mechanism",
    "neighbours": "neighbours",
    "normalizer": "normalizer",
    "canary": "canary",
    "threat_model": "threat model",
    "claimed_eps": "claimed ε",
    "delta": "δ",
    "claimed_mu": "claimed μ",
    "steps": "steps",
    "runs": "runs",
    "eps_lower": "ε lower (CP)",
    "mu_lower": "μ lower",
    "eps_lower_gdp": "ε lower (GDP)",
    "achievable_eps": "achievable ε (CP)",
    "achievable_eps_gdp": "achievable ε (GDP)",
    "refutable_eps": "refutable ε (any attack)",
    "noise_scale": "σ / calibrated σ",
    "confidence": "confidence (family-wise)",
    "bounds_in_family": "bounds in family",
    "verdict": "verdict",
    "time_s": "time (s)",
}


VERDICTS = {
    "pass": "pass",
    "fail": "FAIL: lower bound above the claim",
    "inconclusive": "INCONCLUSIVE: the claim is at least the refutable ε; more runs could test it",
}


def audit_table(results: Sequence[AuditResult]) -> Table:
    rows = []
    for result in results:
        for row in result.rows:
            cells = {COLUMNS[k]: row[k] for k in COLUMNS if k in row}
            cells[COLUMNS["verdict"]] = VERDICTS[row.get("verdict", "pass" if row["pass"] else "fail")]
            rows.append(cells)
    data = results[0].provenance.get("data", "?") if results else "?"
    return Table(
        columns=list(COLUMNS.values()),
        rows=rows,
        caption=(
            "Empirical privacy audit of the linear-head trainer: each row trains `runs` runs (half in each of two "
            "neighbouring worlds) at the claimed (ε, δ), which is what one run spends, and bounds ε from below."
        ),
        notes=[
            f"Data: {data}, plus one all-zero feature column that only the gradient canary uses (its gradient is "
            "orthogonal to every other record's); the zero canary is an all-zero record (zero gradient).",
            "neighbours: add_remove (the workflow's adjacency) trains D and D plus the canary, one record more; "
            "replace_one swaps an all-zero record for the canary (same size). normalizer: public divides the noisy "
            "sum by the declared size |D| in both worlds, as the workflow's trainer does; private_count divides by "
            "each world's own record count, the old trainer, whose ÷N vs ÷(N + 1) leaks membership.",
            "ε lower (CP): assumption-free; the best threshold attack, chosen on half the runs and evaluated on "
            "the other half with Clopper–Pearson bounds on both error rates (Jagielski et al. 2020; Nasr et al. 2021).",
            "μ lower: from the same kind of test against the μ-GDP trade-off curve; ε lower (GDP) is its ε at δ, "
            "a lower bound for mechanisms whose privacy region is Gaussian (exact for full-batch DP-GD, "
            "approximate for DP-SGD; Nasr et al. 2023).",
            "achievable: what the optimal attack on the claimed mechanism can expect to certify with this many "
            "held-out runs (expected counts, best threshold).",
            "confidence (family-wise): the ε and μ bounds of every threat model audited for one claimed ε form "
            "one family of m = `bounds in family` bounds, each taken at level α/m (Bonferroni), so a correct "
            "mechanism fails any of them with probability at most α; k claimed ε are k such families.",
            "refutable ε (any attack): the largest ε the held-out runs can certify at all (a perfect attack, no "
            "error on any run); a claim at or above it (and, for an exact GDP claim, at or above the refutable μ) "
            "cannot fail, whatever the mechanism, so its verdict is inconclusive, never pass.",
            "σ / calibrated σ: 1 audits the mechanism as released; any other value (`--noise-scale`) audits "
            "another mechanism (below 1: deliberately broken).",
            "verdict: fail when a lower bound exceeds the claim (ε, or μ for an exact GDP claim); inconclusive "
            "when no outcome of this many runs could have refuted it.",
        ],
    )


def write_audit(results: Sequence[AuditResult], out: str | Path) -> list[Path]:
    """`out` (.md) plus the same stem as .csv and .json (every field, provenance included), atomically."""
    out = Path(out)
    md, csv_path, json_path = out.with_suffix(".md"), out.with_suffix(".csv"), out.with_suffix(".json")
    audit_table(results).write(md=md, csv_path=csv_path)
    write_json(json_path, {"audits": [r.to_dict() for r in results]})
    return [md, csv_path, json_path]
