"""The results tree: every path a rule writes or a reader opens, as one Snakemake template each.

Rules `expand` these templates (their `{wildcards}` are Snakemake's), library code fills them with
`path(TEMPLATE, **values)`; no other module spells a results path. A target ε appears in paths as
`eps_label(eps)`, but readers take ε from the record they read, never from its path.
"""

from __future__ import annotations

import math
import re

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
HEATMAP = "results/figures/heatmaps/{dataset}/{extractor}.png"  # one per study
PARETO = "results/figures/pareto/{dataset}.png"  # one per dataset

# The namespace of a study's own tables and figures (config `namespace`, issue 30): with one, they
# lie in results/tables/<namespace>/ and results/figures/<namespace>/ (their logs in
# results/logs/tables/<namespace>/), so that studies of several configs keep their tables side by
# side; without one (None), where they always were. The paper target's tables never take one. Runs
# need none: their paths already say dataset, extractor, method and variant, and their settings hash.
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Folders of results/figures/ the paper target writes into (HEATMAP, PARETO): not a namespace.
RESERVED_NAMESPACES = ("heatmaps", "pareto")

# evaluations a table reads instead of computing them itself (Table 5: released heads on shifted
# test sets; sealed JSON, so that the table job reads records only)
EVALUATION = "results/evaluations/{name}.json"

# logs and benchmarks of every job (internal: timings and counts of a run are not released)
LOG = "results/logs/{job}.log"
BENCHMARK = "results/benchmarks/{job}.tsv"

# the method directory of rule linear_scaling_reduce (Panda et al. Table 14): a linear scaling result's
# final run redone at a lower ε; its records say method linear_scaling, with search.reduced
REDUCED_METHOD = "linear_scaling_reduced"

# the jobs, named as in their LOG and BENCHMARK paths
JOB_PRETRAIN = "pretrain_public/{name}"
JOB_FEATURES = "extract_features/{dataset}/{extractor}"
JOB_STAGE = "linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/stage{stage}"
JOB_FINAL = "linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/final"
JOB_TARGET = "linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/final_eps{eps}"  # own-target variants
JOB_REDUCE = "linear_scaling_reduced/{dataset}/{extractor}/{variant}/seed{seed}/eps{eps}"  # Table 14
JOB_NONPRIVATE = "nonprivate/{dataset}/{extractor}"
JOB_METHOD = "{method}/{dataset}/{extractor}/{variant}/seed{seed}"  # rule run_method (baselines)
JOB_TABLE = "tables/{table}"  # the study's own tables (linear_scaling, hpo_comparison; `table_log`)
JOB_PAPER = "paper/{item}"  # a table or figure of the paper target
JOB_AUDIT = "audit"


def eps_label(eps: float) -> str:
    """How a target ε appears in paths: 1.0 -> '1', 0.25 -> '0.25' (never parsed back into ε)."""
    return f"{float(eps):g}"


def path(template: str, **values) -> str:
    """A template with every wildcard filled; `eps` is written with `eps_label`."""
    if "eps" in values and not isinstance(values["eps"], str):
        values["eps"] = eps_label(values["eps"])
    return template.format(**values)


def parse(template: str, path: str | object) -> dict[str, str] | None:
    """The wildcards of `path` when it is an instance of `template` below any results folder (its
    `results/` may be named otherwise, or be the folder the path is relative to), else None: what a
    consumer expects a record at that path to say."""
    inside = template.removeprefix(ROOT + "/")
    pattern = re.sub(r"\\{(\w+)\\}", lambda m: f"(?P<{m.group(1)}>[^/]+)", re.escape(inside))
    match = re.search(r"(?:^|/)" + pattern + "$", str(path))
    return match.groupdict() if match else None


def partial(template: str, **values) -> str:
    """A template with some wildcards filled, the others left as `{wildcards}` for Snakemake."""

    class _Keep(dict):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    if "eps" in values and not isinstance(values["eps"], str):
        values["eps"] = eps_label(values["eps"])
    return template.format_map(_Keep(values))


def log(job: str, **values) -> str:
    """The log of a job (`job`: a JOB_* template), wildcards not in `values` left to Snakemake."""
    return partial(LOG, job=partial(job, **values))


def benchmark(job: str, **values) -> str:
    """The benchmark file of a job (`job`: a JOB_* template), as `log`."""
    return partial(BENCHMARK, job=partial(job, **values))


def namespace(config: dict) -> str | None:
    """The namespace of a config's study tables and figures (config `namespace`), None without one."""
    value = config.get("namespace")
    if value is None:
        return None
    if not isinstance(value, str) or not re.match(NAMESPACE_PATTERN, value) or value in RESERVED_NAMESPACES:
        raise ValueError(f"namespace: {value!r} is not a folder name matching {NAMESPACE_PATTERN} "
                         f"(nor one of {', '.join(RESERVED_NAMESPACES)})")
    return value


def namespaced(name: str, namespace: str | None = None) -> str:
    """`name` inside the folder `namespace` (a table, figure or job name), unchanged without one."""
    return name if namespace is None else f"{namespace}/{name}"


def table(name: str, ext: str, namespace: str | None = None) -> str:
    """A table file; a study's own tables take the config's `namespace` (`namespace(config)`)."""
    return path(TABLE, table=namespaced(name, namespace), ext=ext)


def tables(name: str, formats: tuple[str, ...] = TABLE_FORMATS, namespace: str | None = None) -> list[str]:
    """One table in several formats."""
    return [table(name, ext, namespace) for ext in formats]


def figure(name: str, namespace: str | None = None) -> str:
    """A single-file figure; a study's own figures take the config's `namespace`, as `table`."""
    return path(FIGURE, figure=namespaced(name, namespace))


def table_log(name: str, namespace: str | None = None) -> str:
    """The log of the job of a study's own table (JOB_TABLE), in the table's namespace."""
    return log(JOB_TABLE, table=namespaced(name, namespace))


def sibling(result_path: str, name: str) -> str:
    """Another file of the run directory a result.json lies in (model.npz, internal.json)."""
    head, _, _ = str(result_path).rpartition("/")
    return f"{head}/{name}"


def files_by_target(targets, *outputs):
    """The files of a job's outputs for one target ε: `targets` are the ε the outputs were expanded
    over, in their order (a rule's `params`); the returned function takes a result's own target ε and
    gives its file of each output (a result whose ε no output has is refused, never written elsewhere)."""
    targets = [float(t) for t in targets]
    if any(len(files) != len(targets) for files in outputs):
        raise ValueError(f"{len(targets)} target ε for outputs of {[len(f) for f in outputs]} files")

    def files(eps: float) -> tuple[str, ...]:
        found = [i for i, t in enumerate(targets) if math.isclose(float(eps), t, rel_tol=1e-12)]
        if len(found) != 1:
            raise ValueError(f"no output file for target ε = {eps:g} (outputs for {', '.join(f'{t:g}' for t in targets)})")
        return tuple(str(f[found[0]]) for f in outputs)

    return files


# --------------------------------------------------------------------------------------------
# the language studies (language.studies[]; dphpo.studies): public inputs, then one run directory
# per study × method × seed × target ε, as for the vision runs (a job writes every ε of the study)
LANGUAGE_RUN_DIR = "results/language/{study}/{method}/seed{seed}/eps{eps}"
LANGUAGE_RESULT = LANGUAGE_RUN_DIR + "/result.json"  # the release
LANGUAGE_MODEL = LANGUAGE_RUN_DIR + "/model.pt"  # the released model
LANGUAGE_INTERNAL = LANGUAGE_RUN_DIR + "/internal.json"  # NOT FOR PUBLICATION
# what one language job writes (study × method × seed): every target ε of the study, staged as
# eps<ε>.result.json, eps<ε>.model.pt and eps<ε>.internal.json (NOT FOR PUBLICATION); rule
# language_release gives each its place above (a hard link: no second copy of a model)
LANGUAGE_JOB_DIR = "results/language/{study}/{method}/seed{seed}/job"
LANGUAGE_STAGED = ("result.json", "model.pt", "internal.json")  # in the order of LANGUAGE_RESULT, _MODEL, _INTERNAL


def language_staged(job_dir: str, eps: float | str, name: str) -> str:
    """The staged file `name` (one of LANGUAGE_STAGED) of target ε `eps` in a language job's folder."""
    if name not in LANGUAGE_STAGED:
        raise ValueError(f"a language job stages {LANGUAGE_STAGED}, not {name!r}")
    return f"{job_dir}/eps{eps if isinstance(eps, str) else eps_label(eps)}.{name}"


# the non-private reference of a language study (ε = ∞)
LANGUAGE_NONPRIVATE_RESULT = "results/language/{study}/nonprivate/result.json"
LANGUAGE_NONPRIVATE_MODEL = "results/language/{study}/nonprivate/model.pt"
LANGUAGE_NONPRIVATE_INTERNAL = "results/language/{study}/nonprivate/internal.json"
