"""Every table of Panda et al. from release records: the builders (what each table shows).

`build(config, name)` reads the files `dphpo.report.plan` names for the table and returns a `Table`
(Markdown, CSV, LaTeX, HTML). Tables compute nothing from private data: Table 5's accuracies on
shifted test sets come from its evaluation job's sealed record (dphpo.report.shift).

Every table states, per row, the total ε actually spent (max over seeds of `total_eps`, the search
included), whether the HPO cost is included, and the selection rule, all taken from the records.
The Panda et al. column repeats the paper's number (dphpo.report.published) where the row is the paper's
own setting (same dataset and extractor name as in config/paper.yaml); it is a reference, never an input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dphpo.io import read_json
from dphpo.report import specs
from dphpo.report.plan import (
    DEFAULT,
    LS,
    TABLES,
    Paper,
    Source,
    TablePlan,
    evaluation_path,
    plan_of,
)
from dphpo.report.published import SEED000, TABLE12, TABLE12_QUOTED, TABLE16_PRIOR
from dphpo.report.tables import (
    Table,
    apply_design_notes,
    as_float,
    hpo_cost,
    mean_std,
    overrun_notes,
    pct,
    read_record,
    rerr,
    selection_label,
)

#: Each paper table's title, the first sentence of its printed caption: from its spec (dphpo.report.specs).
TABLE_TITLES = {name: specs.title(name) for name in TABLES}


# --------------------------------------------------------------------------------------------
# Reading results


class Results:
    """result.json files, read once each."""

    def __init__(self) -> None:
        self._cache: dict[str, dict] = {}

    def get(self, path: str) -> dict:
        if path not in self._cache:
            self._cache[path] = read_record(path)
        return self._cache[path]

    def many(self, src: Source) -> list[dict]:
        return [self.get(f) for f in src.files] if src.ok else []

    def read(self) -> list[dict]:
        """Every record read so far."""
        return list(self._cache.values())


@dataclass
class Summary:
    """Seeds of one (method, study, variant, target ε) summarized."""

    n: int
    mean: float
    std: float
    total_eps: float  # max over seeds
    target: float
    hpo: str  # "included", "NOT included (oracle)", "none (non-private)"
    selection: str
    accountant: str
    results: list[dict]

    @property
    def acc(self) -> str:
        return pct(self.mean, self.std, self.n)


def test_fraction(record: dict) -> float:
    """A record's test score as a fraction: its accuracy, or a language study's SQuAD F1 (released in %) / 100."""
    if record.get("test_accuracy") is not None or record.get("metric", "accuracy") == "accuracy":
        return as_float(record["test_accuracy"])
    if record.get("metric") == "f1":
        return as_float(record["test_metric"]) / 100.0
    raise ValueError(f"metric {record.get('metric')!r} has no percentage to tabulate here")


def summarize(results: Sequence[dict]) -> Summary | None:
    if not results:
        return None
    mean, std = mean_std([test_fraction(r) for r in results])
    first = results[0]
    sel = first.get("selection") or {}
    accountants = sorted({str((r.get("privacy") or {}).get("total", {}).get("accountant", "")) for r in results})
    return Summary(
        n=len(results),
        mean=mean,
        std=std,
        total_eps=max(as_float(r["total_eps"]) for r in results),
        target=as_float(first["target"]["eps"]),
        hpo=hpo_cost(results, "none (non-private, ε = ∞)"),
        selection=selection_label(sel),
        accountant=", ".join(a for a in accountants if a) or "–",
        results=list(results),
    )


def points(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 2)


# --------------------------------------------------------------------------------------------
# The tables


def _ours_cols(prefix: str = "") -> list[str]:
    return [f"{prefix}total ε (incl. search)", f"{prefix}HPO cost", f"{prefix}selection"]


#: The target ε of Panda et al.'s Tables 2, 3, 4 and 13: their numbers stand beside rows at that ε only.
PANDA_EPS = 1.0
#: Table 2's studies per block (Koskela & Kulkarni's ResNet20 on CIFAR100; no public data: a WRN on synthetic images).
TABLE2_STUDIES = {"public": ("cifar10", "resnet20_cifar100"), "no_public": ("cifar10", "wrn16_4_synthetic")}


def build_table2(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["run"]))
        paper_study = (rp.key["dataset"], rp.key["extractor"]) == TABLE2_STUDIES.get(rp.key["_block"])
        ref = SEED000["table2"].get((rp.key["_block"], rp.key["_method"])) if p.eps == PANDA_EPS and paper_study else None
        rows.append(
            {**rp.key, "target ε": p.eps, **_summary_cells(s), "Panda et al. (%)": ref}
        )
    cols = ["setting", "dataset", "extractor", "method", "target ε", "total ε (incl. search)", "HPO cost", "seeds", "test accuracy (%)", "selection", "Panda et al. (%)"]
    caption = (
        f"Panda et al. Table 2 at target ε = {p.eps:g} ({_delta(p, res)}): linear probing with a feature extractor pretrained "
        "on public data (Koskela & Kulkarni, Papernot & Steinke, ours) and without public data (random search, the "
        "grid-search oracle, ours). 'total ε (incl. search)' is the ε of every release composed (max over seeds); the "
        "oracle's is ∞: it selects on test data, which no ε covers."
    )
    return Table(cols, rows, caption, _notes(plan))


def build_table3(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows, oracles = [], []
    for rp in plan.rows:
        r, o, s = (summarize(res.many(rp.sources[k])) for k in ("random", "oracle", "ours"))
        oracles.append(o)
        # RERR only for a search whose cost is in its ε (as the comparison table): an oracle of ours has none
        value = rerr(s.mean, (r.mean, r.std, r.n), (o.mean, o.std, o.n)) if r and o and s and s.hpo == "included" else None
        reduction = None if value is None else round(100.0 * value, 2)
        language = rp.key.get("_language")
        ref = SEED000["table3"].get(("language", rp.key.get("_paper_ref")) if language else (rp.key["dataset"], rp.key["extractor"])) \
            if p.eps == PANDA_EPS else None
        rows.append(
            {
                **rp.key,
                "metric": "F1" if language else "accuracy",
                "target ε": p.eps,
                "total ε ours (incl. search)": s.total_eps if s else None,
                "total ε random search": r.total_eps if r else None,
                "random search (%)": r.acc if r else None,
                "oracle (%)": o.acc if o else None,
                "ours (%)": s.acc if s else None,
                "RERR (%)": reduction,
                "selection (ours)": s.selection if s else None,
                "seeds": s.n if s else None,
                "Panda et al. R / O / ours / RERR": " / ".join(f"{v:g}" for v in ref) if ref else None,
            }
        )
    cols = [c for c in rows[0] if not c.startswith("_")] if rows else ["dataset", "extractor"]
    caption = (
        f"Panda et al. Table 3 at target ε = {p.eps:g} ({_delta(p, res)}): random search (one run at the full budget, "
        "accounted), the grid-search oracle (every grid point at the full budget, best on TEST — HPO cost NOT "
        "included, an upper reference) and ours (search included in the total). RERR = (ours − random) / "
        "(oracle − random) × 100, on the means over seeds. Language rows (SQuAD: OPT with DP-SGD + LoRA, "
        "Malladi et al. 2024's setting) report test F1 (%) of greedy generations, SQuAD v2's official metric."
    )
    return Table(cols, rows, caption, _notes(plan) + _oracle_note(p, oracles))


def build_table4(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        ref = SEED000["table4"].get((rp.key["model"], rp.key["dataset"])) if p.eps == PANDA_EPS else None
        rows.append(
            {
                **rp.key,
                "target ε": p.eps,
                **_summary_cells(s, acc_col=f"ε = {p.eps:g} (%)"),
                **_reference_cells(s, res.many(rp.sources["ref"])),
                "Panda et al. ε = 1 / ∞": " / ".join(f"{v:g}" for v in ref) if ref else None,
            }
        )
    cols = ["model", "dataset", "target ε", "total ε (incl. search)", "HPO cost", "seeds", f"ε = {p.eps:g} (%)", "ε = ∞ (%)", "gap (points)", "selection", "Panda et al. ε = 1 / ∞"]
    caption = (
        f"Panda et al. Table 4: every extractor × dataset, linear scaling at target ε = {p.eps:g} ({_delta(p, res)}) with the "
        "search included in the total, against the non-private reference (σ = 0, best grid point on TEST: a ceiling, "
        "not a DP result). Gap = ε = ∞ minus the private mean."
    )
    return Table(cols, rows, caption, _notes(plan))


def build_table5(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    evaluated = {_shift_key(r["train"], r["test"], r["extractor"]): r for r in read_json(evaluation_path("table5"))["rows"]}
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        refs = res.many(rp.sources["ref"])
        ood, ref_ood, dropped = None, None, None
        shifted = evaluated.get(_shift_key(rp.key["_train"], rp.key["_test"], rp.key["extractor"]))
        if shifted is not None:
            dropped = shifted["test_classes_dropped"]
            if s:
                ood = pct(*mean_std(shifted["accuracy"]), len(shifted["accuracy"]))
            if refs:
                ref_ood = f"{100 * shifted['reference_accuracy']:.2f}"
        ref = SEED000["table5"].get((rp.key["_train"], rp.key["_test"], rp.key["extractor"]))
        rows.append(
            {
                **rp.key,
                "target ε": p.eps,
                "total ε (incl. search)": s.total_eps if s else None,
                "HPO cost": s.hpo if s else None,
                "ID accuracy (%)": s.acc if s else None,
                "OOD accuracy (%)": ood,
                "non-private ID / OOD (%)": None if not refs else f"{100 * refs[0]['test_accuracy']:.2f} / {ref_ood}",
                "OOD metric": shifted.get("metric", "accuracy") if shifted else rp.key.get("_metric"),
                "test classes dropped": dropped,
                "selection": s.selection if s else None,
                "Panda et al. ID / OOD": " / ".join(f"{v:g}" for v in ref) if ref else None,
            }
        )
    cols = ["train → test", "extractor", "target ε", "total ε (incl. search)", "HPO cost", "ID accuracy (%)", "OOD accuracy (%)", "OOD metric", "non-private ID / OOD (%)", "test classes dropped", "selection", "Panda et al. ID / OOD"]
    caption = (
        f"Panda et al. Table 5 (distribution shift): the released linear-scaling heads at target ε = {p.eps:g} "
        "(search included), trained on the first dataset and applied unchanged (zero-shot) to the second's test "
        "split, labels remapped as configured (CIFAR10 → STL10: STL10's 'monkey' has no CIFAR10 class and is dropped; "
        "CIFAR10's 'frog' never appears). The OOD evaluation reads no training data: it costs no privacy."
    )
    return Table(cols, rows, caption, _notes(plan))


def build_table10(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["run"]))
        conf = s.results[0]["search"].get("config", {}) if s else {}
        rows.append(
            {
                **rp.key,
                "stage budgets": None if not s else ", ".join(f"{x:g}" for x in s.results[0]["search"]["stage_budgets_eps"]),
                "trials per stage": conf.get("n_trials"),
                "degree": conf.get("degree"),
                "target ε": p.eps,
                **_summary_cells(s, acc_col="accuracy (%)"),
                "Panda et al. (ImageNet, %)": SEED000["table10"].get(rp.key["method"]) if rp.key.get("dataset") == "imagenet" else None,
            }
        )
    cols = ["method", "variant", "stage budgets", "trials per stage", "degree", "target ε", "total ε (incl. search)", "HPO cost", "seeds", "accuracy (%)", "selection", "Panda et al. (ImageNet, %)"]
    caption = (
        f"Panda et al. Table 10 at target ε = {p.eps:g}: the linear scaling rule with two stages and a line (the method), "
        "three stages and a line, three stages and a parabola. Every stage trial and selection release is in the total."
    )
    return Table(cols, rows, caption, _notes(plan))


def _eps_row(p: Paper, rp, res: Results) -> tuple[dict, Summary | None]:
    """The cells Table 12 and Fig. 2 share: ours and Mehta et al. (2023b) run here at one ε, or the
    non-private reference on the ε = ∞ row."""
    if "ref" in rp.sources:
        refs = res.many(rp.sources["ref"])
        return {**rp.key, "ours (%)": points(refs[0]["test_accuracy"]) if refs else None,
                "HPO cost": "none (non-private, ε = ∞)" if refs else None}, None
    s, m = (summarize(res.many(rp.sources[k])) for k in ("ours", "mehta"))
    search = (s.results[0].get("search") or {}).get("config") or {} if s else {}
    return {
        **rp.key,
        "target ε": rp.key.get("_eps"),
        "ours (%)": s.acc if s else None,
        "ours r = η·T": round(float(np.mean([r["released"]["r"] for r in s.results])), 4) if s else None,
        "total ε ours (incl. search)": s.total_eps if s else None,
        "search": None if not s else (
            "shared by all targets (budget_mode absolute)" if search.get("budget_mode") == "absolute" else "one per target (budget_mode fraction)"
        ),
        "HPO cost": s.hpo if s else None,
        "Mehta et al. 2023b, run here (%)": m.acc if m else None,
        "total ε Mehta (run here)": m.total_eps if m else None,
        "selection": s.selection if s else None,
        "seeds": s.n if s else None,
    }, s


def build_table12(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        row, _ = _eps_row(p, rp, res)
        eps = rp.key.get("_eps")
        for name, quoted in TABLE12_QUOTED.items():
            row[f"{name} (%), quoted"] = quoted.get(eps) if rp.key.get("dataset") == "imagenet" else None
        ref = TABLE12.get(eps) if rp.key.get("dataset") == "imagenet" else None
        row["Panda et al. ours / r"] = f"{ref[0]:g} / {ref[1]:g}" if ref else None
        rows.append(row)
    cols = ["ε", "dataset", "extractor", "target ε", "ours (%)", "ours r = η·T", "total ε ours (incl. search)", "HPO cost",
            "Mehta et al. 2023b, run here (%)", "total ε Mehta (run here)", *[f"{n} (%), quoted" for n in TABLE12_QUOTED],
            "selection", "seeds", "Panda et al. ours / r"]
    caption = (
        f"Panda et al. Table 12{_study_of(plan)} ({_delta(p, res)}): the linear scaling rule at each target ε (search included in its total) "
        "against Mehta et al. (2023b)'s single full-batch DP-Adam step, run here on the same features (method `mehta`, "
        "its hyperparameters fixed a priori, accounted at the same target), and the ε = ∞ non-private reference (best "
        "grid point on TEST: a ceiling). The Mehta et al. 2023a/2023b columns are QUOTED from Panda et al. Table 12, not "
        "reproduced: their ViTs were pretrained on the closed JFT data and the privacy cost of their hyperparameter "
        "search is not reported."
    )
    return Table(cols, rows, caption, _notes(plan))


def build_figure2(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = [_eps_row(p, rp, res)[0] for rp in plan.rows]
    cols = ["ε", "dataset", "extractor", "variant", "target ε", "ours (%)", "ours r = η·T", "total ε ours (incl. search)",
            "search", "HPO cost", "Mehta et al. 2023b, run here (%)", "total ε Mehta (run here)", "selection", "seeds"]
    caption = (
        f"Panda et al. Figure 2, tabulated{_study_of(plan)} ({_delta(p, res)}): accuracy against target ε of the linear scaling rule (search "
        "included in every total) and of Mehta et al. (2023b) run here on the same features; the last row is the "
        "non-private reference (ε = ∞). Panda et al. pay for one search (stages at ε = 0.1 and 0.2) and reuse it for "
        "every ε ∈ [0.5, 8]; the column 'search' says, from the records, whether these runs shared one search "
        "(linear_scaling.budget_mode absolute) or paid one per target (fraction: a stricter accounting)."
    )
    return Table(cols, rows, caption, _notes(plan))


def read_benchmark(path: str) -> dict[str, float]:
    """A Snakemake benchmark TSV: the mean of each numeric column over its repeats."""
    lines = [ln.rstrip("\n").split("\t") for ln in Path(path).read_text().splitlines() if ln.strip()]
    header, values = lines[0], lines[1:]
    out = {}
    for i, col in enumerate(header):
        nums = []
        for v in values:
            try:
                nums.append(float(v[i]))
            except (ValueError, IndexError):
                pass
        if nums:
            out[col] = float(np.mean(nums))
    return out


def build_table11(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    base_hours = None
    for rp in plan.rows:
        row, device_h = _table11_row(p, rp, res)
        rows.append(row)
        if device_h is not None and rp.key["_method"] == "random_search":
            base_hours = device_h
    for row in rows:
        if base_hours and row.get("device hours per seed") is not None:
            row["relative to random search"] = round(row["device hours per seed"] / base_hours, 2)
    cols = ["method", "dataset", "extractor", "target ε", "jobs per seed", "trained runs per target", "sequential rounds", "trial-steps per target", "device hours per seed", "wall-clock hours per seed (critical path)", "relative to random search", "total ε (incl. search)", "HPO cost", "selection", "Panda et al. GPU h / wall h"]
    caption = (
        "Panda et al. Table 11: compute of each method. Panda et al. count one hour per trial: runs per target (random 1, grid "
        "100, ours 7) are its GPU hours and sequential rounds (1, 1, 3) its wall-clock; both are columns here. Measured: "
        "the `s` column of the Snakemake benchmark file of every job (one job trains all targets' trials of a stage at "
        "once, batched). Device hours = the sum over the method's jobs "
        "for one seed (GPU hours on a GPU, CPU hours here if no GPU); wall-clock = the sum along the chain of dependent "
        f"jobs (stage 1 → stage 2 → final for ours). Target ε = {p.eps:g}; trained runs per target from the result file."
    )
    notes = _notes(plan) + [
        "The grid-search oracle trains every grid point in one batched job; with one GPU per grid point (Panda et al.'s "
        "setting) its wall-clock would be that of its longest single point.",
    ]
    return Table(cols, rows, caption, notes)


def _table11_row(p: Paper, rp, res: Results) -> tuple[dict, float | None]:
    """One method's row of Table 11 and its device hours per seed (None: no results or benchmarks yet)."""
    m = rp.key["_method"]
    s = summarize(res.many(rp.sources["run"]))
    bench = rp.sources.get("bench")
    if not (s and bench and bench.ok):
        return {**rp.key, "target ε": p.eps}, None
    per_seed = len(bench.files) // max(1, len(p.seeds))
    seconds = [read_benchmark(f).get("s", float("nan")) for f in bench.files]
    by_seed = [seconds[i * per_seed : (i + 1) * per_seed] for i in range(len(p.seeds))]
    device_h = float(np.mean([sum(x) for x in by_seed])) / 3600.0
    # The jobs of one seed form a chain (linear scaling: stage k needs stage k−1, the final job
    # every stage; a baseline is a single job), so the critical path is their sum as well.
    wall_h = device_h
    runs, steps = _trained_per_target(s.results, final_run=m == LS)
    ref = SEED000["table11"].get(m)
    row = {
        **rp.key,
        "target ε": p.eps,
        "jobs per seed": per_seed,
        "trained runs per target": round(float(np.mean(runs)), 2),
        "sequential rounds": p.n_stages(DEFAULT) + 1 if m == LS else 1,
        "trial-steps per target": None if np.isnan(np.mean(steps)) else int(np.mean(steps)),
        "device hours per seed": round(device_h, 5),
        "wall-clock hours per seed (critical path)": round(wall_h, 5),
        "total ε (incl. search)": s.total_eps,
        "HPO cost": s.hpo,
        "selection": s.selection,
        "Panda et al. GPU h / wall h": f"{ref[0]} / {ref[1]}" if ref else None,
    }
    return row, device_h


def _trained_per_target(results: Sequence[dict], final_run: bool) -> tuple[list[float], list[float]]:
    """Per result: the runs it trained (its trials, plus the final run of the linear scaling rule) and
    their steps. Papernot–Steinke and Koskela release the best trial only: how many they trained (K) is
    secret, so a result of theirs counts the planned E[K] and no trial-steps (the internal log has the
    real counts)."""
    runs = [
        len(r.get("trials", [])) + (1 if final_run else 0)
        if r.get("trials_released", "all") == "all"
        else float(r["search"].get("mean_trials", float("nan")))
        for r in results
    ]
    steps = [
        sum(int(t.get("steps", 0)) for t in r.get("trials", [])) + (int(r["released"].get("steps", 0)) if final_run else 0)
        if r.get("trials_released", "all") == "all"
        else float("nan")
        for r in results
    ]
    return runs, steps


def build_table13(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows, oracles = [], []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["run"]))
        if rp.key["variant"] == "–":
            oracles.append(s)
        e1 = e2 = ef = None
        if s and s.results[0]["method"] == LS:
            budgets = s.results[0]["search"]["stage_budgets_eps"]
            e1, e2 = budgets[0], budgets[1]
            ef = float(np.mean([r["released"]["standalone_eps"] for r in s.results]))
        elif s:
            ef = float(np.mean([as_float(r["released"].get("standalone_eps", r["target"]["eps"])) for r in s.results]))
        key = (None, None) if rp.key["variant"] == "–" else (_round(e1), _round(e2))
        ref = SEED000["table13"].get(key) if p.eps == PANDA_EPS and _paper_setting(p, "table13", dataset="cifar10", extractor="beitv2") else None
        rows.append(
            {
                **rp.key,
                "ε1": e1,
                "ε2": e2,
                "ε_f (final run alone)": ef,
                "target ε": p.eps,
                "total ε (incl. search)": s.total_eps if s else None,
                "HPO cost": s.hpo if s else None,
                "accuracy (%)": points(s.mean) if s else None,
                "std": points(s.std) if s and s.n > 1 else None,  # one seed has no spread to show
                "seeds": s.n if s else None,
                "selection": s.selection if s else None,
                "Panda et al. ε_f / acc": f"{ref[0]:g} / {ref[1]:g}" if ref else None,
            }
        )
    cols = ["method", "variant", "ε1", "ε2", "ε_f (final run alone)", "target ε", "total ε (incl. search)", "HPO cost", "accuracy (%)", "std", "seeds", "selection", "Panda et al. ε_f / acc"]
    caption = (
        f"Panda et al. Table 13 at target ε = {p.eps:g} ({_delta(p, res)}): the marginal cost of the search. The first row is "
        "the grid-search oracle (HPO cost not included); each further row spends n trials at ε1 and n at ε2 (standalone "
        "ε of each trial) plus the selection releases, and the final run gets ε_f, so that the total is the target."
    )
    return Table(cols, rows, caption, _notes(plan) + _oracle_note(p, oracles))


def build_table14(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        src = summarize(res.many(rp.sources.get("source", Source(need="-"))))
        run = summarize(res.many(rp.sources["run"]))
        reduced = [(r.get("search") or {}).get("reduced") or {} for r in (run.results if run else [])]
        rates = sorted({x["sample_rate"] for x in reduced if x.get("sample_rate") is not None})
        sigmas = [r["released"]["sigma"] for r in (run.results if run else [])]
        ref = SEED000["table14"].get(reduced[0].get("how") if reduced else None) or SEED000["table14"].get(
            {"Increasing noise": "noise", "Subsampling": "subsample"}.get(rp.key["method to reduce ε"], ""))
        rows.append(
            {
                **rp.key,
                "from ε": rp.key.get("_from_eps"),
                "target ε": rp.key.get("_eps"),
                "at from ε (%)": src.acc if src else None,
                "reduced (%)": run.acc if run else None,
                "degradation (points)": None if not (src and run) else round(100.0 * (src.mean - run.mean), 2),
                "sample rate q": " / ".join(f"{q:.4g}" for q in rates) or ("1 (full batch)" if run else None),
                "σ (mean)": None if not sigmas else round(float(np.mean(sigmas)), 4),
                "total ε (incl. search)": run.total_eps if run else None,
                "accountant": run.accountant if run else None,
                "HPO cost": run.hpo if run else None,
                "selection": run.selection if run else None,
                "seeds": run.n if run else None,
                "Panda et al. acc / degradation": f"{ref[0]:g} / {ref[1]:g}" if ref else None,
            }
        )
    cols = ["method to reduce ε", "variant", "dataset", "extractor", "from ε", "target ε", "at from ε (%)", "reduced (%)",
            "degradation (points)", "sample rate q", "σ (mean)", "total ε (incl. search)", "accountant", "HPO cost", "selection",
            "seeds", "Panda et al. acc / degradation"]
    caption = (
        f"Panda et al. Table 14 ({_delta(p, res)}): the linear scaling result at the higher ε, and its final run redone at the "
        "lower target two ways — full batch with the same η and T and σ raised ('noise'), or the same η, T and σ on "
        "Poisson subsamples of expected size B = q·N_pub, q the largest rate whose amplified accounting meets the target "
        "('subsample'; N_pub the declared public size). Either way the whole search of the source result is charged "
        "again, so each total includes it. Panda et al.'s numbers are on ImageNet."
    )
    return Table(cols, rows, caption, _notes(plan))


def build_table15(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        b = summarize(res.many(rp.sources.get("baseline_run", Source(need="-"))))
        ref = SEED000["table15"].get(rp.key["variant"]) if _paper_setting(p, "table15", dataset="cifar100", eps=0.1) else None
        rows.append(
            {
                **rp.key,
                "target ε": rp.key.get("_eps"),
                "baseline accuracy (%)": b.acc if b else None,
                "ours (%)": s.acc if s else None,
                "improvement (points)": None if not (s and b) else round(100.0 * (s.mean - b.mean), 2),
                "total ε baseline": b.total_eps if b else None,
                "total ε ours": s.total_eps if s else None,
                "accountant baseline / ours": None if not (s and b) else f"{b.accountant} / {s.accountant}",
                "HPO cost": s.hpo if s else None,
                "selection": s.selection if s else None,
                "Panda et al. baseline / improvement": f"{ref[0]:g} / +{ref[1]:g}" if ref else None,
            }
        )
    eps = plan.rows[0].key.get("_eps") if plan.rows else None
    cols = ["design choice", "baseline", "variant", "target ε", "baseline accuracy (%)", "ours (%)", "improvement (points)", "total ε baseline", "total ε ours", "accountant baseline / ours", "HPO cost", "selection", "Panda et al. baseline / improvement"]
    caption = (
        f"Panda et al. Table 15: each design choice of the method against the alternative prior work used, at target ε = "
        f"{'–' if eps is None else f'{eps:g}'} ({_delta(p, res)}). Both columns run the whole linear scaling rule (search "
        "included in each total); the baseline changes one thing (a variant). Minibatch and RDP-accounting runs are "
        "calibrated and accounted with RDP (accountant 'rdp'); the rest compose exactly in GDP."
    )
    return Table(cols, rows, caption, _notes(plan))


def build_table16(p: Paper, plan: TablePlan, res: Results) -> Table:
    """One row per (dataset, extractor) study of paper.table16 (its Panda et al. numbers beside it where that
    study is the paper's), then Panda et al.'s prior-work rows for those datasets, quoted. The quoted Mehta et
    al. row is 2023a; the `mehta` baseline run here is 2023b (dphpo.hpo.mehta, Table 12), another method, so it
    is neither shown as that row nor added as one."""
    rows = []
    eps_list = plan.rows[0].key.get("_eps", [0.1, 1.0]) if plan.rows else [0.1, 1.0]
    for rp in plan.rows:
        row = dict(rp.key)
        sums = {x: summarize(res.many(rp.sources.get(f"eps{x:g}", Source(need="-")))) for x in eps_list}
        for x, s in sums.items():
            row[f"ε = {x:g} (%)"] = s.acc if s else None
        refs = res.many(rp.sources["ref"])
        ref_acc = refs[0]["test_accuracy"] if refs else None
        row["ε = ∞ (%)"] = points(ref_acc)
        last = sums.get(max(eps_list)) if eps_list else None
        row[f"gap ({max(eps_list):g} − ∞)" if eps_list else "gap"] = None if not (last and ref_acc is not None) else round(100.0 * (ref_acc - last.mean), 2)
        row["total ε (incl. search)"] = " / ".join("–" if s is None else "∞" if math.isinf(s.total_eps) else f"{s.total_eps:.4g}" for s in sums.values())
        row["HPO cost"] = next((s.hpo for s in sums.values() if s), None)
        row["selection"] = next((s.selection for s in sums.values() if s), None)
        ref = SEED000["table16"].get((rp.key["dataset"], rp.key.get("extractor")))
        row["source"] = "this run" + (f" (Panda et al.: {' / '.join(f'{v:g}' for v in ref)})" if ref else "")
        rows.append(row)
    datasets = {rp.key["dataset"] for rp in plan.rows}
    for name, d, a01, a1, ainf in TABLE16_PRIOR:
        if d in datasets:
            rows.append({"method": name, "dataset": d, "ε = 0.1 (%)": a01, "ε = 1 (%)": a1, "ε = ∞ (%)": ainf, "HPO cost": "not reported", "source": "quoted from Panda et al. Table 16, not reproduced"})
    gap_col = f"gap ({max(eps_list):g} − ∞)"
    cols = ["method", "dataset", "extractor", *[f"ε = {x:g} (%)" for x in eps_list], "ε = ∞ (%)", gap_col, "total ε (incl. search)", "HPO cost", "selection", "source"]
    caption = (
        "Panda et al. Table 16: our method at each listed target ε (search included in the total) and without privacy "
        "(ε = ∞, best grid point on TEST: a ceiling). Prior-work rows, when the dataset matches, are quoted from the "
        "paper (they do not report the privacy cost of their hyperparameter search)."
    )
    notes = _notes(plan)
    if not any(d in datasets for _, d, *_ in TABLE16_PRIOR):
        notes.append("Panda et al.'s prior-work rows (Mehta 2023a, Bu 2022a, Cattan 2022, De 2022) are for cifar10/cifar100 only; none match these datasets")
    return Table(cols, rows, caption, notes)


def build_dp_continual(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        pre = read_json(rp.sources["pretrained"].files[0]) if rp.sources["pretrained"].ok else None
        stage = (pre or {}).get("private_stage")
        switch = (pre or {}).get("switch") or {}
        rows.append(
            {
                **rp.key,
                "public stage": None if pre is None else (
                    f"{pre['public_dataset']['name']}, epoch {switch.get('epoch', '?')} of {switch.get('epochs_run', '?')} "
                    f"({switch.get('rule', 'fixed')})"
                ),
                "private pre-training": "none (public only)" if pre is not None and not stage else None if stage is None else (
                    f"{stage['dataset']['name']}: {stage['plan']['steps']} DP-SGD steps, q = {stage['plan']['sample_rate']:.3g}, "
                    f"σ = {stage['plan']['sigma']:.3g}"
                ),
                "pre-training ε (its data)": None if not stage else round(stage["guarantee"]["eps"], 4),
                "pre-training δ": None if not stage else stage["guarantee"]["delta"],
                "target ε": p.eps,
                **_summary_cells(s, acc_col=f"ε = {p.eps:g} (%)"),
                **_reference_cells(s, res.many(rp.sources["ref"])),
            }
        )
    cols = ["dataset", "extractor", "public stage", "private pre-training", "pre-training ε (its data)", "pre-training δ",
            "target ε", "total ε (incl. search)", "HPO cost", "seeds", f"ε = {p.eps:g} (%)", "ε = ∞ (%)", "gap (points)",
            "selection"]
    caption = (
        f"Seed 003 (Bu et al.: pre-training DP models with limited public data) in front of Panda et al.'s method: the "
        "extractor is pretrained on public data (the switch to the private stage chosen from public statistics only) "
        "and, where configured, pre-trained further with DP-SGD on *another* private dataset, then linear scaling runs "
        f"on the study's data at target ε = {p.eps:g} ({_delta(p, res)}, search included). Two guarantees for two "
        "datasets: 'pre-training ε' is w.r.t. the pre-training data (prv-accountant upper bound), 'total ε' w.r.t. the "
        "study's data; a study on the pre-training data itself is refused by the config check."
    )
    return Table(cols, rows, caption, _notes(plan))


#: Each paper table's builder, named by its spec's `builder` (dphpo.report.specs).
BUILDERS = {name: specs.resolve(specs.get(name).builder, globals()) for name in TABLES}


def build(config: dict, name: str, method_jobs: Iterable[Sequence[str]] | None = None) -> Table:
    """One table; `method_jobs` as for `Paper` (the workflow passes them: no torch import)."""
    spec = specs.get(name, "paper")
    p = Paper(config, method_jobs)
    tp = plan_of(p, name)
    table = specs.resolve(spec.builder, globals())(p, tp, Results())
    table.caption = f"{spec.title}. {table.caption}"
    table.notes = overrun_notes(table.rows) + table.notes
    return apply_design_notes(table, config)


def write(
    config: dict,
    name: str,
    md: str,
    csv_path: str,
    tex: str,
    html_path: str | None = None,
    method_jobs: Iterable[Sequence[str]] | None = None,
) -> Table:
    table = build(config, name, method_jobs)
    table.write(md=md, csv_path=csv_path, tex=tex, html_path=html_path)
    return table


# --------------------------------------------------------------------------------------------
# Helpers


def _summary_cells(s: Summary | None, acc_col: str = "test accuracy (%)") -> dict[str, Any]:
    return {
        "total ε (incl. search)": s.total_eps if s else None,
        "HPO cost": s.hpo if s else None,
        "seeds": s.n if s else None,
        acc_col: s.acc if s else None,
        "selection": s.selection if s else None,
    }


def _reference_cells(s: Summary | None, refs: Sequence[dict]) -> dict[str, Any]:
    """The non-private reference (ε = ∞) and its gap to the private mean, in points."""
    ref_acc = refs[0]["test_accuracy"] if refs else None
    gap = None if (s is None or ref_acc is None) else round(100.0 * (ref_acc - s.mean), 2)
    return {"ε = ∞ (%)": points(ref_acc), "gap (points)": gap}


def _paper_setting(p: Paper, table: str, **setting: Any) -> bool:
    """Whether a one-study table's config section names the paper's own setting (its Panda et al. column
    is shown only then: the paper's numbers beside another dataset would read as a comparison)."""
    section = p.section.get(table) or {}
    return all(section.get(key) == value for key, value in setting.items())


def _study_of(tp: TablePlan) -> str:
    """' on <dataset> × <extractor>' of a one-study table (Table 12, Fig. 2); empty while the section is missing."""
    row = next((r.key for r in tp.rows if "dataset" in r.key), None)
    return f" on {row['dataset']} × {row['extractor']}" if row else ""


def _notes(tp: TablePlan) -> list[str]:
    notes = [f"needs: {n}" for n in tp.all_needs()]
    notes.append("accuracies: mean ± std over seeds; 'total ε' is the max over seeds; every accounted total is at most its "
                 "target ε (∞: a search selected on test data or exact training scores, which no ε covers)")
    return notes


def _oracle_note(p: Paper, oracles: Iterable[Summary | None]) -> list[str]:
    """The oracle is the best point of *its* grid: say how large that grid was."""
    sizes = sorted({len(s.results[0].get("trials", [])) for s in oracles if s})
    if not sizes:
        return []
    return [
        f"oracle: best on TEST of {'/'.join(map(str, sizes))} grid points (variant '{p.grid_variant}', key baselines.grid); "
        "ours searches the whole search space, so it can beat an oracle whose grid is coarser (RERR > 100 %)"
    ]


def _delta(p: Paper, res: Results) -> str:
    """The δ a caption states: the total δ of the DP records the table read (`privacy.delta`, a variant's own, or
    a language study's 1/(2N)), each with the studies at it where they differ; `privacy.delta` before any is read."""
    at: dict[float, set[str]] = {}
    for r in res.read():
        if r.get("total_delta") is not None and math.isfinite(as_float(r.get("total_eps", math.inf))):  # an ε = ∞ record states no δ
            prov = r.get("provenance") or {}
            at.setdefault(as_float(r["total_delta"]), set()).add(str(prov.get("study") or prov.get("dataset") or "?"))
    if len(at) <= 1:
        return f"δ = {next(iter(at), p.delta):g}"
    return "δ = " + ", ".join(f"{d:g} ({', '.join(sorted(names))})" for d, names in sorted(at.items()))


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def _shift_key(train: str, test: str, extractor: str) -> tuple[str, str, str]:
    return (str(train), str(test), str(extractor))
