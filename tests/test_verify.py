"""`dphpo verify`: a published results tree checked from its files alone."""

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from dphpo.cli import main
from dphpo.hpo import registry
from dphpo.hpo.common import LinearHeadTrainer
from dphpo.io import SEAL_KEY, seal
from dphpo.studies.writer import write_result
from dphpo.verify import expected_hashes, gdp_eps, verify_tree

from conftest import noise_scope
from test_baselines import CONFIG

TINY = Path(__file__).parent / "configs" / "tiny.yaml"


METHODS = ("random_search_k", "papernot_steinke", "koskela")


@pytest.fixture(scope="module")
def tree_config(tmp_path_factory):
    """tests/configs/tiny.yaml narrowed to what the tree holds: seed 0 and three baselines."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["seeds"] = [0]
    cfg["baselines"]["methods"] = list(METHODS)
    cfg["baselines"].pop("oso_dpsgd_cnn")
    path = tmp_path_factory.mktemp("config") / "tree.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def tree(digits_features, tree_config, tmp_path_factory):
    """A results tree as the workflow writes it: GDP (random search, the linear scaling rule), RDP
    (Papernot–Steinke) and RDP + subsampling (Koskela) releases, each with the config hash of
    `tree_config` and the identity its path names."""
    from dphpo.studies.validate import load_config

    root = tmp_path_factory.mktemp("published")
    config_hash = expected_hashes(load_config([tree_config]))["default"]
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    for method in ("linear_scaling", *METHODS):
        for r in registry.run_method(method, trainer, CONFIG, noise_scope(0)):
            d = root / "runs" / "digits" / "raw" / method / "default" / "seed0" / f"eps{r.target_eps:g}"
            d.mkdir(parents=True)
            prov = {"config_hash": config_hash, "variant": "default", "dataset": "digits", "extractor": "raw", "seed": 0}
            write_result(r, d / "result.json", d / "model.npz", prov, d / "internal.json")
    return root


def _copy(tree, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(tree, dst)
    return dst


def _edit(path: Path, change, seal_mode: str):
    """seal_mode: keep the old seal, reseal (a careful forger), or drop it."""
    data = json.loads(path.read_text())
    old = data.pop(SEAL_KEY)
    change(data)
    if seal_mode != "drop":
        data[SEAL_KEY] = seal(data) if seal_mode == "reseal" else old
    path.write_text(json.dumps(data))


def _first(root, method="random_search_k"):
    return sorted((root / "runs").rglob(f"{method}/**/result.json"))[0]


def test_gdp_closed_form_matches_the_paper_check():
    # docs/methods.md §2: n = 3, eps1 = 0.1, eps2 = 0.2, eps_f = 0.88 gives total eps = 0.9963 at delta = 1e-5
    from dphpo.privacy.gdp import mu_from_eps

    mus = [mu_from_eps(0.1, 1e-5)] * 3 + [mu_from_eps(0.2, 1e-5)] * 3 + [mu_from_eps(0.88, 1e-5)]
    assert gdp_eps(sum(m * m for m in mus) ** 0.5, 1e-5) == pytest.approx(0.9963, abs=5e-5)


def test_a_fresh_tree_passes_with_its_config(tree, tree_config, capsys):
    checks, summary = verify_tree(tree, [tree_config])
    assert summary["failed"] == 0 and summary["releases"] == 4 * len(CONFIG["privacy"]["target_eps"])
    assert summary["missing (the config implies them)"] == 0
    assert {c.how.split(" ")[0] for c in checks} == {"GDP", "RDP"}
    assert summary["largest |claimed − recomputed| ε"] < 1e-4
    assert main(["verify", str(tree), "--configfile", str(tree_config)]) == 0
    assert "| file |" in capsys.readouterr().out


def test_verify_checks_completeness_against_the_config(tree, tree_config, tmp_path):
    """A whole method's releases deleted, or a config that implies more (another seed), fails."""
    root = _copy(tree, tmp_path)
    shutil.rmtree(root / "runs/digits/raw/koskela")
    checks, summary = verify_tree(root, [tree_config])
    assert summary["missing (the config implies them)"] == 2
    assert {c.file for c in checks if "missing" in "; ".join(c.problems)} == {
        f"runs/digits/raw/koskela/default/seed0/eps{e:g}/result.json" for e in CONFIG["privacy"]["target_eps"]}
    assert main(["verify", str(root), "--configfile", str(tree_config)]) == 1
    more = tmp_path / "more.yaml"  # several files, merged as snakemake merges them: the second adds a seed
    more.write_text("seeds: [0, 1]\n")
    _, summary = verify_tree(tree, [tree_config, more])
    assert summary["missing (the config implies them)"] == 4 * len(CONFIG["privacy"]["target_eps"])
    fewer = tmp_path / "fewer.yaml"  # a config that no longer runs Koskela: its releases are extra
    fewer.write_text("baselines: {methods: [random_search_k, papernot_steinke]}\n")
    checks, summary = verify_tree(tree, [tree_config, fewer])
    extra = [c for c in checks if "not implied by the config" in "; ".join(c.problems)]
    assert sorted(c.file for c in extra) == sorted(c.file for c in checks if c.method == "koskela") and len(extra) == 2


def test_two_targets_swapped_between_folders_fail(tree, tmp_path):
    root = _copy(tree, tmp_path)
    a, b = (root / f"runs/digits/raw/random_search_k/default/seed0/eps{e:g}/result.json" for e in CONFIG["privacy"]["target_eps"][:2])
    a_text = a.read_text()
    a.write_text(b.read_text())
    b.write_text(a_text)
    checks, summary = verify_tree(root)
    assert summary["failed"] == 2
    assert all("not the record its path names: its eps is" in "; ".join(c.problems) for c in checks if not c.ok)


def test_a_non_finite_number_in_a_release_is_a_failure_naming_the_file(tree, tmp_path, capsys):
    root = _copy(tree, tmp_path)
    path = _first(root)
    path.write_text(path.read_text().replace('"test_accuracy": ', '"test_accuracy": NaN, "x": ', 1))
    checks, summary = verify_tree(root)
    (failed,) = [c for c in checks if not c.ok]
    assert failed.file == str(path.relative_to(root)) and "non-finite number" in failed.problems[0]
    assert main(["verify", str(root)]) == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("seeds: [0, 1\n", r"bad.yaml: line \d+, column \d+: invalid YAML"),
        ("seeds: [0]\nseeds: [1]\n", r"bad.yaml: line 2: key 'seeds' is written twice"),
        ("seeds: [-1]\n", r"seeds"),
        ("- just a list\n", r"bad.yaml: expected a mapping"),
    ],
)
def test_a_bad_verify_config_exits_2_naming_file_or_key(tree, tmp_path, capsys, text, message):
    import re

    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["verify", str(tree), "--configfile", str(TINY), str(bad)]) == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "case, change, seal_mode, message",
    [
        ("edited test accuracy", lambda d: d.update(test_accuracy=0.9747), "keep", "edited after it was written"),
        ("removed seal", lambda d: None, "drop", "the seal was removed"),
        ("removed ledger entry", lambda d: d["privacy"]["entries"].pop(0), "reseal", "an entry missing"),
        ("ledger total lowered", lambda d: (d.update(total_eps=d["total_eps"] * 0.5), d["privacy"]["total"].update(eps=d["total_eps"])), "reseal", "is below the ledger's"),
        ("released private statistic", lambda d: d.update(train_accuracy=0.99), "reseal", "does not cover: train_accuracy"),
        # a ledger no accountant can read backs no claim (it passed, however small the claimed ε)
        ("no total delta", lambda d: (d.pop("total_delta"), d.update(total_eps=0.01)), "reseal", "ledger cannot be recomputed"),
        ("unknown mechanism", lambda d: d["privacy"]["entries"][0].update(mechanism="laplace"), "reseal", "ledger cannot be recomputed"),
        ("negative mu", lambda d: d["privacy"]["entries"][0].update(mu=-1.0), "reseal", "ledger cannot be recomputed"),
        ("no total eps", lambda d: d.pop("total_eps"), "reseal", "states no total_eps"),
        ("delta over the target", lambda d: d.update(total_delta=0.1), "reseal", "total δ 0.1 exceeds the target 1e-05"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_each_tampering_fails_naming_the_file(tree, tmp_path, case, change, seal_mode, message):
    root = _copy(tree, tmp_path)
    path = _first(root)
    _edit(path, change, seal_mode)
    checks, summary = verify_tree(root)
    failed = [c for c in checks if not c.ok]
    assert summary["failed"] == 1 and failed[0].file == str(path.relative_to(root))
    assert message in "; ".join(failed[0].problems), failed[0].problems
    assert main(["verify", str(root)]) == 1


def test_a_config_that_asks_for_other_settings_fails(tree, tree_config, tmp_path):
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump({"training": {"clip_norm": 0.5}}))
    checks, summary = verify_tree(tree, [tree_config, path])
    assert summary["failed"] == summary["releases"]
    assert all("is not the given config's" in c.problems[0] for c in checks)


def test_bad_arguments_exit_2(tmp_path):
    assert main(["verify", str(tmp_path / "missing")]) == 2
    assert main(["verify", str(tmp_path)]) == 2  # no release in it
    assert main(["verify", str(tmp_path), "--configfile", str(tmp_path / "nope.yaml")]) == 2


# ------------------------------------------------------------------------------------------
# consumers refuse inputs of other settings (study.check_inputs: final run, tables)


def _validated(cfg: dict) -> dict:
    from snakemake.utils import validate

    validate(cfg, schema=str(Path(__file__).parents[1] / "workflow" / "schemas" / "config.schema.yaml"))
    return cfg


def test_a_result_of_other_settings_is_refused_naming_the_keys(tmp_path):
    from dphpo.errors import OutputFileError
    from dphpo.io import write_json
    from dphpo.studies import config as study_config
    from dphpo.studies import writer

    cfg = _validated(yaml.safe_load(TINY.read_text()))
    prov = writer.provenance(cfg, dataset="digits", extractor="raw", variant="default", method="random_search")
    assert prov["settings_hash"] == study_config.run_settings_hash(cfg, "default", "raw", "digits", "random_search")  # = the rule's params
    path = tmp_path / "result.json"
    write_json(path, {"method": "x", "provenance": prov})
    study_config.check_inputs([path], cfg)  # the same settings: accepted
    other = copy.deepcopy(cfg)
    other["training"]["clip_norm"] = 0.5
    other["seeds"] = [0, 1, 2, 3]  # not a run setting: no reason to refuse
    with pytest.raises(OutputFileError, match=r"result.json was computed with other settings .*training\.clip_norm differ"):
        study_config.check_inputs([path], other)
    unstamped = tmp_path / "old.json"
    write_json(unstamped, {"method": "x", "provenance": {"config_hash": "abc"}})
    with pytest.raises(OutputFileError, match="records no settings_hash"):
        study_config.check_inputs([unstamped], cfg)
    # what the workflow logs before Snakemake's opaque "Params have changed": the keys, per group of files
    written = path.stat().st_mtime
    (line,) = study_config.explain_reruns([path, unstamped], other)
    assert line.startswith("1 result file(s) were computed with other settings") and "training.clip_norm changed" in line
    assert path.stat().st_mtime == written  # Snakemake's params trigger reruns it: a dry run must not date it back
    assert study_config.explain_reruns([path], cfg) == []
    study_config.explain_reruns([path], other, metadata_lost=True)  # without metadata only its time can rerun it
    assert path.stat().st_mtime == 0


def test_every_consumer_refuses_a_record_that_is_not_what_its_path_names(tmp_path):
    """The final job and the tables read records through check_inputs: a release of one target copied
    into another's folder, a stage file of stage 1 in stage 2's place, or a method's release under
    another method, are refused naming the file and the field."""
    from dphpo.errors import OutputFileError
    from dphpo.io import write_json
    from dphpo.studies import config as study_config
    from dphpo.studies import writer

    cfg = _validated(yaml.safe_load(TINY.read_text()))
    prov = writer.provenance(cfg, dataset="digits", extractor="raw", variant="default", method="random_search") | {"seed": 0}
    run = tmp_path / "results/runs/digits/raw/random_search/default/seed0"
    write_json(run / "eps1/result.json", {"method": "random_search", "target": {"eps": 1.0}, "provenance": prov})
    study_config.check_inputs([run / "eps1/result.json"], cfg)  # what its path says: accepted
    cases = {
        run / "eps8/result.json": "its eps is '1', its path says '8'",
        tmp_path / "results/runs/digits/raw/mehta/default/seed0/eps1/result.json": "its method is 'random_search', its path says 'mehta'",
        tmp_path / "results/runs/digits/raw/random_search/default/seed1/eps1/result.json": "its seed is '0', its path says '1'",
    }
    for path, message in cases.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((run / "eps1/result.json").read_bytes())
        with pytest.raises(OutputFileError, match=re.escape(message)):
            study_config.check_inputs([path], cfg)
    stage = tmp_path / "results/runs/digits/raw/linear_scaling/default/seed0/stage2.json"
    write_json(stage, {"method": "linear_scaling", "stage": 1, "seed": 0, "provenance": prov})
    with pytest.raises(OutputFileError, match=r"stage2.json is not the record its path names \(its stage is '1'"):
        study_config.check_inputs([stage], cfg)


def test_a_study_listed_twice_is_refused():
    from dphpo.errors import ConfigError
    from dphpo.studies import config as study_config

    cfg = _validated(yaml.safe_load(TINY.read_text()))
    cfg["studies"] = cfg["studies"] * 2
    with pytest.raises(ConfigError, match=r"studies: .*listed twice"):
        study_config.check_config(cfg)
    cfg = _validated(yaml.safe_load(TINY.read_text()))
    cfg["baselines"]["methods"] = ["mehta", "mehta"]
    with pytest.raises(ConfigError, match=r"baselines.methods: 'mehta' and 'mehta'"):
        study_config.check_config(cfg)


def test_verify_release_with_the_config_checks_hashes_and_that_nothing_is_left_out(tree, tree_config, tmp_path, capsys):
    """A bundle checked against its config: complete, it passes (also with --configfile written first, which
    argparse would let swallow the folders); a tree with a method's releases lost is bundled with a warning
    and the bundle fails, naming each missing release; a bundle of chosen --methods lacks nothing."""
    cfg = str(tree_config)
    assert main(["release", "--configfile", cfg, str(tree), str(tmp_path / "whole")]) == 0
    assert main(["verify", "--release", "--configfile", cfg, str(tmp_path / "whole")]) == 0
    assert "every release the config implies present, each with its config hash" in capsys.readouterr().out

    partial = _copy(tree, tmp_path)
    shutil.rmtree(partial / "runs/digits/raw/koskela")
    assert main(["release", str(partial), str(tmp_path / "partial"), "--configfile", cfg]) == 0
    assert "warning: 2 release(s) the config's study implies are not in" in capsys.readouterr().err
    assert main(["verify", "--release", str(tmp_path / "partial")]) == 0  # consistent in itself
    assert main(["verify", "--release", str(tmp_path / "partial"), "--configfile", cfg]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 2 and all("koskela" in line and "the bundle lacks it" in line for line in failed)

    assert main(["release", str(partial), str(tmp_path / "chosen"), "--methods", "random_search_k", "--configfile", cfg]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["verify", "--release", str(tmp_path / "chosen"), "--configfile", cfg]) == 0
    # --methods swallows the folders after it too: the words that are no method's name are taken back
    assert main(["release", "--configfile", cfg, "--methods", "random_search_k", str(partial), str(tmp_path / "chosen2")]) == 0
    assert main(["verify", "--release", str(tmp_path / "chosen2"), "--configfile", cfg]) == 0

    other = tmp_path / "other.yaml"  # another config (a smaller delta): every release's hash differs
    other.write_text("seeds: [0]\nprivacy: {delta: 1.0e-6}\n")
    assert main(["verify", "--release", str(tmp_path / "whole"), "--configfile", cfg, str(other)]) == 1
    assert "config hash" in capsys.readouterr().out
    assert main(["verify", "--release", str(tmp_path / "whole"), "--configfile", str(tmp_path / "absent.yaml")]) == 2
    assert "--configfile: no such file" in capsys.readouterr().err
    assert main(["release", "--configfile", cfg]) == 2
    assert "RESULTS_DIR and OUT_DIR missing: give RESULTS_DIR OUT_DIR before --configfile" in capsys.readouterr().err


def _claiming(ledger, claim: float, delta: float = 1e-5) -> dict:
    return {"method": "x", "total_eps": claim, "total_delta": delta, "target": {"eps": 50.0},
            "privacy": {"total": {"eps": claim}, "entries": [e.to_dict() for e in ledger.entries]}}


@pytest.mark.parametrize("q, sigma, steps", [(0.01, 1.0, 1000), (0.01, 4.0, 200), (0.001, 0.8, 10000)])
def test_a_prv_claim_is_checked_one_sided_against_a_lower_bound_on_the_true_eps(q, sigma, steps):
    # the claim is prv-accountant's upper bound; dp_accounting's PLD (also an upper bound) may lie above it
    # (q = 0.001: 0.7958 vs 0.7925): accepted. A claim below prv-accountant's lower bound is provably too
    # small and fails, however close to the PLD value (the 2 % + 0.02 tolerance let 1.78 for 1.83 through)
    from dphpo.privacy.ledger import Ledger, LedgerEntry
    from dphpo.privacy.prv import prv_eps_bounds_subsampled_gaussian
    from dphpo.verify import check_record

    ledger = Ledger([LedgerEntry.prv("run", q, sigma, steps)])
    claim = ledger.total(1e-5)["eps"]
    assert check_record(_claiming(ledger, claim), "f").ok
    lower = prv_eps_bounds_subsampled_gaussian(q, sigma, steps, 1e-5)["eps_lower"]
    check = check_record(_claiming(ledger, lower * 0.999), "f")
    assert not check.ok and "below a lower bound" in check.problems[0]
    assert not check_record(_claiming(ledger, claim * 1.2 + 0.05), "f").ok  # far above: an entry missing


def test_a_ledger_of_a_prv_run_and_an_rdp_curve_passes_and_a_smaller_claim_fails():
    # the ledger rounds a Poisson run's RDP orders up to integers (a little looser than dp_accounting's
    # fractional orders): a correct claim is not flagged as "an entry missing"
    from dphpo.privacy.ledger import Ledger, LedgerEntry
    from dphpo.privacy.tuning import ps_ledger_entry
    from dphpo.verify import check_record

    ledger = Ledger([LedgerEntry.prv("run", 0.01, 1.0, 1000), ps_ledger_entry(0.3, "geometric", 5)])
    claim = ledger.total(1e-5)["eps"]
    check = check_record(_claiming(ledger, claim), "f")
    assert check.ok, check.problems
    assert not check_record(_claiming(ledger, check.recomputed_eps * 0.999), "f").ok
