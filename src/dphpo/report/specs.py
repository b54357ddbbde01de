"""Every table the workflow writes, one spec each: `TABLES` is the one registry.

A `TableSpec` says what a table is called (its title: the first sentence of the caption the paper and
language tables print), how the report labels it (`item`, and what it reproduces or shows), the
report's caption (workflow/report/paper_table.rst and language_table.rst render `report_caption`,
the rule passes it as a param; `{eps}`, `{delta}` and `{table}` are filled from the config and the
table's name), and which records it reads and how it is built: `plan` and `builder` name functions
of the module of its kind (paper: dphpo.report.plan's `plan_*` and dphpo.report.paper's `build_*`;
language: dphpo.report.language's `inputs` and `build_*`), or are the callables themselves. The study
tables (kind "study") are written by their own rules' scripts from the study's records; their specs
hold the title, the labels and the caption those rules' report entries show.

A new paper or language table is one spec here (and its plan and builder functions): the registries
of dphpo.report.plan, .paper and .language, the `paper_table` / `language_table` rules' wildcards,
labels and captions are derived from `TABLES` (tests/test_table_specs.py).

`METHOD_LABELS` is the one home of the methods' printed names. Torch-free, imports nothing of report/.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["paper", "language", "study"]
KINDS: tuple[str, ...] = ("paper", "language", "study")

#: The printed name of each method in the paper and language tables' rows (and Fig. 4's legend).
METHOD_LABELS: dict[str, str] = {
    "linear_scaling": "Ours (linear scaling)",
    "linear_scaling_safeguarded": "Ours, safeguarded (linear scaling, linear_scaling.safeguard)",
    "random_search": "Random search",
    "random_search_k": "Random search (k runs, honest selection)",
    "grid_oracle": "Grid search (oracle, HPO cost not included)",
    "grid_accounted": "Grid search (accounted)",
    "papernot_steinke": "Papernot & Steinke (2022)",
    "koskela": "Koskela & Kulkarni (2023)",
    "oso_dpsgd": "OSO-DPSGD",
    "mehta": "Mehta et al. (2023b)",
    "nonprivate": "Non-private (eps = inf, best on TEST)",
}
#: Where the tables of one kind print other words for a method (so that every table already written
#: keeps its bytes): the language tables spell out the protocol of the two baselines.
KIND_METHOD_LABELS: dict[str, dict[str, str]] = {
    "language": {
        "random_search": "Random search (one run, full budget)",
        "grid_oracle": "Grid search (oracle: best on TEST, search NOT accounted)",
    },
}
#: The study's HPO comparison (dphpo.report.comparison): its own names, in its row order; a method
#: id "<method>:<variant>" not listed is named after its base method.
COMPARISON_LABELS: dict[str, str] = {
    "linear_scaling": "linear scaling rule (ours)",
    "linear_scaling:safeguarded": "linear scaling rule, safeguarded (ours)",
    "random_search": "random search (1 run, full budget)",
    "random_search_k": "random search, k runs composed",
    "grid_oracle": "grid search ORACLE (non-private HPO)",
    "grid_accounted": "grid search, accounted",
    "papernot_steinke": "Papernot-Steinke",
    "koskela": "Koskela-Kulkarni (reconstruction)",
    "oso_dpsgd": "OSO-DPSGD (linear head)",
    "oso_dpsgd_cnn": "OSO-DPSGD (small CNN, raw pixels)",
    "mehta": "Mehta et al. (1 DP-Adam step)",
}


def method_labels(kind: str = "paper") -> dict[str, str]:
    """The method names the tables of `kind` print: METHOD_LABELS with the kind's own words."""
    return {**METHOD_LABELS, **KIND_METHOD_LABELS.get(kind, {})}


Ref = str | Callable[..., Any] | None


@dataclass(frozen=True)
class TableSpec:
    """One table: its name (the {table} wildcard, the file name), what it shows and how it is built."""

    name: str
    kind: Kind
    title: str  # paper and language tables: the first sentence of the printed caption
    item: str  # report label: "Table 2"
    reproduces: str  # report label: what of Panda et al. it reproduces (study tables: what it shows)
    caption: str = ""  # the report's caption (reStructuredText); {eps}, {delta}, {table} filled in
    plan: Ref = None  # which records it reads: a function name in the kind's module, or the callable
    builder: Ref = None  # how it is built: a function name in the kind's module, or the callable
    label_key: str = "reproduces"  # the second report label's name ("shows" for the study tables)

    def labels(self) -> dict[str, str]:
        return {"item": self.item, self.label_key: self.reproduces}

    def report_caption(self, config: Mapping) -> str:
        """The caption with the config's values: `{eps}` paper.eps, `{delta}` privacy.delta, `{table}` the name."""
        values = {
            "eps": (config.get("paper") or {}).get("eps", 1.0),
            "delta": (config.get("privacy") or {}).get("delta", 1e-5),
            "table": self.name,
        }
        return self.caption.format_map(values)


def resolve(ref: Ref, namespace: Mapping[str, Any]) -> Callable[..., Any]:
    """A spec's plan or builder: the callable itself, or the function of that name in `namespace`."""
    if ref is None:
        raise ValueError("this table's spec names no function here")
    return ref if callable(ref) else namespace[ref]


#: The language tables' report caption (one for all: they share the protocol of section 5.4-5.5).
LANGUAGE_CAPTION = (
    "Reproduces one of **Panda et al., Tables 6–9 and 17–20** (section 5.4–5.5: DP fine-tuning of language models and DP-ZO "
    "under the linear scaling rule; {table}): Table 6 sequence classification (accuracy, r = η·T), "
    "Table 7 and 8 causal language modelling (perplexity, total step size), Table 9 DP-ZO (random / ours / grid), Tables "
    "17–19 the hyperparameters and Table 20 which layers are trained. Every private row states its total ε with the whole "
    "search included (PRV accounting of Poisson-subsampled runs); the grid oracle and the non-private reference say they "
    "are not private HPO. The Panda et al. number is printed beside rows whose study names the paper's setting (`paper_ref`)."
)

#: Panda et al.'s ImageNet rows train on their extractor's pretraining data; a study here may or may not.
OVERLAP_SENTENCE = (
    "Panda et al.'s extractors were pretrained on ImageNet-21k, which holds ImageNet-1k's images; a study on its "
    "extractor's pretraining data is marked in column \"public/private overlap\" (absent where none is): its DP "
    "guarantee covers the private fine-tuning only."
)

_PAPER = [
    TableSpec(
        "table2",
        "paper",
        title="Table 2: CIFAR10-style comparison with and without public data (Koskela, Papernot–Steinke, random, grid, ours)",
        item="Table 2",
        reproduces="HPO with / without public data",
        caption=(
            "Reproduces **Panda et al., Table 2** (CIFAR10 with and without public data, ε = 1): with a feature extractor pretrained on "
            "public data — Koskela & Kulkarni (2023), Papernot & Steinke (2022) and the linear scaling rule on the same features "
            "and search space — and without public data (an extractor pretrained only on synthetic images) — random search, the "
            "grid-search oracle (HPO cost not included) and the linear scaling rule. Here: target ε = "
            "{eps}, δ = {delta}; each row states its total ε and "
            "selection rule. Panda et al. report 67 / 66 / 70.5 % (with public data) and 44 / 68 / 62.63 % (without)."
        ),
        plan="plan_table2",
        builder="build_table2",
    ),
    TableSpec(
        "table3",
        "paper",
        title="Table 3: random search / grid-search oracle / ours, and the relative error rate reduction",
        item="Table 3",
        reproduces="random / oracle / ours, RERR",
        caption=(
            "Reproduces **Panda et al., Table 3**: random search (one run at the full budget, drawn from the same grid), the "
            "grid-search oracle (every grid point trained at the full budget and the best picked on the test set — its HPO cost "
            "is **not** included) and the linear scaling rule (search included), with the relative error rate reduction "
            "RERR = (ours − random) / (oracle − random). Target ε = {eps}. Panda et al.: CIFAR10 "
            "44 / 68 / 62.63 (RERR 77.63), CIFAR100 84.44 / 89.62 / 89.10 (RERR 84.85)."
        ),
        plan="plan_table3",
        builder="build_table3",
    ),
    TableSpec(
        "table4",
        "paper",
        title="Table 4: architectures × datasets, linear scaling at ε incl. HPO vs the non-private reference",
        item="Table 4",
        reproduces="architectures × datasets vs ε = ∞",
        caption=(
            "Reproduces **Panda et al., Table 4** (and Fig. 7): every extractor × dataset, the linear scaling rule at target "
            "ε = {eps} with the cost of the search included, against the non-private reference "
            "(σ = 0, best grid point on the test set: a ceiling, not a DP result), and the gap between them."
        ),
        plan="plan_table4",
        builder="build_table4",
    ),
    TableSpec(
        "table5",
        "paper",
        title="Table 5: distribution shift, a model trained privately on one dataset evaluated on another",
        item="Table 5",
        reproduces="distribution shift (zero-shot)",
        caption=(
            "Reproduces the part of **Panda et al., Table 5** that torchvision data allow (CIFAR10 → STL10 with the labels remapped; "
            "embedded run: MNIST → scikit-learn digits): the released private head (target ε = "
            "{eps}, search included) applied without any update to another dataset's test "
            "split. In-distribution (ID) and out-of-distribution (OOD) accuracy; the OOD evaluation reads no private data."
        ),
        plan="plan_table5",
        builder="build_table5",
    ),
    TableSpec(
        "table10",
        "paper",
        title="Table 10: more stages or a higher-order fit (Linear(2), Linear(3), Quadratic(3))",
        item="Table 10",
        reproduces="Linear(2), Linear(3), Quadratic(3)",
        caption=(
            "Reproduces **Panda et al., Table 10**: the linear scaling rule with two stages and a line (Linear(2), the method), three "
            "stages and a line (Linear(3)) and three stages and a quadratic (Quadratic(3)); each is a config variant and each "
            "total ε includes every stage. Panda et al. report ImageNet only (86.69 / 87.81 / 86.64 %)."
        ),
        plan="plan_table10",
        builder="build_table10",
    ),
    TableSpec(
        "table11",
        "paper",
        title="Table 11: device hours and wall-clock per method, from Snakemake benchmark files",
        item="Table 11",
        reproduces="device hours, wall-clock",
        caption=(
            "Reproduces **Panda et al., Table 11** (runtime per method). Panda et al. count one hour per trial (random search 1 GPU hour "
            "and 1 hour wall-clock, grid search 100 and 1, ours 7 and 3); here the same counts appear as *trained runs per target* "
            "and *sequential rounds*, next to hours measured by Snakemake's ``benchmark:`` files of the jobs that trained them "
            "(all targets of a stage are trained in one batched job)."
        ),
        plan="plan_table11",
        builder="build_table11",
    ),
    TableSpec(
        "table12",
        "paper",
        title="Table 12: one study at several ε (Panda et al.: ImageNet), ours against Mehta et al. (2023b) run here and Mehta et al. (2023a, b) quoted",
        item="Table 12",
        reproduces="ImageNet vs Mehta et al. 2023a/b",
        caption=(
            "Reproduces **Panda et al., Table 12** (theirs on ImageNet-1k; here the study `paper.table12` names): the linear "
            "scaling rule at several target ε (search included) against Mehta et al. (2023b), run here on the same features, "
            "and the ε = ∞ reference. The Mehta et al. 2023a/2023b columns are **quoted** from the paper on ImageNet rows only "
            "(JFT-pretrained models, hyperparameter search not accounted), not reproduced. " + OVERLAP_SENTENCE
        ),
        plan="plan_table12",
        builder="build_table12",
    ),
    TableSpec(
        "table13",
        "paper",
        title="Table 13: marginal cost of the search for several stage budgets (ε1, ε2)",
        item="Table 13",
        reproduces="marginal cost of the search",
        caption=(
            "Reproduces **Panda et al., Table 13** (the marginal cost of the search, CIFAR10): the grid-search oracle and the linear "
            "scaling rule with several stage budgets (ε1, ε2), each a config variant, at target ε = "
            "{eps}; ε_f is what is left for the final run. Panda et al.: oracle 99.00, then "
            "98.88 … 98.79 % as (ε1, ε2) grows from (0.01, 0.05) to (0.2, 0.3)."
        ),
        plan="plan_table13",
        builder="build_table13",
    ),
    TableSpec(
        "table14",
        "paper",
        title="Table 14: lowering ε by more noise or by Poisson subsampling",
        item="Table 14",
        reproduces="lower ε: more noise vs subsampling",
        caption=(
            "Reproduces **Panda et al., Table 14**: two ways from the ε = 1 result to ε = 0.7 — more noise (full batch, the same "
            "η and T, σ raised) or Poisson subsampling (the same η, T and σ, the rate q = B/N_pub the largest whose amplified "
            "accounting meets 0.7) — each charged the whole search of the ε = 1 result (rule linear_scaling_reduce). Panda et al. "
            "(ImageNet): subsampling 41.34 % (−45.66 points), more noise 84.07 % (−2.93 points)."
        ),
        plan="plan_table14",
        builder="build_table14",
    ),
    TableSpec(
        "table15",
        "paper",
        title="Table 15: ablations of the six design choices",
        item="Table 15",
        reproduces="ablations of six design choices",
        caption=(
            "Reproduces **Panda et al., Table 15** (and Table 1): each of the method's design choices — no bias, zero initialization, "
            "full-batch gradient descent, momentum 0.9, PLD/GDP accounting, unit clipping — against the alternative prior work "
            "used, each alternative a config variant run through the whole linear scaling rule (search included in every total). "
            "Minibatch DP-SGD (Poisson sampling, q = B/N) and RDP accounting calibrate σ with Rényi DP, so their totals are "
            "RDP-composed. Panda et al. (CIFAR100, ε = 0.1): improvements +0.36, +6.81, +1.46, +2.09, +3.23, +0.46 points."
        ),
        plan="plan_table15",
        builder="build_table15",
    ),
    TableSpec(
        "table16",
        "paper",
        title="Table 16: ε = 0.1, 1 and ∞ next to prior work",
        item="Table 16",
        reproduces="ε = 0.1, 1, ∞ next to prior work",
        caption=(
            "Reproduces **Panda et al., Table 16**: the linear scaling rule at ε = 0.1 and 1 (search included) and the non-private "
            "reference (ε = ∞), with prior work quoted from the paper where the dataset matches (CIFAR10/100; those works do not "
            "account for their hyperparameter search)."
        ),
        plan="plan_table16",
        builder="build_table16",
    ),
    TableSpec(
        "dp_continual",
        "paper",
        title="Seed 003: DP continual pre-training of the extractor (public stage, then DP-SGD on other private data)",
        item="DP continual pre-training",
        reproduces="Bu et al. in front of the linear scaling rule",
        caption=(
            "Widens \"public pretraining\" with **Bu et al.** (DP continual pre-training with limited public data): the "
            "extractor is trained on public data until the public validation loss stops improving (the switch point, no "
            "privacy cost), then trained further with DP-SGD on a *different* private dataset (Poisson batches, per-sample "
            "clipping, prv-accountant), and finally used frozen for the linear scaling rule on the study's data. Each row "
            "states two guarantees for two datasets: the pre-training's (ε, δ) w.r.t. its private data and the study's total "
            "(ε, δ) with the search included; a study on the pre-training data itself is refused by the config check."
        ),
        plan="plan_dp_continual",
        builder="build_dp_continual",
    ),
    TableSpec(
        "figure2",
        "paper",
        title="Figure 2 (as a table): accuracy against ε on one study (Panda et al.: ImageNet), ours and Mehta et al. (2023b)",
        item="Figure 2 (tabulated)",
        reproduces="ImageNet accuracy vs ε, one search",
        caption=(
            "Reproduces **Panda et al., Figure 2** as a table (accuracy against ε, the rule and Mehta et al. 2023b run here; "
            "theirs on ImageNet-1k, here the study `paper.figure2` names). Column \"search\" says whether the rule's search was "
            "shared by all targets or paid per target. " + OVERLAP_SENTENCE
        ),
        plan="plan_figure2",
        builder="build_figure2",
    ),
]


def _language(number: int, title: str, reproduces: str) -> TableSpec:
    """A language table: "Table <number>", the shared caption, planned by `inputs`, built by `build_table<number>`."""
    return TableSpec(f"table{number}", "language", title=title, item=f"Table {number}", reproduces=reproduces,
                     caption=LANGUAGE_CAPTION, plan="inputs", builder=f"build_table{number}")


_LANGUAGE = [
    _language(6, "Table 6: linear scaling for sequence classification, fine-tuning (r = eta x T)",
              "sequence classification, fine-tuning (r = η·T)"),
    _language(7, "Table 7: linear scaling when fine-tuning all layers of a causal LM (perplexity)",
              "causal LM, all layers fine-tuned (perplexity)"),
    _language(8, "Table 8: causal LM fine-tuning with DP-SGD: perplexity (Ppl) and total step size (TSS) of the rule",
              "causal LM with DP-SGD: perplexity, total step size"),
    _language(9, "Table 9: the rule drives DP-ZO (Tang et al. 2024) vs random search and the grid",
              "DP-ZO: random search / ours / grid"),
    _language(17, "Table 17: hyperparameters of the causal LM fine-tuning (PersonaChat in Panda et al.)",
              "hyperparameters of the causal LM fine-tuning"),
    _language(18, "Table 18: grid of the causal LM study (WikiText-2 in Panda et al.)",
              "grid of the causal LM study (WikiText-2)"),
    _language(19, "Table 19: grid of the causal LM study (Enron in Panda et al.)",
              "grid of the causal LM study (Enron)"),
    _language(20, "Table 20: which layers are trained (full / last block / first and last block) vs perplexity",
              "which layers are trained vs perplexity"),
]

#: The caption of both provenance tables (the study's and the paper target's).
PROVENANCE_CAPTION = (
    "Provenance of every result file the paper tables and figures read: per study, method and variant, the config hash, "
    "the feature-cache and dataset checksums, the accountant of the reported totals, the selection rule, package versions, "
    "and the largest difference between a reported total ε and its target (never positive). Each ``result.json`` holds the "
    "full ledger of its releases; ``dphpo privacy eps --mu … --delta …`` recomputes a GDP total."
)

# Written by their own rules (workflow/rules/baselines.smk, report.smk, paper.smk) from the records;
# `builder` names the function that builds each, `plan` the rule's input function.
_STUDY = [
    TableSpec(
        "hpo_comparison",
        "study",
        title="HPO comparison: every method on the same features, search space and total budgets",
        item="Table",
        reproduces="every method at equal total ε, RERR",
        caption=(
            "Every HPO method at the same **total** budgets, on the same features and search space: test "
            "accuracy (mean ± std over seeds) and the total ε each method actually spent, its hyperparameter "
            "search included (all trials, every score or selection release, every final run). RERR = "
            "(method − random search)/(oracle − random search), Panda et al. Table 3. The **grid search oracle is "
            "non-private HPO**: every point of the whole search grid (the candidates the linear scaling rule "
            "searches) at the full budget, the best chosen on TEST data, the search "
            "not accounted (total ε = ∞). Koskela–Kulkarni is a documented reconstruction; OSO-DPSGD (CNN) runs "
            "on raw pixels of its own studies. A second table repeats Table 3's layout. OSO-DPSGD runs Galli et al.'s learning-rate grid at the "
            "rule's compute; Mehta et al. is one step from zero init, a sign classifier, flat in ε by construction."
        ),
        plan="study_results",
        builder="dphpo.report.comparison.make",
        label_key="shows",
    ),
    TableSpec(
        "linear_scaling",
        "study",
        title="Linear scaling rule: accuracy at each target ε",
        item="Table",
        reproduces="accuracy at each total ε",
        caption=(
            "Linear scaling rule (Panda et al., Algorithm 2): test accuracy, mean ± std over seeds, at each target ε. "
            "The reported ε is the **total**: every stage trial, every private selection release and the final run, composed "
            "exactly in Gaussian DP. The non-private column (σ = 0, best grid point chosen on test data) is a ceiling, not a DP "
            "result; the gap is non-private minus the private mean."
        ),
        plan="rule_results",
        builder="dphpo.report.linear_scaling.make",
        label_key="shows",
    ),
    TableSpec(
        "study_provenance",
        "study",
        title="Provenance of every result of the study",
        item="Provenance",
        reproduces="config, code, data, accountant",
        caption=PROVENANCE_CAPTION,
        plan="study_results",
        builder="dphpo.report.provenance.provenance_table",
        label_key="shows",
    ),
    TableSpec(
        "provenance",
        "study",
        title="Provenance of every result file the paper tables and figures read",
        item="Provenance",
        reproduces="config, code, data, accountant",
        caption=PROVENANCE_CAPTION,
        plan="paper_all_results",
        builder="dphpo.report.provenance.provenance_table",
    ),
]

#: Every table, by name: the one registry.
TABLES: dict[str, TableSpec] = {s.name: s for s in [*_PAPER, *_LANGUAGE, *_STUDY]}


def of_kind(kind: str) -> dict[str, TableSpec]:
    """The specs of one kind, in registry order."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of table {kind!r}; known: {', '.join(KINDS)}")
    return {name: s for name, s in TABLES.items() if s.kind == kind}


def names(kind: str) -> tuple[str, ...]:
    return tuple(of_kind(kind))


def get(name: str, kind: str | None = None) -> TableSpec:
    """The spec of table `name` (of `kind`, where given); a ValueError names the known ones."""
    spec = TABLES.get(name)
    if spec is None or (kind is not None and spec.kind != kind):
        known = names(kind) if kind else tuple(TABLES)
        raise ValueError(f"unknown {kind + ' ' if kind else ''}table {name!r}; known: {', '.join(known)}")
    return spec


def title(name: str) -> str:
    return get(name).title


def report_labels(name: str) -> dict[str, str]:
    """The report's labels of a table (the rules' `labels=`)."""
    return get(name).labels()


def report_caption(name: str, config: Mapping) -> str:
    """The report's caption of a table with the config's values (the rules pass it as a param)."""
    return get(name).report_caption(config)
