"""`dphpo release` and `dphpo verify --release`: what a researcher publishes is private, and says what it costs."""

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from dphpo.cli import main
from dphpo.hpo import nonprivate, registry
from dphpo.hpo.common import LinearHeadTrainer
from dphpo.hpo.space import SearchSpace
from dphpo.io import SEAL_KEY, read_json, write_json
from dphpo.release import (
    MANIFEST,
    STATEMENT,
    STATEMENT_JSON,
    DatasetStatement,
    Release,
    build_bundle,
    set_bundle_times,
    verify_bundle,
    write_manifest,
)
from dphpo.studies.writer import write_result
from dphpo.verify import gdp_eps

from conftest import noise_scope
from test_baselines import CONFIG

REPO = Path(__file__).resolve().parents[1]
METHODS = ("linear_scaling", "random_search_k", "papernot_steinke", "grid_oracle")
GDP_METHODS = ("linear_scaling", "random_search_k")
RULE = CONFIG | {"linear_scaling": {"n_trials": 2, "stage_eps": [0.1, 0.2]}}


def _provenance(noise):
    return {"dataset": "digits", "extractor": "raw", "variant": "default", "accountant": {"adjacency": "add_remove"},
            "feature_cache": {"public_n_train": 1400}, "randomness": noise.describe()}


@pytest.fixture(scope="module")
def tree(digits_features, tmp_path_factory):
    """A results tree as the workflow lays it out: DP releases of four methods (the linear scaling rule
    with one search for both targets), the test-selected oracle, the non-private reference, internal
    logs, a stage file, a job log and a benchmark."""
    root = tmp_path_factory.mktemp("results")
    trainer = LinearHeadTrainer.from_config(digits_features, RULE)
    for seed in (0, 1):
        noise = noise_scope(seed)
        for method in METHODS:
            for r in registry.run_method(method, trainer, RULE, noise):
                d = root / "runs" / "digits" / "raw" / method / "default" / f"seed{seed}" / f"eps{r.target_eps:g}"
                write_result(r, d / "result.json", d / "model.npz", _provenance(noise) | {"seed": seed}, d / "internal.json")
        write_json(root / "runs/digits/raw/linear_scaling/default" / f"seed{seed}" / "stage1.json", {"trials": []})
    ref = nonprivate.run(trainer, SearchSpace.from_config(RULE["search_space"]))
    d = root / "runs/digits/raw/nonprivate"
    write_result(ref, d / "result.json", d / "model.npz", _provenance(noise_scope(0)), d / "internal.json")
    for name in ("logs/audit.log", "benchmarks/papernot_steinke.tsv"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("s\n1.0\n")
    return root


@pytest.fixture(scope="module")
def bundle(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles") / "bundle"
    build_bundle(tree, out)
    return out


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_bundle_holds_dp_releases_tables_and_statement_only(tree, bundle):
    files = _files(bundle)
    assert {STATEMENT, STATEMENT_JSON, MANIFEST, "report.html", "tables/hpo_comparison.md", "tables/linear_scaling.md"} <= set(files)
    assert not [f for f in files if f.endswith(("internal.json", ".tsv", ".log")) or "/stage" in f]
    assert not [f for f in files if "/nonprivate/" in f or "/grid_oracle/" in f]
    released = [f for f in files if f.endswith("result.json")]
    assert len(released) == 3 * 2 * 2  # three DP methods, two seeds, two targets
    for f in released:  # byte-identical copies of the tree's releases, each with its model
        assert (bundle / f).read_bytes() == (tree / f).read_bytes()
        assert (bundle / f).with_name("model.npz").is_file()
    assert verify_bundle(bundle) == []


def _mu_sq(records):
    """Σ μ² of records' entries, a search's identical stage block once (as the workflow shares it)."""
    total, blocks = 0.0, set()
    for f, record in records:
        entries = record["privacy"]["entries"]
        stages = [e for e in entries if e["what"].startswith("stage ")]
        block = (f.split("/eps")[0], json.dumps(stages, sort_keys=True))
        total += sum(e["count"] * e["mu"] ** 2 for e in entries if not (block in blocks and e in stages))
        blocks.add(block)
    return total


def test_statement_composes_every_release_about_the_dataset(tree, tmp_path):
    """GDP-only releases compose exactly: μ² adds up over every release."""
    build_bundle(tree, tmp_path / "b", methods=list(GDP_METHODS))
    statement = read_json(tmp_path / "b" / STATEMENT_JSON)
    (digits,) = statement["datasets"]
    records = [(r["file"], read_json(tmp_path / "b" / r["file"])) for r in digits["releases"]]
    assert len(records) == 8
    assert digits["composed"]["accountant"] == "gdp_closed_form"
    assert digits["composed"]["eps"] == pytest.approx(gdp_eps(math.sqrt(_mu_sq(records)), 1e-5), rel=1e-9)
    largest = max(r["eps"] for r in digits["releases"])
    assert digits["composed"]["eps"] > 2 * largest  # 4 releases at ε = 8 each cannot cost 8 together
    text = (tmp_path / "b" / STATEMENT).read_text()
    assert f"All {len(digits['releases'])} DP releases together:** ({digits['composed']['eps']:.4g}, 1e-05)-DP" in text
    for words in ("Privacy unit:** one record of its training split", "Adjacency:** add_remove", "Treated as public:**",
                  "the test split", "n = 1400", statement["noise_key_fingerprint"]):
        assert words in text


def test_a_shared_search_is_counted_once_and_separate_searches_apart(tree, tmp_path):
    """Releases of one search that carry the identical stage block pay for it once; searches whose
    stages differ (here: stage budgets as fractions of each target) each pay for their own."""
    build_bundle(tree, tmp_path / "b", methods=["linear_scaling"])
    (digits,) = read_json(tmp_path / "b" / STATEMENT_JSON)["datasets"]
    records = [(r["file"], read_json(tmp_path / "b" / r["file"])) for r in digits["releases"]]
    everything = sum(e["count"] * e["mu"] ** 2 for _, r in records for e in r["privacy"]["entries"])
    assert _mu_sq(records) == pytest.approx(everything)  # each target ran its own stages: nothing shared
    assert digits["composed"]["eps"] == pytest.approx(gdp_eps(math.sqrt(everything), 1e-5), rel=1e-9)
    f, record = records[0]
    twin = json.loads(json.dumps(record))  # a second target of the same search: same stage block
    twin["privacy"]["entries"] = [e for e in record["privacy"]["entries"] if e["what"].startswith("stage ")]
    shared = DatasetStatement("digits", [Release(f, record, None), Release(f.replace("/eps1/", "/eps8/"), twin, None)])
    assert shared.entries() == record["privacy"]["entries"]
    other_search = DatasetStatement("digits", [Release(f, record, None), Release(f.replace("seed0", "seed9"), twin, None)])
    assert len(other_search.entries()) == len(record["privacy"]["entries"]) + len(twin["privacy"]["entries"])


def test_a_searchs_null_model_and_a_reduced_release_pay_for_the_search_once(tree):
    """Audit: the null model's score, released once by a search at stage 1, was counted once per target;
    and a Table-14 reduced release (its own folder, `linear_scaling_reduced/<variant>`) carries its source's
    search, which was counted again. A release of another seed still pays for its own search."""
    f = "runs/digits/raw/linear_scaling/default/seed0/eps1/result.json"
    record = read_json(tree / f)
    search = [e for e in record["privacy"]["entries"] if e["what"].startswith("stage ")] + [
        {"what": "null model", "mu": 0.05, "count": 1, "mechanism": "gdp"}]
    final = {"what": "final run", "mu": 0.5, "count": 1, "mechanism": "gdp"}
    at = {eps: json.loads(json.dumps(record)) | {"privacy": {"entries": search + [final]}} for eps in (1, 8)}
    reduced = json.loads(json.dumps(at[8]))
    reduced["search"] = dict(reduced.get("search") or {}) | {"reduced": {"how": "noise", "source_variant": "default"}}
    st = DatasetStatement("digits", [Release(f, at[1], None), Release(f.replace("eps1", "eps8"), at[8], None),
                                     Release("runs/digits/raw/linear_scaling_reduced/red/seed0/eps4/result.json", reduced, None)])
    assert st.entries() == search + [final] * 3
    other = DatasetStatement("digits", [Release(f, at[1], None), Release(f.replace("seed0", "seed1"), at[8], None)])
    assert other.entries() == (search + [final]) * 2


def test_a_language_model_pretrained_on_a_private_corpus_costs_it_infinity():
    """Audit: a small LM pretrained without noise on tweets[0/2] and fine-tuned on tweets[1/2] sat in one
    statement with releases on all of tweets, stated finite: those records were in its public pretraining."""
    from dphpo.release import statements

    def lm(study, data, pretrained_on=None):
        task = {"model": "small GPT-2", "data": {"corpus": "tweets", **data}}
        if pretrained_on:
            task["pretraining"] = {"public_data": {"specs": pretrained_on}}
        return Release(f"language/{study}/linear_scaling/seed0/eps1/result.json", {
            "method": "linear_scaling", "private": True, "selection": {"rule": "noisy_train_accuracy", "private": True},
            "total_eps": 1.0, "total_delta": 1e-5, "target": {"eps": 1.0, "delta": 1e-5},
            "privacy": {"entries": [{"what": "final run", "mu": 0.5, "count": 1, "mechanism": "gdp"}]},
            "provenance": {"study": study, "trainer": {"task": task}}}, None)

    half = lm("half", {"partition": [1, 2]}, [{"name": "python_docs"}, {"name": "tweets", "partition": [0, 2]}])
    (alone,) = statements([half], include_nonprivate=False)  # disjoint halves: the pretraining saw none of its records
    assert not alone.bundle_is_infinite
    (both,) = statements([half, lm("all", {"partition": None})], include_nonprivate=False)
    assert both.public_uses == [half] and both.to_dict()["bundle_eps"] == "inf"
    vision = _release("runs/tweets/minilm/linear_scaling/default/seed0/eps1/result.json", "tweets", 0.5, {"extractor": "minilm"})
    (beside,) = statements([half, vision], include_nonprivate=False)  # a linear head on all of tweets' features
    assert beside.public_uses == [half]


def test_nonprivate_only_when_asked_and_stated_as_infinite(tree, tmp_path):
    build_bundle(tree, tmp_path / "b", include_nonprivate=True)
    (digits,) = read_json(tmp_path / "b" / STATEMENT_JSON)["datasets"]
    assert {r["method"] for r in digits["nonprivate"]} == {"nonprivate", "grid_oracle"}
    assert all(r["eps"] == "inf" for r in digits["nonprivate"])
    text = (tmp_path / "b" / STATEMENT).read_text()
    assert "**Not private**" in text
    # the DP releases compose to a finite ε, but the bundle as a whole protects nobody
    assert digits["bundle_eps"] == "inf" and "**This whole bundle:** ε = ∞" in text
    assert verify_bundle(tmp_path / "b") == []
    statement = read_json(tmp_path / "b" / STATEMENT_JSON)  # a statement that hides the ∞ is caught
    statement["datasets"][0]["bundle_eps"] = statement["datasets"][0]["composed"]["eps"]
    statement.pop(SEAL_KEY, None)
    write_json(tmp_path / "b" / STATEMENT_JSON, statement)
    write_manifest(tmp_path / "b")
    assert any("costs ε = ∞" in p for p in verify_bundle(tmp_path / "b"))


def test_verify_release_fails_the_raw_tree_and_passes_the_bundle(tree, bundle, capsys):
    assert main(["verify", "--release", str(bundle)]) == 0
    assert main(["verify", "--release", str(tree)]) == 1
    assert "MANIFEST: missing" in capsys.readouterr().out
    assert main(["verify", str(tree)]) == 0  # every release is sound, but the tree is no bundle
    assert "not a publishable bundle" in capsys.readouterr().out


@pytest.mark.parametrize(
    "sneak, named",
    [
        ("runs/digits/raw/linear_scaling/default/seed0/eps1/internal.json", "internal log"),
        ("runs/digits/raw/linear_scaling/default/seed0/stage1.json", "stage file"),
        ("benchmarks/papernot_steinke.tsv", "wall times"),
        ("logs/audit.log", "job logs"),
        ("runs/digits/raw/nonprivate/result.json", "non-private"),
    ],
)
def test_verify_release_names_a_file_that_must_not_be_published(tree, bundle, tmp_path, sneak, named):
    """Even listed in the manifest (a bundle edited by hand, then re-manifested), an internal file fails."""
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    (copy / sneak).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tree / sneak, copy / sneak)
    write_manifest(copy)
    problems = verify_bundle(copy)
    assert any(p.startswith(sneak) and named in p for p in problems), problems


def test_verify_release_catches_edits_and_a_wrong_statement(bundle, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    (copy / "tables/hpo_comparison.md").write_text("| made up |\n")
    assert any("tables/hpo_comparison.md: its sha256 does not match" in p for p in verify_bundle(copy))
    shutil.rmtree(copy)
    shutil.copytree(bundle, copy)
    statement = read_json(copy / STATEMENT_JSON)
    statement["datasets"][0]["composed"]["eps"] /= 2  # a careful forger reseals and re-manifests
    statement.pop(SEAL_KEY, None)
    write_json(copy / STATEMENT_JSON, statement)
    write_manifest(copy)
    assert any("composed ε" in p for p in verify_bundle(copy))
    (copy / STATEMENT).unlink()
    assert verify_bundle(copy) == ["PRIVACY.md: missing (build the bundle with `dphpo release RESULTS_DIR OUT_DIR`)"]


def test_verify_release_checks_the_whole_statement_and_every_model(bundle, tmp_path):
    """Audit: only the composed ε was checked; a statement that lowers its δ or a release's ε, rebuilt into
    PRIVACY.md and re-manifested, passed, as did a model with no release beside it (the non-private reference's)."""
    from dphpo.release import statement_markdown

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    statement = read_json(copy / STATEMENT_JSON)
    statement.pop(SEAL_KEY, None)
    statement["datasets"][0]["composed"]["delta"] = 1e-9
    statement["datasets"][0]["releases"][0]["eps"] = 0.05
    write_json(copy / STATEMENT_JSON, statement)
    (copy / STATEMENT).write_text(statement_markdown(statement))
    write_manifest(copy)
    problems = verify_bundle(copy)
    assert any("privacy.json: datasets.digits.composed.delta states 1e-09, the releases give" in p for p in problems), problems
    shutil.rmtree(copy)
    shutil.copytree(bundle, copy)
    orphan = copy / "runs/digits/raw/nonprivate/model.npz"
    orphan.parent.mkdir(parents=True)
    shutil.copyfile(bundle / next(p.relative_to(bundle) for p in bundle.rglob("model.npz")), orphan)
    write_manifest(copy)
    set_bundle_times(copy)
    assert verify_bundle(copy) == ["runs/digits/raw/nonprivate/model.npz: a model without its release (no result.json "
                                   "beside it states what it costs)"]
    # a second model beside a release (audit: the non-private reference's weights under another name passed)
    shutil.rmtree(copy)
    shutil.copytree(bundle, copy)
    npz = next(p for p in copy.rglob("model.npz"))
    torch.save({"w": torch.zeros(2)}, npz.with_name("model.pt"))
    write_manifest(copy)
    set_bundle_times(copy)
    folder = npz.parent.relative_to(copy).as_posix()
    assert verify_bundle(copy) == [f"{folder}: 2 models ({folder}/model.npz, {folder}/model.pt) beside one release, "
                                   "which accounts for one"]


def test_verify_fails_a_model_swapped_for_another_releases(tree, bundle, tmp_path):
    """Stop 57's audit: one release's model.npz replaced by another's (both real models) and the MANIFEST
    rebuilt passed `verify --release`: no record named its model. Each record now seals `model_sha256`; the
    bundle and the results tree both fail the swap, naming the file."""
    from dphpo.io import file_sha256
    from dphpo.verify import verify_tree

    for path in bundle.rglob("result.json"):
        assert read_json(path)["model_sha256"] == file_sha256(path.with_name("model.npz"))
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    first, second = sorted(copy.rglob("model.npz"))[:2]
    shutil.copyfile(second, first)
    write_manifest(copy)
    set_bundle_times(copy)
    rel = first.relative_to(copy).as_posix()
    want = f"{rel.replace('model.npz', 'result.json')}: model.npz is not the model this release trained"
    assert any(p.startswith(want) for p in verify_bundle(copy)), verify_bundle(copy)
    trees = tmp_path / "t"
    shutil.copytree(tree, trees)
    shutil.copyfile(trees / second.relative_to(copy), trees / first.relative_to(copy))
    checks, _ = verify_tree(trees)
    assert [c.file for c in checks if any("replaced" in p for p in c.problems)] == [rel.replace("model.npz", "result.json")]


def test_verify_release_fails_a_statement_that_drops_recorded_labels_or_states_no_number(bundle, tmp_path):
    """Audit: table_labels emptied in privacy.json, tables rebuilt from it and re-manifested, passed with the
    labels of settings chosen on private data gone; a composed eps of null ended in a traceback."""
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    labels = {"design_notes": {"search_space.eta": "chosen on the private training set"}}
    for path in copy.rglob("result.json"):  # releases whose settings were chosen on private data say so
        record = read_json(path)
        record["provenance"]["table_labels"] = labels
        write_json(path, record)
    write_manifest(copy)
    lacking = "privacy.json: its table_labels lack labels the releases record"
    assert read_json(copy / STATEMENT_JSON)["table_labels"] == {}
    assert any(lacking in p for p in verify_bundle(copy))
    statement = read_json(copy / STATEMENT_JSON)
    statement.pop(SEAL_KEY, None)
    statement["table_labels"] = labels
    write_json(copy / STATEMENT_JSON, statement)
    write_manifest(copy)
    assert not any(lacking in p for p in verify_bundle(copy))
    shutil.rmtree(copy)
    shutil.copytree(bundle, copy)
    statement = read_json(bundle / STATEMENT_JSON)
    statement.pop(SEAL_KEY, None)
    statement["datasets"][0]["composed"]["eps"] = None
    write_json(copy / STATEMENT_JSON, statement)
    write_manifest(copy)
    assert any("privacy.json: datasets.digits.composed.eps: expected a number, got None" in p for p in verify_bundle(copy))


@pytest.mark.parametrize("edit", ["tables/hpo_comparison.md", "tables/linear_scaling.csv", "PRIVACY.md", "report.html",
                                  "figures/hpo_comparison_accuracy_vs_eps.png", "figures/extra.png", "-tables/hpo_comparison.tex"])
def test_verify_release_rebuilds_tables_figures_and_pages_from_the_releases(bundle, tmp_path, edit):
    """A forger who edits a table, a figure or a page and then re-manifests (the MANIFEST is no signature):
    verify rebuilds each from the bundle's releases and names the file that differs, is extra or is missing."""
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    rel = edit.lstrip("-")
    if edit.startswith("-"):
        (copy / rel).unlink()
    elif rel.endswith(".png"):
        (copy / rel).write_bytes(((copy / rel).read_bytes() if (copy / rel).exists() else b"") + b"\0")
    else:
        (copy / rel).write_text((copy / rel).read_text().replace("linear scaling", "linear scaling (best)", 1) + " ")
    write_manifest(copy)
    set_bundle_times(copy)
    problems = verify_bundle(copy)
    assert len(problems) == 1 and problems[0].startswith(f"{rel}: "), problems
    assert ("missing" if edit.startswith("-") else "not a table" if rel == "figures/extra.png" else "edited") in problems[0]


def test_tables_read_only_the_labels_the_statement_records(tree, tmp_path):
    """The bundle's tables, built from the labels of the config that privacy.json records (table_labels), are
    byte-identical to those the full config gives; verify rebuilds them without the config, and with a
    --configfile from that config's labels."""
    from dphpo.release import find_releases
    from dphpo.report import comparison
    from dphpo.studies.config import table_labels

    config = {
        "design_notes": {"search_space.steps": "picked on digits' test accuracy", "studies.0.dataset": "ours",
                         "pretraining.imagenet": "the pretraining data were chosen by a probe on digits"},
        "settings_sources": {"random_search_k": "Papernot & Steinke (2022), Table 2"},
        "search_space": CONFIG["search_space"],
        "studies": [{"dataset": "digits", "extractor": "raw", "pretraining_overlap": "digits is its own public data"}],
        "extractors": {"raw": {"kind": "identity"}, "lite0": {"kind": "timm", "pretrain": "imagenet"}},
        "privacy": {"delta": 1e-5},
    }
    labels = table_labels(config)
    assert labels["studies"] == config["studies"] and labels["extractors"]["lite0"] == {"pretrain": "imagenet"}
    assert "privacy" not in labels
    build_bundle(tree, tmp_path / "b", config=config)
    assert read_json(tmp_path / "b" / STATEMENT_JSON)["table_labels"] == labels
    private = [str(tmp_path / "b" / r.rel) for r in find_releases(tmp_path / "b") if r.record.get("private", True)]
    comparison.make(private, [], md=str(tmp_path / "full.md"), csv_path=str(tmp_path / "full.csv"),
                    figure=str(tmp_path / "full.png"), config=config)
    text = (tmp_path / "b" / "tables/hpo_comparison.md").read_text()
    assert text == (tmp_path / "full.md").read_text()
    assert (tmp_path / "b" / "tables/hpo_comparison.csv").read_text() == (tmp_path / "full.csv").read_text()
    assert "picked on digits' test accuracy" in text and "Papernot & Steinke" in text and "digits × raw" in text
    assert verify_bundle(tmp_path / "b") == []
    problems = verify_bundle(tmp_path / "b", [str(REPO / "tests/configs/tiny.yaml")])  # another study's labels
    assert any(p.startswith("tables/hpo_comparison.md: not what the bundle's releases and the config give") for p in problems)


def test_release_refuses_an_unsafe_output_folder(tree, bundle, capsys):
    assert main(["release", str(tree), str(bundle)]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
    assert main(["release", str(tree), str(tree / "bundle")]) == 2
    assert "inside RESULTS_DIR" in capsys.readouterr().err
    a_file = bundle.parent / "a_file"
    a_file.write_text("")
    assert main(["release", str(tree), str(a_file)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_a_failed_build_leaves_no_half_bundle(tree, tmp_path, monkeypatch):
    import dphpo.release as release

    def broken(*args, **kwargs):
        raise KeyError("test_accuracy")

    monkeypatch.setattr(release, "build_tables", broken)
    with pytest.raises(KeyError):
        build_bundle(tree, tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_own_data_must_declare_its_test_split_public(tmp_path):
    """Every release publishes exact test metrics: a test split of the user's own data is refused unless
    declared public, before any job; the declaration is hashed into the run settings (PRIVACY.md states it)."""
    import copy

    import numpy as np
    import yaml
    from snakemake.utils import validate

    from dphpo.errors import ConfigError
    from dphpo.studies import config as study_config

    y = np.arange(40) % 2
    np.savez(tmp_path / "f.npz", train_x=np.eye(40, 4), train_y=y, test_x=np.eye(40, 4), test_y=y)
    cfg = yaml.safe_load((REPO / "tests/configs/tiny.yaml").read_text())
    cfg["datasets"] = {"mine": {"kind": "features", "path": str(tmp_path / "f.npz"), "public_n_train": 40}}
    cfg["studies"] = [{"dataset": "mine", "extractor": "given"}]
    cfg["extractors"] = {"given": {"kind": "identity"}}
    cfg.pop("baselines")
    validate(cfg, schema=str(REPO / "workflow/schemas/config.schema.yaml"))
    with pytest.raises(ConfigError, match=r"datasets\.mine\.test_split: .*declare it public"):
        study_config.check_config(copy.deepcopy(cfg))
    cfg["datasets"]["mine"]["test_split"] = "public"
    # the label set too is declared, never read off the private data (a new label adds a model column)
    with pytest.raises(ConfigError, match=r"datasets\.mine\.classes: declare your data's class names"):
        study_config.check_config(copy.deepcopy(cfg))
    cfg["datasets"]["mine"]["classes"] = ["no", "yes"]
    study_config.check_config(copy.deepcopy(cfg))
    assert study_config.run_settings(cfg, "given", "mine", "linear_scaling")["test_split"] == "public"
    assert study_config.run_settings(cfg, "given", "digits", "linear_scaling")["test_split"] == "official"


def test_release_refuses_a_record_moved_into_another_runs_folder(tree, tmp_path, capsys):
    copy = tmp_path / "results"
    shutil.copytree(tree, copy)
    a, b = (copy / f"runs/digits/raw/random_search_k/default/seed0/eps{e}/result.json" for e in ("1", "8"))
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    assert main(["release", str(copy), str(tmp_path / "b")]) == 2
    assert "eps1/result.json is not the record its path names (its eps is '8'" in capsys.readouterr().err


def test_language_releases_compose_by_corpus():
    """Two language studies on one corpus (and a vision study of it) are releases about the same people."""
    minilm = {"provenance": {"study": "a", "trainer": {"task": {"hidden_cache": {"data": {"corpus": "tweets"}}}}}}
    gpt2 = {"provenance": {"study": "b", "trainer": {"task": {"data": {"corpus": "tweets"}}}}}
    vision = {"provenance": {"dataset": "tweets", "trainer": "linear_head"}}
    assert {Release("x", r, None).dataset for r in (minilm, gpt2, vision)} == {"tweets"}



def test_question_answering_releases_compose_by_their_corpus():
    """Audit: the question-answering task's data block named no corpus, so two SQuAD studies were stated apart,
    each at its own ε, never composed."""
    from dphpo.tasks.question_answering import data_provenance

    prov = {"data": data_provenance({"name": "squad_v2", "path": "squad", "max_train": 100}, 0)}
    records = [{"provenance": {"study": name, "trainer": {"task": prov}}} for name in ("squad_a", "squad_b")]
    assert {Release("x", r, None).dataset for r in records} == {"squad_v2"}


def test_the_end_of_a_run_says_in_plain_words_what_the_tree_protects(tree, bundle, tmp_path):
    """Issue 30: one line per dataset (unit, adjacency, each target's (ε, δ), all releases composed, what is
    public), the same composition as the bundle's statement, then the command that publishes it."""
    from dphpo.release import plain_summary

    digits, publish = plain_summary(tree)
    (statement,) = read_json(bundle / STATEMENT_JSON)["datasets"]
    composed = statement["composed"]
    assert digits.startswith("digits: each released model is (1 / 8, 1e-05)-DP at its target ε, its search included, "
                             "with respect to one of its 1,400 training records (add_remove)")
    assert f"all 12 DP releases about it under {tree} together: ({composed['eps']:.4g}, {composed['delta']:.3g})-DP" in digits
    assert "Treated as public: the declared training-set size n = 1400" in digits and "the test split" in digits
    assert f"dphpo release {tree} release" in publish
    assert plain_summary(tmp_path / "empty") == []


def _release(rel: str, dataset: str, mu: float, feature_cache: dict, private: bool = True):
    from dphpo.privacy.ledger import LedgerEntry
    from dphpo.release import Release

    record = {"private": private, "total_delta": 1e-5, "target": {"eps": 1.0, "delta": 1e-5}, "method": "linear_scaling",
              "privacy": {"entries": [LedgerEntry(what="final run", mu=mu).to_dict()]},
              "provenance": {"dataset": dataset, "extractor": feature_cache.pop("extractor", "x"), "feature_cache": feature_cache}}
    return Release(rel, record, None)


def test_a_dp_pretraining_stage_composes_into_its_datasets_statement_once_and_public_pretraining_costs_infinity():
    """Issue (audit): an extractor's DP continual pre-training on cifar100 was a separate guarantee no bundle
    stated, and cifar100 used as an extractor's public pretraining data by cifar10's releases left cifar100's
    statement at its own releases' ε. Now the stage composes into cifar100's statement (once: every release
    on that extractor post-processes the one stage), and the other releases make its whole-bundle ε = ∞."""
    from dphpo.privacy.ledger import Ledger, LedgerEntry
    from dphpo.release import statement_markdown, statements

    stage_entries = Ledger([LedgerEntry.prv("DP continual pre-training on cifar100", 0.01, 1.2, 300)]).to_dict(1e-5)["entries"]
    stage = {"what": "DP continual pre-training of the extractor (Bu et al.)", "pretraining": "dp", "weights_sha256": "a" * 64,
             "dataset": "cifar100", "eps": 2.0, "delta": 1e-5, "accountant": "prv", "entries": stage_entries}
    on_stage = [_release(f"runs/cifar10/dp/linear_scaling/default/seed{s}/eps1/result.json", "cifar10", 0.5,
                         {"extractor": "dp", "upstream_privacy": dict(stage)}) for s in range(2)]
    own = _release("runs/cifar100/raw/linear_scaling/default/seed0/eps1/result.json", "cifar100", 0.3, {"extractor": "raw"})
    (c10, c100) = statements(on_stage + [own], include_nonprivate=False)
    assert c100.dataset == "cifar100" and c100.stages == [stage]  # once, though two releases use the extractor
    alone = Ledger.from_dict({"entries": own.record["privacy"]["entries"]}).total(1e-5)["eps"]
    both = Ledger.from_dict({"entries": stage_entries + own.record["privacy"]["entries"]}).total(1e-5)["eps"]
    assert c100.composed()["eps"] == pytest.approx(both) and both > alone + 0.1
    assert c10.composed()["eps"] == pytest.approx(Ledger([LedgerEntry(what="r", mu=0.5 * 2**0.5)]).total(1e-5)["eps"])
    assert not c100.bundle_is_infinite and c100.to_dict()["pretraining_stages"][0]["eps"] == 2.0
    assert any("accounted in that dataset's statement" in p for p in c10.public_parts())

    public = _release("runs/cifar10/pub/linear_scaling/default/seed0/eps1/result.json", "cifar10", 0.5,
                      {"extractor": "resnet20_cifar100", "pretraining_data": "cifar100"})
    sts = {st.dataset: st for st in statements(on_stage + [own, public], include_nonprivate=False)}
    assert sts["cifar100"].public_uses == [public] and sts["cifar100"].to_dict()["bundle_eps"] == "inf"
    text = statement_markdown({"datasets": [st.to_dict() for st in sts.values()], "noise_key_fingerprint": "0"})
    assert "use an extractor pretrained on cifar100 without noise" in text
    # a stage on a dataset without releases of its own still gets its statement
    (only_c10, only_c100) = statements(on_stage, include_nonprivate=False)
    assert only_c100.releases == [] and only_c100.composed()["eps"] == pytest.approx(
        Ledger.from_dict({"entries": stage_entries}).total(1e-5)["eps"])
    # another run with the very same guarantee (a second section, or a new version of this one) is another
    # release about cifar100: both compose (audit: they were one stage, the statement's ε understated)
    again = _release("runs/cifar10/dp2/linear_scaling/default/seed0/eps1/result.json", "cifar10", 0.5,
                     {"extractor": "dp2", "upstream_privacy": stage | {"pretraining": "dp2", "weights_sha256": "b" * 64}})
    two = {st.dataset: st for st in statements(on_stage + [again], include_nonprivate=False)}["cifar100"]
    assert len(two.stages) == 2 and two.composed()["eps"] == pytest.approx(
        Ledger.from_dict({"entries": stage_entries * 2}).total(1e-5)["eps"])


def test_releases_accounted_for_different_adjacencies_are_never_composed(tree, tmp_path):
    """Audit: a replace-one release and an add/remove one (a DP pre-training stage is add/remove only) were
    composed into one ε labelled 'add_remove, replace_one', valid for neither. The bundle is refused, naming
    the dataset, and verify fails a statement that mixes them."""
    from dphpo.errors import ConfigError
    from dphpo.release import statements

    stage = {"what": "DP continual pre-training", "pretraining": "dp", "weights_sha256": "a" * 64, "dataset": "cifar100",
             "eps": 2.0, "delta": 1e-5, "accountant": "prv", "entries": []}
    on_stage = _release("runs/cifar10/dp/linear_scaling/default/seed0/eps1/result.json", "cifar10", 0.5,
                        {"extractor": "dp", "upstream_privacy": stage})
    own = _release("runs/cifar100/raw/linear_scaling/default/seed0/eps1/result.json", "cifar100", 0.3, {"extractor": "raw"})
    own.record["provenance"]["accountant"] = {"adjacency": "replace_one"}
    sts = {st.dataset: st for st in statements([on_stage, own], include_nonprivate=False)}
    assert sts["cifar10"].mixed_adjacency() is None
    assert "different adjacencies (add_remove, replace_one" in sts["cifar100"].mixed_adjacency()
    copy = tmp_path / "results"
    shutil.copytree(tree, copy)
    path = next(copy.rglob("runs/digits/raw/random_search_k/**/result.json"))
    record = read_json(path)
    record["provenance"]["accountant"]["adjacency"] = "replace_one"
    write_json(path, record)
    with pytest.raises(ConfigError, match="releases about digits are accounted for different adjacencies"):
        build_bundle(copy, tmp_path / "b")


def test_a_bundles_truncation_delta_is_paid_at_the_composed_eps():
    """Capped K: each release alone pays (1 + e^ε_i)·p_i; the releases together differ from their accounted
    searches with probability ≤ Σp, paid at the composed ε (a sum of the releases' own δ_cap undercounted it)."""
    import math

    from dphpo.privacy.ledger import Ledger
    from dphpo.release import statements

    releases = []
    for s in range(3):
        r = _release(f"runs/d/raw/papernot_steinke/default/seed{s}/eps1/result.json", "d", 1.0, {"extractor": "raw"})
        r.record["privacy"]["truncation"] = {"p_exceed": 1e-12, "delta_cap": (1 + math.e) * 1e-12}
        releases.append(r)
    (st,) = statements(releases, include_nonprivate=False)
    c = st.composed()
    eps = Ledger.from_dict({"entries": st.entries()}).total(1e-5)["eps"]
    assert c["eps"] == pytest.approx(eps) and eps > 3.0
    assert c["truncation_delta"] == pytest.approx((1 + math.exp(eps)) * 3e-12)
    assert c["delta"] == pytest.approx(1e-5 + (1 + math.exp(eps)) * 3e-12)
    assert c["truncation_delta"] > 3 * (1 + math.e) * 1e-12  # more than the releases' own δ_cap summed


def test_the_same_records_under_two_dataset_names_compose_into_one_statement():
    """Stop 57's audit: one file configured as two datasets (or added twice by `dphpo init --add`) got two
    statements, each stating half of what publishing both costs its people. Releases carrying one keyed data
    checksum compose under the first name, which names the others; other data stays apart, and a DP
    pre-training stage on the same records under a third name composes there too."""
    from dphpo.privacy.ledger import Ledger, LedgerEntry
    from dphpo.release import statement_markdown, statements

    a = _release("runs/mnist/raw/linear_scaling/default/seed0/eps1/result.json", "mnist", 0.5, {"extractor": "raw", "dataset_checksum_mac": "m1"})
    b = _release("runs/mnist_copy/raw/linear_scaling/default/seed0/eps1/result.json", "mnist_copy", 0.5,
                 {"extractor": "raw", "dataset_checksum_mac": "m1"})
    other = _release("runs/digits/raw/linear_scaling/default/seed0/eps1/result.json", "digits", 0.5,
                     {"extractor": "raw", "dataset_checksum_mac": "d1"})
    (d, m) = statements([a, b, other], include_nonprivate=False)
    assert (d.dataset, m.dataset, m.same_data, d.same_data) == ("digits", "mnist", ["mnist_copy"], [])
    both = Ledger([LedgerEntry(what="r", mu=0.5 * 2**0.5)]).total(1e-5)["eps"]
    assert m.composed()["eps"] == pytest.approx(both) and d.composed()["eps"] < both - 0.1
    text = statement_markdown({"datasets": [m.to_dict(), d.to_dict()]})
    assert "released under the name(s) mnist_copy" in text and m.to_dict()["same_data_as"] == ["mnist_copy"]
    assert "same_data_as" not in d.to_dict()

    stage_entries = Ledger([LedgerEntry(what="DP continual pre-training", mu=0.5)]).to_dict(1e-5)["entries"]
    stage = {"what": "DP continual pre-training of the extractor (Bu et al.)", "pretraining": "dp", "weights_sha256": "a" * 64,
             "dataset": "zz_mnist_again", "dataset_checksum_mac": "m1", "eps": 2.0, "delta": 1e-5, "entries": stage_entries}
    on_stage = _release("runs/digits/dp/linear_scaling/default/seed0/eps1/result.json", "digits", 0.5,
                        {"extractor": "dp", "dataset_checksum_mac": "d1", "upstream_privacy": stage})
    (d, m) = statements([a, b, on_stage], include_nonprivate=False)
    assert m.same_data == ["mnist_copy", "zz_mnist_again"] and m.stages == [stage] and d.stages == []
    three = Ledger([LedgerEntry(what="r", mu=(0.5**2 * 3) ** 0.5)]).total(1e-5)["eps"]
    assert m.composed()["eps"] == pytest.approx(three)


@pytest.mark.parametrize(("mu", "p_exceed", "dominated"), [(10.0, (2 / 3) ** 200, True), (10.0, None, False), (45.0, 1e-320, True)])
def test_a_bundle_pays_its_trial_caps_at_its_own_eps_and_says_when_they_dominate(mu, p_exceed, dominated):
    """Stop 57's audit: caps sized for one release at its target (geometric E[K] = 3 capped at 200: P[K > 200]
    = 6e-36) leave a bundle of ε ≈ 230 with δ = 1, stated without a word. The statement says when the cap's
    term dominates δ and how to fix it; `max_trials: auto` (P[K > cap] ≤ 1e-250) keeps the configured δ. A
    bundle past ε = 709 pays (1 + e^ε)·Σp in full (e^ε was clamped at e^700: 1e-320 of tail became 1e-16)."""
    from dphpo.hpo.papernot_steinke import TrialCountDistribution
    from dphpo.release import cap_dominates, statement_markdown, statements

    auto_tail = TrialCountDistribution("geometric", 3.0).tail(TrialCountDistribution("geometric", 3.0).auto_cap())
    releases = []
    for s in range(3 if mu < 20 else 1):
        r = _release(f"runs/d/raw/papernot_steinke/default/seed{s}/eps1/result.json", "d", mu, {"extractor": "raw"})
        r.record["privacy"]["truncation"] = {"p_exceed": auto_tail if p_exceed is None else p_exceed}
        releases.append(r)
    (st,) = statements(releases, include_nonprivate=False)
    c = st.composed()
    assert c["eps"] > (200 if mu < 20 else 709)
    assert cap_dominates(c) is dominated and (c["delta"] == 1.0) is dominated
    assert dominated or c["delta"] == 1e-5
    assert ("`max_trials: auto` makes negligible" in statement_markdown({"datasets": [st.to_dict()]})) is dominated


def test_bundle_files_carry_one_time_so_they_reveal_no_job_run_time(tree, bundle, tmp_path):
    """A results tree's file times are when each job ended (their gaps: run times, which grow with the
    private N and with Papernot-Steinke's secret K); the bundle sets one fixed time on every file, and
    verify fails a bundle whose times spread."""
    import os

    from dphpo.release import BUNDLE_MTIME

    assert {p.stat().st_mtime for p in bundle.rglob("*")} == {BUNDLE_MTIME}
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    assert verify_bundle(copy) == []
    result = next(copy.rglob("result.json"))
    os.utime(result, (BUNDLE_MTIME + 4.8, BUNDLE_MTIME + 4.8))  # a job that ran 4.8 s
    (problem,) = verify_bundle(copy)
    assert "file modification times differ by 5 s" in problem and f"touch -d @{BUNDLE_MTIME}" in problem


def test_a_bundle_built_without_the_config_labels_its_tables_as_the_config_would(tree, tmp_path):
    """The releases' provenance records what the tables read of the config (`table_labels`: design_notes with
    their values, settings_sources): `dphpo release` without --configfile, as `make study` prints it, writes
    the tables it writes with the config, and verify --release with the config accepts them."""
    from dphpo.report.tables import PRIVATE_DESIGN
    from dphpo.studies.writer import provenance

    cfg = CONFIG | {"design_notes": {"search_space.steps": "picked by looking at digits' test accuracy"},
                    "settings_sources": {"random_search_k": "Papernot & Steinke (2022)"}}
    assert provenance(cfg)["table_labels"] == {
        "search_space": {"steps": CONFIG["search_space"]["steps"]}, "design_notes": cfg["design_notes"],
        "settings_sources": cfg["settings_sources"]}
    copy = tmp_path / "results"
    shutil.copytree(tree, copy)
    for path in copy.rglob("result.json"):
        record = read_json(path)  # read_json checks and drops the seal; write_json seals anew
        record["provenance"]["table_labels"] = provenance(cfg)["table_labels"]
        write_json(path, record)
    build_bundle(copy, tmp_path / "bundle")
    build_bundle(copy, tmp_path / "with_config", config=cfg)
    for table in ("hpo_comparison", "linear_scaling"):
        text = (tmp_path / "bundle" / "tables" / f"{table}.md").read_text()
        assert f"{PRIVATE_DESIGN}: search_space.steps: picked by looking at digits' test accuracy" in text
        assert text == (tmp_path / "with_config" / "tables" / f"{table}.md").read_text()
    assert "Papernot & Steinke (2022)" in (tmp_path / "bundle" / "tables" / "hpo_comparison.md").read_text()
    build_bundle(tree, tmp_path / "plain")  # releases without table labels: no label
    assert PRIVATE_DESIGN not in (tmp_path / "plain" / "tables" / "hpo_comparison.md").read_text()


def test_a_result_that_is_no_json_object_is_refused_by_name(tmp_path):
    """Audit: a result.json holding a JSON list raised an AttributeError traceback."""
    from dphpo.errors import OutputFileError
    from dphpo.release import find_releases

    path = tmp_path / "runs" / "digits" / "raw" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    with pytest.raises(OutputFileError, match=r"result\.json: expected a release record \(a JSON object\), got a JSON list"):
        find_releases(tmp_path)
