"""`dphpo init`: a runnable, commented config for a study of the user's own data.

It reads the data once with the loaders the workflow uses (the same checks, the same errors), picks the
extractor of its kind, takes the method settings of the embedded study (`config/config.yaml`) with the
safeguarded rule beside the paper's, states `test_split: public`, validates the result as the workflow
will, writes it atomically and returns the one command that runs it. `--add` puts another dataset into
an existing config.
"""

from __future__ import annotations

import copy
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import yaml

from dphpo import layout
from dphpo.data.files import FileDataset, table_columns
from dphpo.data.registry import DATASETS
from dphpo.errors import ConfigError, DPHPOError
from dphpo.features.extractors import get_extractor
from dphpo.hpo.linear_scaling_plan import LinearScalingConfig, no_signal, safeguarded_section, stage_searches
from dphpo.hpo.papernot_steinke import PSConfig, fitting_max_trials
from dphpo.hpo.selection import AUTO, selection_rule
from dphpo.io import check_writable, write_text
from dphpo.studies.checks import load_config_file
from dphpo.studies.validate import SCHEMA, validate_config

REPO = Path(__file__).resolve().parents[2]
EMBEDDED = REPO / "config" / "config.yaml"

#: The extractor each kind of data gets (its section as in the embedded config, or identity for features).
EXTRACTORS: dict[str, tuple[str, dict]] = {
    "image_folder": ("efficientnet_lite0", {}),  # the section is copied from config/config.yaml
    "text_table": ("minilm_l6", {}),
    "features": ("given", {"kind": "identity"}),
}
#: Method sections copied from the embedded study: what it runs, set a priori or from the paper.
COPIED = ("search_space", "training", "selection", "linear_scaling", "variants")
#: The baselines a first study compares the rule with: one random run at the full budget (the floor a
#: tuning method must beat), the grid search selected on test (a non-private HPO ceiling, labelled so)
#: and Papernot-Steinke, the private random search with a random number of trials.
BASELINES = ["random_search", "grid_oracle", "papernot_steinke"]
#: Baselines that draw a random number of trials and cap it (their sections share these keys).
TRIAL_CAPPED = ("papernot_steinke", "koskela")
TEXT_COLUMNS = ("text", "sentence", "content", "review", "body", "tweet")
LABEL_COLUMNS = ("label", "labels", "class", "target", "y", "category", "sentiment", "rating", "stars")
#: A column that splits a table into train and test when its values are exactly those (`--split-field`).
SPLIT_COLUMN = "split"
NAME = re.compile(r"[A-Za-z0-9_]+")  # a dataset's name in the config (workflow/schemas: datasets, studies)


@dataclass(frozen=True)
class Inspection:
    """What `dphpo init` found in the data (train/test sizes, classes), for its summary."""

    name: str
    kind: str
    n_train: int
    n_test: int
    classes: list[str]
    source: str
    feature_dim: int | None = None  # a features file's width (images and texts: their extractor's)


def guess_columns(path: Path, text_field: str | None, label_field: str | None) -> tuple[str, str]:
    """The text and label columns of a table: those given, else the first usual name present."""
    columns = table_columns(path, "--texts")
    found = {c.lower(): c for c in columns}
    text = text_field or next((found[c] for c in TEXT_COLUMNS if c in found), None)
    label = label_field or next((found[c] for c in LABEL_COLUMNS if c in found), None)
    if text is None or label is None:
        missing = "--text-field" if text is None else "--label-field"
        raise ConfigError(f"{path.name}: which column holds the {'text' if text is None else 'label'}? Name it with "
                          f"{missing} (columns: {', '.join(columns)})")
    return text, label


def guess_split(path: Path, split_field: str | None) -> str | None:
    """The split column: the one given (`--split-field`), else a column named `split`, else none (a per-record
    split). Chosen by the header alone, never by the rows' values: whether the table's own split is used
    must not depend on what one record holds (a stray `dev` row would move many records between train
    and test); the loader refuses a value other than train or test, naming the column."""
    if split_field is not None:
        return split_field
    return next((c for c in table_columns(path, "--texts") if c.lower() == SPLIT_COLUMN), None)


def dataset_section(kind: str, path: Path, text_field: str | None = None, label_field: str | None = None,
                    split_field: str | None = None) -> dict:
    """The `datasets.<name>` section of the data at `path` (the public size is the user's declaration)."""
    section: dict = {"kind": kind, "path": str(path)}
    if kind != "text_table":
        if split_field is not None:
            raise ConfigError("--split-field: only a text table (--texts) has columns; an image folder splits by "
                              "its train/ and test/ folders, an .npz by its train_x and test_x arrays")
        return section
    section["text_field"], section["label_field"] = guess_columns(path, text_field, label_field)
    split = guess_split(path, split_field)
    if split is not None:
        section["split_field"] = split
    return section


def common_shape(section: dict, extractors: dict) -> dict:
    """`image_size` and `image_mode` of an image folder: always the extractor's input resolution (as
    `extractors`, the sections of the config it goes into, define it) and rgb, chosen without reading a
    pixel. Written only where the images mixed sizes or modes, the choice would read the private images:
    one image of another size would resize every record (and move the per-record subsets, which hash
    the fitted pixels)."""
    if section["kind"] != "image_folder":
        return {}
    resolution = int(extractors[EXTRACTORS["image_folder"][0]]["resolution"])
    return {"image_size": [resolution, resolution], "image_mode": "rgb"}


def has_own_test_split(section: dict) -> bool:
    """Whether the data bring a test split of their own (a test/ folder, a split column, an .npz's test_x),
    rather than a per-record share carved out of the user's training records."""
    if section["kind"] == "image_folder":
        return (Path(section["path"]) / "test").is_dir()
    return section["kind"] == "features" or bool(section.get("split_field"))


def inspect_data(name: str, section: dict) -> Inspection:
    """Load the data as the workflow will (FileDataset: layout, labels, classes, split), raising its errors."""
    ds = FileDataset.from_config(name, section).load()
    classes = list(ds.classes)  # file data always name their classes (declared, folders, or label values)
    width = int(ds.train_inputs.shape[1]) if section["kind"] == "features" else None
    return Inspection(name, section["kind"], ds.n_train, ds.n_test, classes, ds.source, width)


def default_delta(n_train: int) -> float:
    """δ well below 1/N: 1e-5, or the power of ten at or below 1/(10 N) for larger data."""
    return min(1e-5, 10.0 ** math.floor(math.log10(1.0 / (10 * n_train))))


def study_namespace(out: Path, name: str) -> str:
    """The namespace of a new config's tables and figures (config `namespace`): the config file's name
    (`config/pets.yaml`: pets), made a folder name; the dataset's name where nothing of it is left."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", out.stem).lstrip("_.-")
    if not stem:
        stem = name
    return f"{stem}_study" if stem in layout.RESERVED_NAMESPACES else stem


def new_config(found: Inspection, section: dict, embedded: dict, namespace: str | None = None) -> dict:
    """A whole config for one dataset: its section (with the declared `public_n_train` it holds), the
    study, its extractor, and the embedded methods; its tables and figures in their own folders
    `namespace` (config `namespace`) where one is given. δ comes from the declared size, never a count."""
    extractor, extractor_section = EXTRACTORS[found.kind]
    config = {} if namespace is None else {"namespace": namespace}
    config |= {
        "data_dir": "data",
        "datasets": {found.name: section | {"classes": found.classes, "test_split": "public"}},
        "studies": [{"dataset": found.name, "extractor": extractor}],
        "extractors": {extractor: extractor_section or copy.deepcopy(embedded["extractors"][extractor])},
        "privacy": {"delta": default_delta(section["public_n_train"]), "target_eps": [1, 2, 4, 8], "adjacency": "add_remove"},
        "seeds": [0, 1, 2],
    }
    config.update({key: copy.deepcopy(embedded[key]) for key in COPIED if key in embedded})
    # the selection noise planned per target from the public size (the embedded 300 counts suit 60,000 records)
    config["selection"] = dict(config.get("selection") or {}) | {"noise_std": AUTO}
    config["baselines"] = copy.deepcopy(embedded["baselines"]) | {"methods": list(BASELINES)}
    config["baselines"].pop("oso_dpsgd_cnn", None)  # opt-in raw-pixel CNN: not for a first study
    size_trial_caps(config)
    return config


def size_trial_caps(config: dict) -> None:
    """Raise the config's explicit caps on the number of random trials (Papernot–Steinke, Koskela) where its
    δ is smaller than they were sized for: a cap costs δ_cap = (1 + e^ε)·P[K > cap], at most 1 % of δ
    (`max_trials: auto`, the default, is sized for any δ and any bundle)."""
    eps, delta = max(config["privacy"]["target_eps"]), float(config["privacy"]["delta"])
    for method in TRIAL_CAPPED:
        section = config["baselines"].get(method)
        if section is not None and section.get("max_trials", "auto") != "auto":
            psc = PSConfig.from_section(section, "grid", f"baselines.{method}")
            section["max_trials"] = fitting_max_trials(psc, eps, delta)


def add_dataset(config: dict, found: Inspection, section: dict, embedded: dict, delta: float) -> tuple[dict, str | None]:
    """`config` (as its file holds it; its δ `delta`, the schema's default where it sets none) with one more
    dataset and its study (and its extractor if the config lacks it), and a note on δ: lowered where the
    config's is at least 1/N of the new data (such a δ protects nobody, and the workflow refuses it),
    named where it is above what `dphpo init` picks for a new config of that size."""
    if found.name in (config.get("datasets") or {}) or any(s["dataset"] == found.name for s in config.get("studies") or []):
        raise ConfigError(f"datasets.{found.name}: the config already has a dataset of that name; pick another --name")
    for name, theirs in (config.get("datasets") or {}).items():
        if isinstance(theirs, dict) and isinstance(theirs.get("path"), str) and Path(theirs["path"]).resolve() == Path(section["path"]).resolve():
            raise ConfigError(f"datasets.{name}: the config already studies {section['path']} under that name; a second name "
                              "would rerun the same study on the same records (their releases compose into one statement, "
                              "by their keyed checksum, and cost those people twice)")
    new = new_config(found, section, embedded)
    out = copy.deepcopy(config)
    out.setdefault("datasets", {}).update(new["datasets"])
    out.setdefault("studies", []).extend(new["studies"])
    for name, spec in new["extractors"].items():
        out.setdefault("extractors", {}).setdefault(name, spec)
    n = int(section["public_n_train"])
    wanted = default_delta(n)
    out.setdefault("privacy", {}).setdefault("delta", delta)  # stated where the schema's default was used
    if delta <= wanted:
        return out, None
    if delta * n < 1:
        return out, (f"note: privacy.delta {delta:g} is kept for every study; for {n:,} training records "
                     f"dphpo init picks {wanted:g} (at most 1/(10 N)): lowering it reruns the config's other studies")
    out["privacy"]["delta"] = wanted
    size_trial_caps(out)
    return out, (f"note: privacy.delta lowered from {delta:g} to {wanted:g} for every study: {delta:g} is at least 1/N for "
                 f"{found.name}'s {n:,} training records; the config's other studies rerun at the new delta")


HEADER = """\
# A study of your own data, written by `dphpo init`. Every key: config/README.md.
# Run it: {command}
#
# What the guarantee needs from you (README.md, "Your own data"):
# - datasets.<name>.test_split: public -- every release publishes its exact test metrics, so the test split
#   is treated as public. If it is not, do not publish the tables.
# - datasets.<name>.public_n_train is the size you DECLARED with --public-n-train ({counted}). DP-GD divides
#   by it and delta uses it; it is published with every release (the count of your files is not).
# - datasets.<name>.classes were READ from your files ({classes}): the label set, in the model's order. Keep
#   them if the task's classes are public (they usually are); a label outside them is refused.
{split}# - Each released model is DP with respect to one training record (add/remove); `dphpo release` states
#   what all releases together cost.
{rules}"""

#: The header's last lines: which linear scaling rules the config runs.
BOTH_RULES = """# The paper's rule (the main study) and the recommended safeguarded rule ({variants}) both run;
# the tables show them side by side with the baselines below.
"""
PAPER_RULE_ONLY = """# The paper's rule (the main study) runs with the baselines below. No variant sets linear_scaling.safeguard,
# so the recommended safeguarded rule does not run (a new `dphpo init` config adds it as variants.safeguarded).
"""


#: Below the header where a table's own split is used (`split_field`).
SPLIT_COMMENT = """\
# - datasets.<name>.split_field: your table's own train/test split ({split}), taken from your files: keep it
#   if the split is public (a benchmark's published split); its test rows are published exactly (test_split).
"""


#: Above the `namespace` key: why it is there.
NAMESPACE_COMMENT = """\
# namespace: this study's tables and figures go to results/tables/{namespace}/ and results/figures/{namespace}/
# (e.g. results/tables/{namespace}/hpo_comparison.md), so that another config's study (the embedded one, another
# `dphpo init`) never overwrites them; its runs share results/runs/ (one folder per dataset, extractor, settings).
"""


def render(config: dict, command: str) -> str:
    """The config as YAML under a header that says what was counted and what the guarantee assumes (and,
    above its `namespace`, where its tables go)."""
    own = {name: s for name, s in config["datasets"].items() if s.get("kind")}
    counted = ", ".join(f"{name}: {s['public_n_train']:,}" for name, s in own.items())
    classes = "; ".join(f"{name}: {len(s['classes'])} classes" for name, s in own.items() if s.get("classes"))
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=100)
    if config.get("namespace") is not None:
        comment = NAMESPACE_COMMENT.format(namespace=config["namespace"])
        body = re.sub(r"^(?=namespace:)", lambda _: comment, body, count=1, flags=re.MULTILINE)
    split = [f"{name}: column {s['split_field']!r}" for name, s in own.items() if s.get("split_field")]
    # read off the files like the classes: public only where the split is (a benchmark's own)
    split_comment = SPLIT_COMMENT.format(split="; ".join(split)) if split else ""
    guarded = safeguarded_variants(config)
    rules = BOTH_RULES.format(variants=", ".join(f"variants.{v}" for v in guarded)) if guarded else PAPER_RULE_ONLY
    return HEADER.format(command=command, counted=counted, classes=classes, split=split_comment, rules=rules) + "\n" + body


def safeguarded_variants(config: dict) -> list[str]:
    """The config's variants that run the recommended rule (`linear_scaling.safeguard` set): what `dphpo
    init` writes for a new config, and what a config extended with --add may lack."""
    return [name for name, spec in (config.get("variants") or {}).items()
            if ((spec or {}).get("linear_scaling") or {}).get("safeguard") not in (None, False)]


def head_parameters(config: dict, found: Inspection) -> int:
    """P = d·K of the dataset's linear head: its extractor's feature width (a features file: its own) times
    its classes. Public: the extractor and the label set, not a count of private records."""
    extractor = next(s["extractor"] for s in config["studies"] if s["dataset"] == found.name)
    # an identity extractor knows its width only from the data: a features file's own
    width = getattr(get_extractor(extractor, config["extractors"][extractor]), "feature_dim", None) or found.feature_dim
    return int(width) * len(found.classes)


def size_note(config: dict, found: Inspection) -> str | None:
    """Where the recommended rule will skip its stages (public quantities only; `no_signal`, the test the
    rule itself runs): released scores that cannot rank trials at this N, or first-stage trials that
    learn too little at this N and head size. There it spends the whole budget on one run at the public prior."""
    lsc = LinearScalingConfig.from_config(safeguarded_section(config.get("linear_scaling")))
    n = int(config["datasets"][found.name]["public_n_train"])  # the declared size, never the count
    selection, n_parameters = selection_rule(config, n), head_parameters(config, found)
    targets = sorted(float(e) for e in config["privacy"]["target_eps"])
    skipped = {t: why for search in stage_searches(lsc, targets, 1).values()
               if (why := no_signal(lsc, selection, search, n_parameters)) for t in search["targets"]}
    if not skipped:
        return None
    smallest = min(skipped)
    guarded = safeguarded_variants(config)
    recommended = (f"recommended rule ({', '.join(f'variants.{v}' for v in guarded)}) skips its stages there and spends"
                   if guarded else "recommended rule would skip its stages there (no variant of this config runs it: add one "
                   "with linear_scaling.safeguard: true) and spend")
    return (f"note: {found.name} declares {n:,} training records: at target eps {', '.join(f'{e:g}' for e in sorted(skipped))} "
            f"the stage trials cannot rank r (at eps={smallest:g}, {skipped[smallest].removeprefix('no signal: ')}), so the "
            f"{recommended} the whole budget on one run at the public prior r (docs/methods.md §3); the paper's rule still "
            "searches on noise: compare it with random_search in the tables")


def existing_config(path: Path) -> tuple[dict, float]:
    """(the config `path` holds, as written; its δ) for --add: refused, naming the file, unless the workflow
    would run it (a file that is empty, a list, or invalid is not extended)."""
    config = load_config_file(path)
    if not isinstance(config, dict):
        raise ConfigError(f"--add: {path} holds no config (expected a mapping of keys such as studies and privacy)")
    validated = copy.deepcopy(config)
    try:
        validate_config(validated, SCHEMA, create_key=False)
    except DPHPOError as err:
        raise ConfigError(f"--add: {path} is not a valid config ({err}); fix it first (dphpo check-config {path})") from None
    return config, float(validated["privacy"]["delta"])


def refuse_shared_name(name: str, path: Path, out: Path) -> None:
    """ConfigError where another config beside `out` names other data `name`: both studies would write
    results/runs/<name>/ and each run would overwrite the other's results."""
    for other in sorted(out.parent.glob("*.y*ml")):
        if other.resolve() == out.resolve():
            continue
        try:
            config = yaml.safe_load(other.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # not a config this check can read; check-config reports it when it is run
        datasets = config.get("datasets") if isinstance(config, dict) else None
        section = datasets.get(name) if isinstance(datasets, dict) else None
        theirs = section.get("path") if isinstance(section, dict) else None
        if isinstance(theirs, str) and Path(theirs).resolve() != path.resolve():
            raise ConfigError(
                f"--name: {other} already has a dataset {name!r}, from {theirs}: a study of {path} under that name "
                f"would share results/runs/{name}/ with it and each run would overwrite the other's results; "
                f"pass another name, e.g. --name {dataset_name(path.parent)}_{name}"
            )


def own_name(path: Path) -> str:
    """`dataset_name`, made distinct from the registry's datasets (tweets.csv: tweets_own)."""
    name = dataset_name(path)
    return f"{name}_own" if name in DATASETS else name


def dataset_name(path: Path) -> str:
    """A dataset name from a file or folder name: ASCII letters, digits and _ (données.csv: donnees)."""
    ascii_stem = unicodedata.normalize("NFKD", path.stem.lower()).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "_", ascii_stem).strip("_") or "my_data"


def init_study(kind: str, path: str | Path, name: str | None, out: str | Path | None, add: bool = False,
               text_field: str | None = None, label_field: str | None = None,
               split_field: str | None = None, public_n_train: int | None = None,
               public_test: bool = False) -> tuple[Path, Inspection, str, list[str]]:
    """Inspect the data, write the config (new, or with the dataset added) and return (file, findings,
    command, notes on the data's size and δ). `public_n_train`: the training-set size the releases state
    (the user's declaration: the count of the files is private); `public_test`: the user declares a test
    split carved out of the training records public (data with a test split of their own need not)."""
    path = Path(path)
    if name is not None and not NAME.fullmatch(name):
        raise ConfigError(f"--name: {name!r} must be ASCII letters, digits and _ (it names the dataset's folders and "
                          f"config keys), e.g. --name {dataset_name(Path(name))}")
    if name in DATASETS:
        raise ConfigError(f"--name: {name!r} is a dataset of dphpo's registry: your study's features and results would share its "
                          f"paths (results/runs/{name}/...) and overwrite another config's; pick another, e.g. --name my_{name}")
    name = name or own_name(path)
    out = Path(out) if out else Path("config") / f"{name}.yaml"
    if out.is_symlink():  # --add updates the file the link names, which stays a link
        out = out.resolve()
    if out.is_dir():
        raise ConfigError(f"--out: {out} is a folder; expected the config file to write, e.g. {out / (name + '.yaml')}")
    if out.exists() and not add:
        raise ConfigError(f"{out} exists: pass --add to put {name} into it, or another --out")
    if add and not out.exists():
        raise ConfigError(f"--add: {out} does not exist (leave out --add to write a new config)")
    check_writable(out, "--out")  # before the data are read
    refuse_shared_name(name, path, out)
    embedded = yaml.safe_load(EMBEDDED.read_text())
    target = existing_config(out) if add else None
    section = dataset_section(kind, path.resolve(), text_field, label_field, split_field)
    section |= common_shape(section, embedded["extractors"] | ((target[0].get("extractors") or {}) if add else {}))
    found = inspect_data(name, section)
    declare(found, section, public_n_train, public_test)
    # --add keeps the config's namespace (or its absence: a config without one keeps its tables' paths)
    config, delta_note = (add_dataset(target[0], found, section, embedded, target[1]) if add
                          else (new_config(found, section, embedded, study_namespace(out, name)), None))
    validate_config(copy.deepcopy(config), SCHEMA, create_key=False)
    command = f"snakemake --cores all --configfile {out} --replace-workflow-config"
    write_text(out, render(config, command))
    return out, found, command, [n for n in (delta_note, size_note(config, found)) if n]


def declare(found: Inspection, section: dict, public_n_train: int | None, public_test: bool) -> None:
    """Put the user's declared training-set size into `section`; ConfigError where a declaration the
    guarantee needs is missing (the messages name what the files hold: the user's own terminal)."""
    if public_n_train is None:
        raise ConfigError(
            f"--public-n-train: the training-set size the releases state (DP-GD divides by it, delta is set from it). "
            f"Under add/remove DP the count of your files is private, so dphpo init does not write it for you: pass "
            f"a public number (a published size, or a round figure near it). Your files hold {found.n_train:,} training "
            f"records: pass --public-n-train {found.n_train} if you publish that count anyway"
        )
    if int(public_n_train) < 1:
        raise ConfigError(f"--public-n-train: expected a number of records >= 1, got {public_n_train}")
    if not public_test and not has_own_test_split(section):
        raise ConfigError(
            f"--public-test: {found.name} has no test split of its own (a test/ folder, a split column), so its test "
            f"records ({found.n_test:,}) are a per-record share of your private records, and every release publishes their "
            "exact metrics; pass --public-test to declare them public, or add a test split that is public"
        )
    section["public_n_train"] = int(public_n_train)
