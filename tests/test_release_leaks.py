"""Issue #26: three leaks of the released artifacts (docs/privacy.md).

(A) A method whose number of trials K is secret (Papernot–Steinke, Koskela–Kulkarni) releases the
    best trial only: no trial index (K ≥ index + 1), no trial count, no list of trials, no note that
    K was capped. They stay in the internal log.
(B) Noise labels carry the job's settings hash: two configs under one key draw independent noise
    (subtracting their releases no longer cancels it); the same config draws the same noise.
(C) The key: a low-entropy key, a key inside the results tree and a configured key file that does
    not exist are refused.
"""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dphpo import layout
from dphpo.errors import ConfigError
from dphpo.hpo import papernot_steinke, registry
from dphpo.hpo.common import INTERNAL_KEYS, LinearHeadTrainer, PreparedFeatures, release_record
from dphpo.io import read_json
from dphpo.privacy.randomness import ENV_VAR, KEY_BYTES, NoiseKey, load_key
from dphpo.studies import config as study_config
from dphpo.studies import jobs, writer
from dphpo.studies.writer import write_result
from dphpo.verify import check_record

from conftest import noise_scope
from test_baselines import CONFIG

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
SECRET_K = ("papernot_steinke", "koskela")
#: Keys that would tell a reader something about K: a trial's index, a count, a cap.
K_REVEALING = {"trial", "selected_trial", "n_trials", "K", "capped", "trials_run"}
#: A fixed, public, high-entropy test key (sha256(b"dphpo test_release_leaks key")): the draws of these
#: tests are the same on every machine.
TEST_KEY_HEX = "7239be4c7254de7fcd4e440095482f79fce4608c4b7103fabc190c585b06647d"


def _keys(value, where=""):
    """Every (path, key) of a JSON document."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{where}.{k}", k
            yield from _keys(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _keys(v, f"{where}[{i}]")


def _write(tmp_path, results):
    out = []
    for r in results:
        d = tmp_path / r.method / f"eps{r.target_eps:g}"
        d.mkdir(parents=True)
        write_result(r, d / "result.json", d / "model.npz", {"seed": 0}, d / "internal.json")
        out.append((r, read_json(d / "result.json"), read_json(d / "internal.json")))
    return out


# ------------------------------------------------------------------------------------------
# (A) no trial index, count or list in a release of a secret-K method


@pytest.fixture(scope="module")
def secret_k_runs(digits_features, tmp_path_factory):
    out = tmp_path_factory.mktemp("secret-k")
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    return {m: _write(out, registry.run_method(m, trainer, CONFIG, noise_scope(0))) for m in SECRET_K}


@pytest.mark.parametrize("method", SECRET_K)
def test_secret_k_release_holds_no_trial_index_count_or_list(secret_k_runs, method):
    for r, release, internal in secret_k_runs[method]:
        leaked = [path for path, key in _keys(release) if key in K_REVEALING]
        assert not leaked, (method, leaked)
        assert release["trials"] == [] and release["trials_released"] == "selected"
        assert not any("K " in n or "K=" in n or "max_trials" in n for n in release["notes"]), release["notes"]
        # the internal log keeps what the release drops: K, every trial, which one was selected
        fields = internal["internal_fields"]
        assert fields["K"] == len(internal["trials"]) == len(r.trials)
        best = int(np.argmax([t["score"] for t in internal["trials"]]))
        assert fields["selected_trial"] == best
        assert release["released"]["eta"] == internal["trials"][best]["eta"]
        assert release["released"]["steps"] == internal["trials"][best]["steps"]
        assert check_record(release, method).ok, check_record(release, method).problems


def test_a_capped_k_is_noted_in_the_internal_log_only(digits_features, tmp_path, monkeypatch):
    """K > max_trials happens with a probability the ledger pays for (δ_cap); whether it happened is a
    fact about K and stays internal."""
    monkeypatch.setattr(papernot_steinke.TrialCountDistribution, "sample", lambda self, rng, cap: (2, True))
    cfg = copy.deepcopy(CONFIG) | {"privacy": {"delta": 1e-5, "target_eps": [8.0]}}
    trainer = LinearHeadTrainer.from_config(digits_features, cfg)
    for method in SECRET_K:
        ((r, release, internal),) = _write(tmp_path, registry.run_method(method, trainer, cfg, noise_scope(0)))
        text = json.dumps(release)
        assert "max_trials=" not in text and "exceeded" not in text and "capped" not in text, release["notes"]
        assert internal["internal_fields"]["capped"] is True
        assert any("exceeded max_trials" in n for n in internal["internal_fields"]["notes"])


def test_verify_refuses_a_release_that_names_the_selected_trial(secret_k_runs):
    assert {"selected_trial", "K", "capped"} <= INTERNAL_KEYS
    for method in SECRET_K:
        _, release, _ = secret_k_runs[method][0]
        leaky = copy.deepcopy(release)
        leaky["released"]["selected_trial"] = 2  # what the old Koskela release carried
        problems = check_record(leaky, method).problems
        assert any("selected_trial" in p for p in problems), problems
        # and the writer strips it, as every internal key
        assert "selected_trial" not in json.dumps(release)


def test_fixed_count_methods_keep_their_index(digits_features):
    """Random search with k runs and grid search: the count is public, every trial is an accounted
    release; their index is covered."""
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    (r, *_) = registry.run_method("random_search_k", trainer, CONFIG, noise_scope(0))
    rec = release_record(r, {})
    assert rec["released"]["trial"] == int(np.argmax([t["score"] for t in r.trials]))
    assert len(rec["trials"]) == 3 and rec["search"]["n_trials"] == 3
    assert check_record(rec, "random_search_k").ok


# ------------------------------------------------------------------------------------------
# (B) the settings hash labels every draw


def _validated(cfg: dict) -> dict:
    from snakemake.utils import validate

    validate(cfg, schema=str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return cfg


@pytest.fixture
def test_key(tmp_path, monkeypatch):
    path = tmp_path / "test.key"
    path.write_text(TEST_KEY_HEX + "\n")
    path.chmod(0o600)
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def _zero_features(d=200, classes=10, n=100) -> PreparedFeatures:
    """All-zero features: no gradient, so a trained head is the run's noise alone."""
    y = torch.arange(n) % classes
    return PreparedFeatures(torch.zeros(n, d), y, torch.zeros(10, d), torch.arange(10) % classes, classes, "zeros", {}, n_public=n)


def _final_run_noise(cfg: dict, checksum: str = "zeros") -> np.ndarray:
    """The final run of the linear scaling rule at ε = 1 on all-zero features of that `checksum`, drawn
    through the workflow's scope and trainer."""
    features = _zero_features()
    features.checksum = checksum
    trainer = LinearHeadTrainer.from_config(features, cfg)
    noise = study_config.noise_scope(cfg, "digits", "raw", "default", 0, "linear_scaling", trainer)
    seed = noise.seed("linear_scaling", "final", f"{1.0:.10g}")
    return trainer.run_trials([1.0], [3], [1.0], [seed], progress=False).models[0].flatten().numpy()


def _uncorrelated(a: np.ndarray, b: np.ndarray, what: str) -> None:
    corr = float(np.corrcoef(a, b)[0, 1])
    print(f"final-run noise of {what}: n={a.size}, correlation {corr:.4f} (bound {5 / np.sqrt(a.size):.4f})")
    assert np.std(a) > 0 and abs(corr) < 5 / np.sqrt(a.size), corr


def test_two_configs_draw_independent_noise_and_one_config_the_same(test_key):
    cfg = _validated(yaml.safe_load(TINY.read_text()))
    other = copy.deepcopy(cfg)
    other["selection"]["noise_std"] = 60.0  # one hyperparameter; the final run itself is the same
    a = _final_run_noise(cfg)
    _uncorrelated(a, _final_run_noise(other), "two configs")
    assert np.array_equal(a, _final_run_noise(copy.deepcopy(cfg)))  # the same config and key: byte-identical draws


def test_other_data_draws_independent_noise(test_key):
    """Audit finding: the labels named the config only, so a study rerun on an edited dataset (one record
    added) drew the same noise, and the difference of the two releases was the record's gradient, exact.
    The data's checksums (keyed MAC) label the scope: another cache, other noise."""
    cfg = _validated(yaml.safe_load(TINY.read_text()))
    _uncorrelated(_final_run_noise(cfg, "one dataset"), _final_run_noise(cfg, "that dataset and one more record"), "two datasets")
    assert np.array_equal(_final_run_noise(cfg, "one dataset"), _final_run_noise(cfg, "one dataset"))


def test_the_scope_carries_the_settings_hash_provenance_records(test_key):
    cfg = _validated(yaml.safe_load(TINY.read_text()))
    trainer = LinearHeadTrainer.from_config(_zero_features(), cfg)
    noise = study_config.noise_scope(cfg, "digits", "raw", "default", 0, "linear_scaling", trainer)
    prov = writer.provenance(cfg, trainer, noise=noise, dataset="digits", extractor="raw", variant="default", seed=0, method="linear_scaling")
    assert prov["randomness"]["scope"]["data"] == noise.mac("zeros") and prov["feature_cache"]["content_sha256_mac"] == noise.mac("zeros")
    assert noise.label("settings") == prov["settings_hash"] == study_config.run_settings_hash(cfg, "default", "raw", "digits", "linear_scaling")
    assert prov["randomness"]["scope"]["settings"] == prov["settings_hash"]
    # a variant: its own settings hash (what the variant's jobs record)
    cfg["variants"] = {"small_clip": {"training": {"clip_norm": 0.5}}}
    vcfg = study_config.variant_config(cfg, "small_clip")
    vnoise = study_config.noise_scope(vcfg, "digits", "raw", "small_clip", 0, "linear_scaling", trainer)
    assert vnoise.label("settings") == study_config.run_settings_hash(cfg, "small_clip", "raw", "digits", "linear_scaling") != noise.label("settings")


def _language_config() -> dict:
    cfg = yaml.safe_load(TINY.read_text())
    cfg["language"] = {
        "studies": [
            {
                "name": "s",
                "task": "classification",
                "trainer": "finetune",
                "model": {"name": "tiny"},
                "data": {"name": "tweets"},
                "methods": ["random_search"],
            }
        ]
    }
    return cfg


class _Task:
    """A language trainer's provenance as the scope reads it: its data's checksum, nested."""

    def __init__(self, checksum: str = "tweets"):
        self.checksum = checksum

    def provenance(self) -> dict:
        return {"task": {"hidden_cache": {"dataset_checksum": self.checksum}}}


def test_language_noise_carries_the_language_settings_hash_and_the_data(test_key):
    cfg = _language_config()
    noise = jobs.language_noise_scope(cfg, "s", "random_search", 0, _Task())
    assert noise.label("settings") == study_config.language_settings_hash(cfg, "s", "random_search")  # the rule's params
    assert noise.label("study") == "s" and noise.label("seed") == 0 and noise.label("data") == noise.mac("tweets")
    other = copy.deepcopy(cfg)
    other["language"]["studies"][0]["training"] = {"clip_norm": 0.3}
    assert jobs.language_noise_scope(other, "s", "random_search", 0, _Task()).seed("x") != noise.seed("x")
    assert jobs.language_noise_scope(cfg, "s", "random_search", 0, _Task("tweets and one more")).seed("x") != noise.seed("x")
    assert jobs.language_noise_scope(copy.deepcopy(cfg), "s", "random_search", 0, _Task()).seed("x") == noise.seed("x")
    with pytest.raises(ValueError, match="checksums of its data"):
        jobs.language_noise_scope(cfg, "s", "random_search", 0, _Task(None))


# ------------------------------------------------------------------------------------------
# (C) the key


def _key_file(path: Path, secret: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secret.hex() + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    "secret",
    [
        bytes(KEY_BYTES),  # all zero
        b"\xab" * KEY_BYTES,  # one repeated byte
        bytes.fromhex("0123456789abcdef" * 4),  # a typed pattern: 8 distinct bytes
        bytes(range(KEY_BYTES)),  # a counter: 32 distinct bytes, one step
        bytes(range(0, 256, 16)) * 2,  # 16 distinct bytes repeated with period 16
    ],
    ids=["zeros", "repeated", "pattern", "counter", "period16"],
)
def test_a_low_entropy_key_is_refused(tmp_path, secret):
    path = _key_file(tmp_path / "weak.key", secret)
    with pytest.raises(ConfigError, match="low-entropy"):
        load_key(path)


def test_generated_keys_always_pass(tmp_path):
    from dphpo.privacy.randomness import check_entropy, create_key_file

    for _ in range(5000):
        check_entropy(NoiseKey.generate().secret, "generated")
    key = create_key_file(tmp_path / "new.key")
    assert load_key(tmp_path / "new.key") == key
    # the fixed test keys of the suite pass the rule
    check_entropy(bytes.fromhex(TEST_KEY_HEX), "test key")


def test_a_key_inside_the_results_tree_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    secret = bytes.fromhex(TEST_KEY_HEX)
    inside = _key_file(tmp_path / layout.ROOT / "noise.key", secret)
    for path in (inside, Path(layout.ROOT) / "noise.key", Path("elsewhere") / ".." / layout.ROOT / "noise.key"):
        with pytest.raises(ConfigError, match="results tree"):
            load_key(path)
    # a link outside the tree to a key inside it
    link = tmp_path / "outside" / "noise.key"
    link.parent.mkdir()
    link.symlink_to(inside)
    with pytest.raises(ConfigError, match="results tree"):
        load_key(link)
    # results/ itself a link to another disk: a key on that disk is inside the tree
    monkeypatch.chdir(tmp_path / "outside")
    storage = _key_file(tmp_path / "storage" / "noise.key", secret)
    (tmp_path / "outside" / layout.ROOT).symlink_to(tmp_path / "storage")
    with pytest.raises(ConfigError, match="results tree"):
        load_key(storage)
    # outside the tree: accepted
    assert load_key(_key_file(tmp_path / "keys" / "noise.key", secret)).secret == secret


def test_a_configured_key_file_that_does_not_exist_is_an_error(tmp_path, monkeypatch):
    missing = tmp_path / "lost" / "noise.key"
    with pytest.raises(ConfigError, match=r"privacy\.noise_key_file.*lost/noise\.key"):
        study_config.noise_scope({"privacy": {"noise_key_file": str(missing)}}, "digits", "raw", "default", 0, "linear_scaling", None)
    assert not missing.exists() and not missing.parent.exists()  # never created
    monkeypatch.setenv(ENV_VAR, str(missing))
    with pytest.raises(ConfigError, match=rf"\${ENV_VAR}.*lost/noise\.key"):
        load_key()
    assert not missing.exists()
    # only the default is created on first use
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    key = load_key()
    assert (tmp_path / ".dphpo" / "noise.key").exists() and load_key() == key


@pytest.mark.slow  # one Snakemake dry run (~10 s)
def test_a_dry_run_with_a_missing_configured_key_fails_naming_it(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    missing = tmp_path / "keys" / "noise.key"
    cfg["privacy"]["noise_key_file"] = str(missing)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-n", "--configfile",
           str(tmp_path / "config.yaml"), "--replace-workflow-config", "-d", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "privacy.noise_key_file" in out and str(missing) in out, out[-3000:]
    assert not missing.exists()


def test_verify_refuses_an_old_best_trial_release_that_names_its_trial(tmp_path):
    """A release written before the fix (`released.trial` of Papernot–Steinke, resealed) fails verify."""
    from dphpo.io import write_json
    from dphpo.verify import verify_tree

    d = tmp_path / "runs/digits/raw/papernot_steinke/default/seed0/eps1"
    record = {"method": "papernot_steinke", "trials_released": "selected", "released": {"eta": 0.1, "trial": 3},
              "search": {}, "trials": [], "target": {"eps": 1.0, "delta": 1e-5}, "total_eps": 0.5, "total_delta": 1e-5,
              "privacy": {"total": {"eps": 0.5}, "entries": []}, "provenance": {"dataset": "digits", "extractor": "raw", "seed": 0}}
    write_json(d / "result.json", record)
    (check,) = verify_tree(tmp_path)[0]
    assert any("reveals its secret number of trials: trial" in p for p in check.problems), check.problems
