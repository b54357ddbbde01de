"""What is released enjoys the stated ε: secret noise, independent noise, public normalizers, a clean
release file (docs/privacy.md)."""

import json
import os
import re
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from dphpo.hpo import registry
from dphpo.hpo.common import INTERNAL_NOTICE, LinearHeadTrainer, release_record
from dphpo.io import read_json
from dphpo.privacy.randomness import DEFAULT_KEY_FILE, ENV_VAR, NoiseKey, create_key_file, load_key, public_seed
from dphpo.studies.writer import write_result
from dphpo.train.dpgd import TrialBatch, train_linear_dpgd

from conftest import noise_scope
from test_baselines import CONFIG

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _numbers(obj):
    """Every number a JSON document holds (a published value an attacker could try as a seed)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and np.isfinite(obj):
        yield obj


# ------------------------------------------------------------------------------------------
# the key


def test_key_file_is_created_owner_only_and_reused(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)  # the default key, the only one created on first use
    key = load_key()
    path = tmp_path / DEFAULT_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key() == key == load_key(path)  # the same key on every later use
    assert len(key.fingerprint()) == 16 and key.fingerprint() not in path.read_text()
    other = create_key_file(tmp_path / "k" / "noise.key")  # a key file for privacy.noise_key_file
    assert stat.S_IMODE((tmp_path / "k" / "noise.key").stat().st_mode) == 0o600 and other != key


def test_a_key_readable_by_others_is_refused(tmp_path):
    path = tmp_path / "noise.key"
    create_key_file(path)
    path.chmod(0o644)
    with pytest.raises(Exception, match="readable by others"):
        load_key(path)


def test_a_dangling_link_or_a_folder_as_the_key_file_is_a_config_error_naming_it(tmp_path):
    from dphpo.errors import ConfigError

    link = tmp_path / "noise.key"
    link.symlink_to(tmp_path / "gone.key")
    with pytest.raises(ConfigError, match=r"noise.key is a link to .*gone.key, which does not exist"):
        load_key(link)
    with pytest.raises(ConfigError, match="is a folder"):
        load_key(tmp_path)


def test_the_environment_names_the_key_file(tmp_path, monkeypatch):
    path = tmp_path / "env.key"
    create_key_file(path)
    monkeypatch.setenv(ENV_VAR, str(path))
    assert load_key() == load_key(path)


def test_noise_of_two_variants_and_two_extractors_is_independent():
    """The drawn noise itself: a trainer on all-zero features releases pure noise; two variants (and two
    extractors) of one dataset and seed must not share it (the old seeds omitted both labels)."""
    key = NoiseKey.generate()
    scopes = {
        "default": key.scope(dataset="mnist", extractor="a", variant="default", seed=0),
        "small_clip": key.scope(dataset="mnist", extractor="a", variant="small_clip", seed=0),
        "other_extractor": key.scope(dataset="mnist", extractor="b", variant="default", seed=0),
    }
    x, y = torch.zeros(50, 40), torch.arange(50) % 5
    draws = {}
    for name, scope in scopes.items():
        w = train_linear_dpgd(x, y, 5, TrialBatch([1.0], [1], [1.0], [scope.seed("linear_scaling", 1, "k", 0)]),
                              n_public=50, momentum=0.0, free_step=False)
        draws[name] = w.flatten().numpy()
    n = draws["default"].size
    for other in ("small_clip", "other_extractor"):
        corr = np.corrcoef(draws["default"], draws[other])[0, 1]
        assert abs(corr) < 5 / np.sqrt(n), (other, corr)  # independent: |ρ| ~ 1/√n, not 1
    # the same labels under the same key: the same draws (byte-identical reruns)
    again = key.scope(dataset="mnist", extractor="a", variant="default", seed=0).seed("linear_scaling", 1, "k", 0)
    assert again == scopes["default"].seed("linear_scaling", 1, "k", 0)
    # another key: other draws
    assert NoiseKey.generate().scope(**dict(scopes["default"].labels)).seed("x") != scopes["default"].seed("x")


def test_another_version_of_the_pretraining_draws_other_noise(tmp_path):
    """Audit: the noise labels hashed the extractor's section, {kind, pretrain: name}, not the pretraining it
    names; a new version of that pretraining (other epochs, another DP stage) gave other features under the
    same noise, and the difference of two releases cancelled it. Now the section (and a language study's LM
    pretraining) is part of the settings every noise label hashes."""
    import copy

    from dphpo.studies import config as study_config
    from dphpo.studies.validate import load_config

    create_key_file(tmp_path / "key")
    cfg = load_config([os.path.join(REPO, "config", "paper_embedded.yaml")])
    cfg["privacy"]["noise_key_file"] = str(tmp_path / "key")
    other = copy.deepcopy(cfg)
    other["pretraining"]["syn_cnn"]["epochs"] += 1
    other["language"]["pretrain"]["pydocs_gpt2"]["steps"] += 1

    class Trainer:  # the same features either way: only the pretraining's section differs
        def provenance(self):
            return {"feature_cache": {"content_sha256": "the same features"}}

    def seed(c, extractor):
        return study_config.noise_scope(c, "mnist", extractor, "default", 0, "linear_scaling", Trainer()).seed("trial", 0)

    assert seed(cfg, "syn_cnn") != seed(other, "syn_cnn")
    assert seed(cfg, "efficientnet_lite0") == seed(other, "efficientnet_lite0")  # a study that does not use it
    settings = study_config.language_settings
    assert settings(cfg, "tweets_gpt2_small", "linear_scaling") != settings(other, "tweets_gpt2_small", "linear_scaling")
    assert settings(cfg, "tweets_minilm_dpzo", "linear_scaling") == settings(other, "tweets_minilm_dpzo", "linear_scaling")


# ------------------------------------------------------------------------------------------
# public normalizers


def test_a_zero_record_added_changes_nothing_with_the_public_normalizer():
    """Add/remove neighbours D and D + {0}: the zero record contributes no gradient, so with ÷N_pub the two
    worlds release identical models (perfect indistinguishability); with ÷N (the old trainer) they differ
    exactly by the ratio N/(N+1), a membership oracle the ledger never charged."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 16, generator=gen), torch.arange(64) % 4
    x1, y1 = torch.cat([x, torch.zeros(1, 16)]), torch.cat([y, torch.tensor([0])])
    trials = TrialBatch([0.5], [5], [2.0], [123])
    w0 = train_linear_dpgd(x, y, 4, trials, n_public=64)
    w1 = train_linear_dpgd(x1, y1, 4, trials, n_public=64)
    assert torch.equal(w0, w1)
    old0 = train_linear_dpgd(x, y, 4, trials, n_public=len(y))
    old1 = train_linear_dpgd(x1, y1, 4, trials, n_public=len(y1))
    assert not torch.allclose(old0, old1)


def test_the_linear_head_divides_by_the_declared_public_size(digits_features):
    from dphpo.train.linear_head import PreparedFeatures

    f = digits_features
    twice = PreparedFeatures(f.x_train, f.y_train, f.x_test, f.y_test, 10, "x", {}, n_public=2 * f.n_public)
    settings = LinearHeadTrainer.from_config(f, CONFIG).settings
    a = LinearHeadTrainer(f, settings).run_trials([1.0], [1], [0.0], [0], progress=False).models
    b = LinearHeadTrainer(twice, settings).run_trials([2.0], [1], [0.0], [0], progress=False).models
    assert torch.allclose(a, b, atol=1e-6)  # η/N = 2η/(2N): the normalizer is n_public, not the count


# ------------------------------------------------------------------------------------------
# the release file and the membership attack on published seeds


@pytest.fixture(scope="module")
def released(digits_features, tmp_path_factory):
    """Every feature baseline on digits, written as the workflow writes them."""
    out = tmp_path_factory.mktemp("release")
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    files = {}
    for method in ("random_search", "papernot_steinke", "koskela"):
        noise = noise_scope(0)
        for r in registry.run_method(method, trainer, CONFIG, noise):
            d = out / method / f"eps{r.target_eps:g}"
            d.mkdir(parents=True)
            write_result(r, d / "result.json", d / "model.npz", {"seed": 0, "randomness": noise.describe()}, d / "internal.json")
            files[(method, r.target_eps)] = (d, r)
    return trainer, files


def test_release_holds_no_exact_private_statistic_and_no_seed(released):
    _, files = released
    for (method, _), (d, _result) in files.items():
        text = (d / "result.json").read_text()
        for forbidden in ('"train_accuracy"', '"train_metric"', "noise_seed", "subsample_size", '"n_train"', '"K"', "mean_batch"):
            assert forbidden not in text, (method, forbidden)
        release = json.loads(text)
        assert release["release"].startswith("release")
        internal = read_json(d / "internal.json")
        assert internal["internal"] == INTERNAL_NOTICE and internal["train_accuracy"] is not None
        if method in ("papernot_steinke", "koskela"):  # their theorems cover the best trial only
            assert release["trials"] == [] and release["trials_released"] == "selected"
            assert internal["internal_fields"]["K"] == len(internal["trials"])
            assert "K=" not in text
        else:
            assert all(set(t) <= {"eta", "steps", "r", "sigma", "mu", "standalone_eps", "test_accuracy", "score"}
                       for t in release["trials"])


def test_no_published_value_reproduces_the_released_noise(released):
    """The membership attack of the audit: retrain the released hyperparameters from every number the
    release publishes, and from the seeds the old code derived from public labels. None may reproduce
    the released model; only the key's holder can (the mechanism is deterministic given the key)."""
    trainer, files = released
    d, result = files[("random_search", 1.0)]
    release = read_json(d / "result.json")
    weights = np.load(d / "model.npz")["weights"]
    eta, steps, sigma = (release["released"][k] for k in ("eta", "steps", "sigma"))
    candidates = {int(v) for v in _numbers(release) if float(v).is_integer() and 0 <= v < 2**63}
    candidates |= {public_seed("random_search", 0, "1", 0), public_seed("random_search", 0, f"{1.0:.10g}", 0), 0, 1}
    distances = []
    for seed in sorted(candidates):
        w = trainer.run_trials([eta], [steps], [sigma], [seed], progress=False).models[0].numpy()
        distances.append(float(np.abs(w - weights).max()))
    holder = trainer.run_trials([eta], [steps], [sigma], [noise_scope(0).seed("random_search", f"{1.0:.10g}", 0)], progress=False)
    assert float(np.abs(holder.models[0].numpy() - weights).max()) < 1e-6
    assert min(distances) > 1e-3, min(distances)


def test_release_record_keeps_what_tables_read(digits_features):
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    (r, *_) = registry.run_method("random_search_k", trainer, CONFIG, noise_scope(0))
    rec = release_record(r, {"feature_cache": {"content_sha256": "ab" * 32, "content_sha256_mac": "cd" * 32}})
    for key in ("method", "target", "total_eps", "total_delta", "private", "test_accuracy", "released", "selection", "privacy"):
        assert key in rec
    assert rec["provenance"]["feature_cache"] == {"content_sha256_mac": "cd" * 32}
    assert all("score" in t and "test_accuracy" in t for t in rec["trials"])  # composed runs: all covered


# ------------------------------------------------------------------------------------------
# the workflow: same key, same bytes; another key, other noise


def _run_linear_scaling(workdir, key_file):
    cfg = yaml.safe_load(open(os.path.join(REPO, "tests", "configs", "tiny.yaml")))
    cfg["seeds"] = [0]
    cfg["privacy"]["target_eps"] = [1]
    cfg["baselines"] = {"methods": []}
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
    target = "results/runs/digits/raw/linear_scaling/default/seed0/eps1/result.json"
    env = dict(os.environ, **{ENV_VAR: str(key_file)})
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", os.path.join(REPO, "Snakefile"), "--cores", "2",
           "--configfile", str(workdir / "config.yaml"), "--replace-workflow-config", "-d", str(workdir), target]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return (workdir / target).read_bytes(), (workdir / target).with_name("model.npz").read_bytes()


@pytest.mark.slow  # three small workflow runs (~1 min)
def test_workflow_results_are_byte_identical_under_one_key_and_differ_under_another(tmp_path):
    key_a, key_b = tmp_path / "a.key", tmp_path / "b.key"
    create_key_file(key_a), create_key_file(key_b)
    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir(), (tmp_path / "three").mkdir()
    first = _run_linear_scaling(tmp_path / "one", key_a)
    second = _run_linear_scaling(tmp_path / "two", key_a)
    other = _run_linear_scaling(tmp_path / "three", key_b)
    assert first == second
    assert first[1] != other[1]
    release = json.loads(first[0])
    assert release["provenance"]["randomness"]["noise_key_fingerprint"] == load_key(key_a).fingerprint()
    assert not re.search(r'noise_seed|"train_accuracy"', first[0].decode())


def test_a_search_selected_on_exact_training_scores_states_infinity_and_releases_no_exact_score(digits_features):
    """selection.rule train_nonprivate (an opt-in, labelled option): the release states ε = ∞ (the record
    and its privacy block), its exact training counts stay in the internal log, and no table, bundle or
    verify counts it as accounted, even with its flag forged."""
    import copy
    import math

    from dphpo.hpo.selection import accounted
    from dphpo.verify import check_record

    cfg = copy.deepcopy(CONFIG) | {"selection": {"rule": "train_nonprivate"}}
    (r, *_) = registry.run_method("random_search_k", LinearHeadTrainer.from_config(digits_features, cfg), cfg, noise_scope(0))
    internal, rec = r.record({}), release_record(r, {})
    assert math.isinf(rec["total_eps"]) and math.isinf(rec["privacy"]["total"]["eps"]) and not rec["within_budget"]
    assert all("score" in t for t in internal["trials"]) and not any("score" in t for t in rec["trials"])
    assert not accounted(rec) and check_record(json.loads(json.dumps(rec, default=str)), "r").problems == []
    forged = copy.deepcopy(rec)
    forged["selection"]["private"] = True
    assert not accounted(forged)  # the rule's name says it, whatever the flag
