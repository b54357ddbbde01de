"""`dphpo verify`: a published results tree checked from its files alone."""

import copy
import json
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


@pytest.fixture(scope="module")
def tree(digits_features, tmp_path_factory):
    """A results tree as the workflow writes it: GDP (random search), RDP (Papernot–Steinke) and
    RDP + subsampling (Koskela) releases, each with the config hash of tests/configs/tiny.yaml."""
    root = tmp_path_factory.mktemp("published")
    config_hash = expected_hashes(TINY)["default"]
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    for method in ("random_search_k", "papernot_steinke", "koskela"):
        for r in registry.run_method(method, trainer, CONFIG, noise_scope(0)):
            d = root / "runs" / "digits" / "raw" / method / "default" / "seed0" / f"eps{r.target_eps:g}"
            d.mkdir(parents=True)
            write_result(r, d / "result.json", d / "model.npz", {"config_hash": config_hash, "variant": "default"}, d / "internal.json")
    return root


def _copy(tree, tmp_path):
    import shutil

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


def test_a_fresh_tree_passes_with_its_config(tree, capsys):
    checks, summary = verify_tree(tree, TINY)
    assert summary["failed"] == 0 and summary["releases"] == 3 * len(CONFIG["privacy"]["target_eps"])
    assert {c.how.split(" ")[0] for c in checks} == {"GDP", "RDP"}
    assert summary["largest |claimed − recomputed| ε"] < 1e-4
    assert main(["verify", str(tree), "--configfile", str(TINY)]) == 0
    assert "| file |" in capsys.readouterr().out


@pytest.mark.parametrize(
    "case, change, seal_mode, message",
    [
        ("edited test accuracy", lambda d: d.update(test_accuracy=0.9747), "keep", "edited after it was written"),
        ("removed seal", lambda d: None, "drop", "the seal was removed"),
        ("removed ledger entry", lambda d: d["privacy"]["entries"].pop(0), "reseal", "an entry missing"),
        ("ledger total lowered", lambda d: (d.update(total_eps=d["total_eps"] * 0.5), d["privacy"]["total"].update(eps=d["total_eps"])), "reseal", "is below the ledger's"),
        ("released private statistic", lambda d: d.update(train_accuracy=0.99), "reseal", "does not cover: train_accuracy"),
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


def test_a_config_that_asks_for_other_settings_fails(tree, tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    other = copy.deepcopy(cfg)
    other["training"] = {"clip_norm": 0.5}
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(other))
    checks, summary = verify_tree(tree, path)
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
    prov = writer.provenance(cfg, dataset="digits", extractor="raw", variant="default")
    assert prov["settings_hash"] == study_config.run_settings_hash(cfg, "default", "raw", "digits")  # = the rule's params
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
    (line,) = study_config.explain_reruns([path, unstamped], other)
    assert line.startswith("1 result file(s) were computed with other settings") and "training.clip_norm changed" in line
    assert study_config.explain_reruns([path], cfg) == []
