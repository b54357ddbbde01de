"""Config `namespace` (issue 30): the study tables and figures of each config in their own folder, so that
the studies of several configs (the embedded one, a `dphpo init` study) never overwrite each other's tables."""

import copy
import re

import pytest
import yaml

from dphpo import layout
from dphpo.errors import ConfigError
from dphpo.studies.validate import SCHEMA, validate_config

from test_workflow import TINY, snakemake

#: The study's own tables and figures as `all` wrote them before namespaces (and still does without one).
TODAY = {
    "results/tables/linear_scaling.md",
    "results/tables/linear_scaling.csv",
    "results/tables/linear_scaling.html",
    "results/figures/linear_scaling_accuracy_vs_eps.png",
    "results/tables/hpo_comparison.md",
    "results/tables/hpo_comparison.csv",
    "results/tables/hpo_comparison.tex",
    "results/tables/hpo_comparison.html",
    "results/figures/hpo_comparison_accuracy_vs_eps.png",
    "results/tables/study_provenance.md",
    "results/tables/study_provenance.html",
    "results/logs/tables/linear_scaling.log",
    "results/logs/tables/hpo_comparison.log",
    "results/logs/tables/study_provenance.log",
}


def in_namespace(name: str) -> set[str]:
    """TODAY's files in namespace `name`: results/tables/<name>/..., results/figures/<name>/..., their logs."""
    return {re.sub(r"^(results/(?:logs/)?(?:tables|figures))/", rf"\1/{name}/", f) for f in TODAY}


def tiny_config(tmp_path, filename="config.yaml", **overrides):
    cfg = yaml.safe_load(TINY.read_text()) | overrides
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(cfg))
    return path


def planned(config_path, workdir) -> set[str]:
    """Every output, log and benchmark file a dry run of `all` plans, in an empty working directory."""
    proc = snakemake("-n", "--configfile", str(config_path), "--replace-workflow-config", "-d", str(workdir))
    files = set()
    for line in (proc.stdout + proc.stderr).splitlines():
        match = re.match(r"^\s+(output|log|benchmark): (.*)$", line)
        if match:
            files.update(f.strip() for f in match.group(2).split(", "))
    assert files, proc.stdout + proc.stderr
    return files


def study_files(files: set[str]) -> set[str]:
    """The files of the study's tables and figures (and their logs): not the runs, features or run logs."""
    return {f for f in files if re.match(r"results/(logs/)?(tables|figures)/", f)}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """The dry runs of the tiny study without a namespace and with two others (one workflow each)."""
    root = tmp_path_factory.mktemp("namespaces")
    out = {}
    for name in (None, "alpha", "beta.v2"):
        folder = root / (name or "none")
        folder.mkdir()
        config = tiny_config(folder) if name is None else tiny_config(folder, namespace=name)
        out[name] = planned(config, folder / "work")
    return out


def test_without_a_namespace_the_tables_keep_their_paths(plans):
    assert study_files(plans[None]) == TODAY


def test_a_namespace_puts_every_study_table_figure_and_log_in_its_folder(plans):
    files = study_files(plans["alpha"])
    assert files == in_namespace("alpha")
    assert not files & TODAY  # none of the un-namespaced files
    assert not any(re.match(r"results/(tables|figures)/[^/]+$", f) for f in plans["alpha"])
    # the runs are the same files: a namespace names tables, not settings
    assert plans["alpha"] - files == plans[None] - TODAY


def test_two_namespaces_plan_disjoint_tables(plans):
    alpha, beta = study_files(plans["alpha"]), study_files(plans["beta.v2"])
    assert beta == in_namespace("beta.v2")
    assert not alpha & beta


def test_a_bad_namespace_is_refused_naming_the_key(tmp_path):
    config = tiny_config(tmp_path, namespace="../x")
    proc = snakemake("-n", "--configfile", str(config), "--replace-workflow-config", "-d", str(tmp_path / "w"), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "invalid config: namespace: '../x' does not match" in out
    assert not (tmp_path / "w" / "results").exists()


@pytest.mark.parametrize(
    "value, message",
    [
        ("../x", "namespace: '../x' does not match"),
        ("a/b", "namespace: 'a/b' does not match"),
        ("", "namespace: '' does not match"),
        (".hidden", "namespace: '.hidden' does not match"),
        ("pareto", "namespace: 'pareto' should not be valid"),  # the paper target's figure folders
        ("heatmaps", "namespace: 'heatmaps' should not be valid"),
        (3, "namespace: 3 is not of type 'string'"),
    ],
)
def test_validation_refuses_namespaces_that_are_not_one_folder(value, message):
    cfg = yaml.safe_load(TINY.read_text()) | {"namespace": value}
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(cfg, SCHEMA, create_key=False)


def test_a_variant_has_no_namespace_of_its_own():
    cfg = yaml.safe_load(TINY.read_text()) | {"namespace": "mine", "variants": {"other": {"namespace": "theirs"}}}
    with pytest.raises(ConfigError, match=r"variants\.other: 'namespace'"):
        validate_config(cfg, SCHEMA, create_key=False)


def test_no_default_is_filled_in_so_existing_config_hashes_stay():
    cfg = yaml.safe_load(TINY.read_text())
    validate_config(cfg, SCHEMA, create_key=False)
    assert "namespace" not in cfg
    assert layout.namespace(cfg) is None
    named = copy.deepcopy(cfg) | {"namespace": "mine"}
    validate_config(named, SCHEMA, create_key=False)
    assert layout.namespace(named) == "mine"


def test_layout_paths():
    assert layout.table("hpo_comparison", "md") == "results/tables/hpo_comparison.md"
    assert layout.table("hpo_comparison", "md", "mine") == "results/tables/mine/hpo_comparison.md"
    assert layout.tables("linear_scaling", ("md", "csv"), "mine") == [
        "results/tables/mine/linear_scaling.md",
        "results/tables/mine/linear_scaling.csv",
    ]
    assert layout.figure("linear_scaling_accuracy_vs_eps", "mine") == "results/figures/mine/linear_scaling_accuracy_vs_eps.png"
    assert layout.figure("figure3_r_vs_eps") == "results/figures/figure3_r_vs_eps.png"
    assert layout.table_log("hpo_comparison") == "results/logs/tables/hpo_comparison.log"
    assert layout.table_log("hpo_comparison", "mine") == "results/logs/tables/mine/hpo_comparison.log"
    with pytest.raises(ValueError, match="namespace"):
        layout.namespace({"namespace": "../x"})
