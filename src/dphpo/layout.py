"""The results tree: every path a rule writes or a reader opens, as one Snakemake template each.

Rules `expand` these templates (their `{wildcards}` are Snakemake's), library code fills them with
`path(TEMPLATE, **values)`; no other module spells a results path. A target ε appears in paths as
`eps_label(eps)`, but readers take ε from the record they read, never from its path.
"""

from __future__ import annotations

ROOT = "results"

# public pretraining and feature caches
PRETRAINED_CHECKPOINT = "results/pretrained/{name}.pt"
PRETRAINED_RECORD = "results/pretrained/{name}.json"
FEATURES = "results/features/{dataset}/{extractor}.h5"

# one private run: a method on a study, a variant of its settings, a seed and a target ε
RUN_DIR = "results/runs/{dataset}/{extractor}/{method}/{variant}/seed{seed}/eps{eps}"
RESULT = RUN_DIR + "/result.json"  # the release
MODEL = RUN_DIR + "/model.npz"  # the released model
INTERNAL = RUN_DIR + "/internal.json"  # NOT FOR PUBLICATION: every trial, exact metrics
STAGE = "results/runs/{dataset}/{extractor}/linear_scaling/{variant}/seed{seed}/stage{stage}.json"

# the non-private reference of a study (ε = ∞)
NONPRIVATE_RESULT = "results/runs/{dataset}/{extractor}/nonprivate/result.json"
NONPRIVATE_MODEL = "results/runs/{dataset}/{extractor}/nonprivate/model.npz"
NONPRIVATE_INTERNAL = "results/runs/{dataset}/{extractor}/nonprivate/internal.json"

# the language half: one job per study × method × seed writes every target ε
LANGUAGE_PRETRAINED = "results/language/pretrained/{name}.pt"
LANGUAGE_CACHE = "results/language/cache/{study}.h5"

# tables (four formats) and figures
TABLE = "results/tables/{table}.{ext}"
TABLE_FORMATS = ("md", "csv", "tex", "html")
FIGURE = "results/figures/{figure}.png"

# logs and benchmarks of every job (internal: timings and counts of a run are not released)
LOG = "results/logs/{job}.log"
BENCHMARK = "results/benchmarks/{job}.tsv"


def eps_label(eps: float) -> str:
    """How a target ε appears in paths: 1.0 -> '1', 0.25 -> '0.25' (never parsed back into ε)."""
    return f"{float(eps):g}"


def path(template: str, **values) -> str:
    """A template with every wildcard filled; `eps` is written with `eps_label`."""
    if "eps" in values and not isinstance(values["eps"], str):
        values["eps"] = eps_label(values["eps"])
    return template.format(**values)


def sibling(result_path: str, name: str) -> str:
    """Another file of the run directory a result.json lies in (model.npz, internal.json)."""
    head, _, _ = str(result_path).rpartition("/")
    return f"{head}/{name}"


# --------------------------------------------------------------------------------------------
# the language studies (language.studies[]; dphpo.studies): public inputs, then one run directory
# per study × method × seed × target ε, as for the vision runs (a job writes every ε of the study)
LANGUAGE_RUN_DIR = "results/language/{study}/{method}/seed{seed}/eps{eps}"
LANGUAGE_RESULT = LANGUAGE_RUN_DIR + "/result.json"  # the release
LANGUAGE_MODEL = LANGUAGE_RUN_DIR + "/model.pt"  # the released model
LANGUAGE_INTERNAL = LANGUAGE_RUN_DIR + "/internal.json"  # NOT FOR PUBLICATION
# the non-private reference of a language study (ε = ∞)
LANGUAGE_NONPRIVATE_RESULT = "results/language/{study}/nonprivate/result.json"
LANGUAGE_NONPRIVATE_MODEL = "results/language/{study}/nonprivate/model.pt"
LANGUAGE_NONPRIVATE_INTERNAL = "results/language/{study}/nonprivate/internal.json"
