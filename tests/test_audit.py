"""Empirical privacy audit (dphpo.audit): the statistics, the trainer hook, and real audits that must
certify at least half the claimed ε without ever exceeding it, catch a broken mechanism (too little
noise, or a normalizer that counts the private records) and control the family-wise level."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import ndtr
from scipy.stats import binomtest

from dphpo.audit.bounds import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    eps_lower_from_rates,
    eps_of_mu_lower,
    gaussian_achievable,
    mu_lower_from_rates,
    threshold_bound,
)
from dphpo.audit.run import AuditSpec, audits_from_config, load_audit_data, run_audit
from dphpo.cli import main
from dphpo.errors import ConfigError
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps
from dphpo.train.dpgd import TrialBatch, train_linear_dpgd

DELTA = 1e-5
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_digits():
    # The guarantee holds for every dataset: 32 digits keep 40,000 runs within seconds.
    return load_audit_data("digits", max_train=32)


# -- statistics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (0, 5000), (7, 5000), (2500, 5000), (4999, 5000)])
@pytest.mark.parametrize("alpha", [0.025, 0.05])
def test_clopper_pearson_matches_scipy_binomtest(k, n, alpha):
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    assert float(clopper_pearson_upper(k, n, alpha)) == pytest.approx(ci.high, rel=1e-9, abs=1e-12)
    assert float(clopper_pearson_lower(k, n, alpha)) == pytest.approx(ci.low, rel=1e-9, abs=1e-12)


def test_clopper_pearson_closed_forms_at_the_ends():
    n, alpha = 400, 0.05
    assert float(clopper_pearson_upper(0, n, alpha)) == pytest.approx(1 - alpha ** (1 / n), rel=1e-12)
    assert float(clopper_pearson_lower(n, n, alpha)) == pytest.approx(alpha ** (1 / n), rel=1e-12)
    assert float(clopper_pearson_upper(n, n, alpha)) == 1.0
    with pytest.raises(ValueError):
        clopper_pearson_upper(5, 4, alpha)


def test_eps_lower_from_rates_takes_the_better_direction():
    assert float(eps_lower_from_rates(0.01, 0.5, DELTA)) == pytest.approx(math.log((1 - DELTA - 0.5) / 0.01))
    assert float(eps_lower_from_rates(0.5, 0.01, DELTA)) == pytest.approx(math.log((1 - DELTA - 0.5) / 0.01))
    assert float(eps_lower_from_rates(0.5, 0.5, DELTA)) == 0.0  # a coin flip certifies nothing


def test_mu_lower_recovers_mu_on_the_gdp_trade_off_curve():
    mu = 0.9
    for z in (-1.0, 0.3, 2.5):
        fpr, fnr = ndtr(-z), ndtr(z - mu)  # a point on the μ-GDP curve FNR = Φ(Φ⁻¹(1 − FPR) − μ)
        assert float(mu_lower_from_rates(fpr, fnr)) == pytest.approx(mu, rel=1e-9)
        assert float(mu_lower_from_rates(fnr, fpr)) == pytest.approx(mu, rel=1e-9)
    assert eps_of_mu_lower(mu, DELTA) == pytest.approx(eps_from_mu(mu, DELTA))
    assert eps_of_mu_lower(0.0, DELTA) == 0.0


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0, 8.0])
def test_achievable_bound_stays_below_the_claim_and_grows_with_runs(eps):
    mu = mu_from_eps(eps, DELTA)
    few, many = (gaussian_achievable(mu, n, n, alpha=0.05, delta=DELTA) for n in (1000, 100_000))
    for bounds in (few, many):
        assert bounds["eps"] <= eps and bounds["mu"] <= mu and bounds["eps_gdp"] <= eps
    assert many["eps"] > few["eps"] and many["mu"] > few["mu"]


def test_threshold_bound_on_identical_worlds_certifies_almost_nothing():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(20_000), rng.standard_normal(20_000)
    assert threshold_bound(a, b, kind="eps", alpha=0.05, delta=DELTA, rng=rng).value < 0.1
    assert threshold_bound(a, b, kind="mu", alpha=0.05, delta=DELTA, rng=rng).value < 0.05


# -- the trainer's hook ------------------------------------------------------------------------------


def test_on_step_hook_sees_every_release_and_changes_nothing():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
    trials = TrialBatch([0.5, 0.2, 1.0], [4, 2, 4], [2.0, 1.0, 3.0], [11, 12, 13])
    seen = {}

    def hook(t, index, weights, grad):
        for j, i in enumerate(index):
            seen.setdefault(int(i), []).append((t, weights[j].clone(), grad[j].clone()))

    plain = train_linear_dpgd(x, y, 3, trials, n_public=40)
    hooked = train_linear_dpgd(x, y, 3, trials, n_public=40, on_step=hook)
    assert torch.equal(plain, hooked)
    for i, (eta, steps) in enumerate(zip(trials.eta, trials.steps)):
        assert [t for t, _, _ in seen[i]] == list(range(steps))
        # The released gradients replay the run: v ← ρv + g̃, W ← W − ηv, then the free step.
        w, v = torch.zeros(3, 6), torch.zeros(3, 6)
        for _, w_seen, grad in seen[i]:
            assert torch.allclose(w_seen, w, atol=1e-6)
            v = 0.9 * v + grad
            w = w - eta * v
        assert torch.allclose(hooked[i], w - eta * 0.9 * v, atol=1e-6)


# -- audits of the real trainer --------------------------------------------------------------------


@pytest.mark.slow
def test_white_box_audit_certifies_half_the_claim_and_never_exceeds_it(small_digits):
    for eps in (1.0, 4.0):
        result = run_audit(AuditSpec(eps=eps, delta=DELTA, runs=40_000, steps=2, seed=0), small_digits)
        white, black = result.rows
        mu = mu_from_eps(eps, DELTA)
        assert result.passed
        for row in (white, black):
            assert 0.0 < row["eps_lower"] <= eps
            assert row["mu_lower"] <= mu and row["eps_lower_gdp"] <= eps
        # Tightness (white-box, gradient canary): the GDP audit certifies at least half the claim.
        assert white["eps_lower_gdp"] >= eps / 2
        assert white["achievable_eps"] <= eps
        assert result.diagnostics["canary_clipped_fraction"] > 0.99
        if eps == 4.0:  # the assumption-free bound too (at ε = 1 the number of runs limits it, not the attack)
            assert white["eps_lower"] >= 0.4 * eps


def test_broken_mechanism_is_caught(small_digits):
    # σ four times too small: the run is really ~4.6-DP while it claims ε = 1.
    result = run_audit(
        AuditSpec(eps=1.0, delta=DELTA, runs=10_000, steps=2, noise_scale=0.25),
        small_digits,
        threat_models=("white-box",),
    )
    (row,) = result.rows
    assert row["eps_lower"] > 1.0 and row["mu_lower"] > mu_from_eps(1.0, DELTA)
    assert not row["pass"] and not result.passed


def test_dp_sgd_audit_stays_below_the_prv_claim(small_digits):
    result = run_audit(AuditSpec(eps=4.0, delta=DELTA, runs=10_000, steps=2, batch_size=16), small_digits)
    # q = B / |D|: the audit's D is a per-record subset of about 32 digits
    assert result.claim["q"] == pytest.approx(16 / small_digits.n) and result.claim["mu"] is None
    for row in result.rows:
        assert row["eps_lower"] <= 4.0 and row["pass"]
    white = result.rows[0]
    assert white["eps_lower"] > 0.5  # the canary is found: the attack sees subsampled steps
    assert white["achievable_eps"] <= 4.0


@pytest.fixture(scope="module")
def digits_64():
    return load_audit_data("digits", max_train=64)


def size_audit(data, normalizer, neighbours="add_remove", canary="zero", runs=4000):
    """ε = 1 claimed, 5 steps, 4,000 runs: about a second with the zero canary, whose gradient is zero,
    so under add/remove the worlds differ only in their size N vs N + 1 (N about 64)."""
    spec = AuditSpec(
        eps=1.0, delta=DELTA, runs=runs, steps=5, neighbours=neighbours, normalizer=normalizer, canary=canary
    )
    return run_audit(spec, data, threat_models=("white-box",))


@pytest.mark.parametrize("canary", ["zero", "gradient"])
def test_add_remove_audit_refutes_the_private_count_normalizer(digits_64, canary):
    # ÷N in world 0 and ÷(N + 1) in world 1 scale every release: the exact-LLR attacker sees it.
    result = size_audit(digits_64, "private_count", canary=canary)
    (row,) = result.rows
    n = digits_64.n  # about 64: a per-record subset
    assert row["divisors"] == [n, n + 1]
    assert row["eps_lower"] > 1.0  # assumption-free: the claim ε = 1 is refuted
    assert row["mu_lower"] > 2 * mu_from_eps(1.0, DELTA)
    assert not row["pass"] and not result.passed


def test_add_remove_audit_passes_the_public_normalizer(digits_64):
    # ÷|D| in both worlds: an all-zero record changes nothing, and the audit certifies nothing.
    result = size_audit(digits_64, "public")
    (row,) = result.rows
    assert row["divisors"] == [digits_64.n, digits_64.n]
    assert row["eps_lower"] < 0.1 and row["mu_lower"] < 0.1
    assert row["pass"] and result.passed


def test_replace_one_audit_cannot_see_the_private_count_leak(digits_64):
    # Same size in both worlds, so ÷N is the same in both: why an audit that swaps records missed the bug.
    result = size_audit(digits_64, "private_count", neighbours="replace_one", runs=1000)
    assert result.rows[0]["divisors"] == [digits_64.n + 1, digits_64.n + 1] and result.passed


def test_bounds_are_bonferroni_corrected_to_the_family_wise_level(small_digits):
    alpha = 0.05
    result = run_audit(AuditSpec(eps=1.0, delta=DELTA, runs=400, steps=1, alpha=alpha), small_digits)
    assert [r["threat_model"] for r in result.rows] == ["white-box", "black-box"]
    assert result.diagnostics["family_wise"] == {
        "alpha": alpha,
        "bounds": 4,  # ε and μ for each threat model
        "alpha_per_bound": alpha / 4,
        "correction": "Bonferroni",
    }
    for row in result.rows:
        assert row["confidence"] == 1 - alpha and row["bounds_in_family"] == 4
        for test in (row["eps_test"], row["mu_test"]):
            # Each bound's two Clopper–Pearson rates are at α/(2m): all 4 bounds hold together at 1 − α.
            fpr = clopper_pearson_upper(test["false_positives"], test["n_out"], alpha / 8)
            fnr = clopper_pearson_upper(test["false_negatives"], test["n_in"], alpha / 8)
            assert (test["fpr_upper"], test["fnr_upper"]) == pytest.approx((float(fpr), float(fnr)))
    white_only = run_audit(AuditSpec(eps=1.0, runs=400, steps=1), small_digits, threat_models=("white-box",))
    assert white_only.rows[0]["bounds_in_family"] == 2 and white_only.rows[0]["alpha_per_bound"] == 0.025


def test_audit_settings_are_checked_before_training():
    with pytest.raises(ConfigError, match="audit.accountant"):
        AuditSpec(eps=1.0, accountant="gdp", batch_size=8)
    with pytest.raises(ConfigError, match="audit.runs"):
        AuditSpec(eps=1.0, runs=4)
    with pytest.raises(ConfigError, match="audit.eps"):
        AuditSpec(eps=0.0)
    with pytest.raises(ConfigError, match="audit.normalizer"):
        AuditSpec(eps=1.0, normalizer="private")
    with pytest.raises(ConfigError, match="audit.neighbours"):
        AuditSpec(eps=1.0, neighbours="swap")
    with pytest.raises(ConfigError, match="runz"):
        audits_from_config({"runz": 100})


# -- the command line ------------------------------------------------------------------------------


def test_cli_audit_prints_bounds_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "tables" / "audit.md"
    code = main(["audit", "--eps", "1", "4", "--runs", "400", "--steps", "2", "--max-train", "16", "--out", str(out)])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("white-box: ")
    bounds = [float(v) for v in re.findall(r"(\S+) \(pass\)", lines[-1])]
    assert len(bounds) == 2 and 0 <= bounds[0] <= 1 and 0 <= bounds[1] <= 4
    md = out.read_text()
    assert "claimed ε" in md and "ε lower (CP)" in md and md.count("| pass |") == 2
    assert "confidence (family-wise)" in md and "| add_remove | public |" in md
    csv_lines = out.with_suffix(".csv").read_text().splitlines()
    assert len(csv_lines) == 3 and "ε lower (CP)" in csv_lines[0]
    saved = json.loads(out.with_suffix(".json").read_text())
    assert [a["spec"]["eps"] for a in saved["audits"]] == [1.0, 4.0]
    assert saved["audits"][0]["provenance"]["data_checksum"]
    assert saved["audits"][0]["rows"][0]["bounds_in_family"] == 2  # white-box ε and μ


def test_cli_audit_refutes_the_private_count_normalizer(capsys):
    args = ["audit", "--eps", "1", "--runs", "2000", "--max-train", "64", "--canary", "zero", "--json"]
    assert main(args + ["--normalizer", "private_count"]) == 1
    audit = json.loads(capsys.readouterr().out)["audits"][0]
    assert audit["spec"]["neighbours"] == "add_remove" and audit["spec"]["normalizer"] == "private_count"
    assert audit["rows"][0]["eps_lower"] > 1.0 and not audit["passed"]


def test_cli_audit_exit_status_flags_a_broken_mechanism(capsys):
    args = [
        "audit",
        "--eps",
        "1",
        "--runs",
        "4000",
        "--steps",
        "2",
        "--max-train",
        "16",
        "--noise-scale",
        "0.25",
        "--json",
    ]
    assert main(args) == 1
    audit = json.loads(capsys.readouterr().out)["audits"][0]
    assert audit["passed"] is False and audit["rows"][0]["eps_lower"] > 1.0


def test_an_audit_too_small_to_refute_its_claim_is_inconclusive_not_a_pass(tmp_path, capsys):
    """Audit finding: 8 runs (2 held out per world) certify nothing, and a claim of ε 8 by DP-SGD (no μ
    test) is beyond what 40,000 runs can certify; both said "pass" with exit 0, whatever the noise."""
    out = tmp_path / "audit.md"
    assert main(["audit", "--eps", "1", "--runs", "8", "--steps", "2", "--max-train", "16", "--noise-scale", "1e-9",
                 "--out", str(out)]) == 3
    assert "white-box: 0.0 (inconclusive)" in capsys.readouterr().out
    row = json.loads(out.with_suffix(".json").read_text())["audits"][0]["rows"][0]
    assert row["verdict"] == "inconclusive" and row["pass"] and row["refutable_eps"] == 0.0 and row["noise_scale"] == 1e-9
    assert "INCONCLUSIVE" in out.read_text() and "σ / calibrated σ" in out.read_text()
    # enough runs for the claim: conclusive (the μ test of an exact GDP claim could refute ε = 1 at 400 runs)
    assert main(["audit", "--eps", "1", "--runs", "400", "--steps", "2", "--max-train", "16", "--json"]) == 0
    audit = json.loads(capsys.readouterr().out)["audits"][0]
    assert audit["conclusive"] and audit["rows"][0]["verdict"] == "pass" and audit["rows"][0]["refutable_eps"] > 1.0


def test_cli_audit_rejects_bad_input(capsys):
    assert main(["audit", "--eps", "-1"]) == 2
    assert "--eps" in capsys.readouterr().err
    assert main(["audit", "--eps", "1", "--batch-size", "8", "--accountant", "gdp"]) == 2
    assert "audit.accountant" in capsys.readouterr().err


def _no_training(monkeypatch):
    import dphpo.audit.run as audit_run

    def trained(*args, **kwargs):
        raise AssertionError("a run was trained before the arguments were checked")

    monkeypatch.setattr(audit_run, "train_world", trained)


def test_cli_audit_checks_batch_size_output_and_features_before_any_run(tmp_path, monkeypatch, capsys):
    _no_training(monkeypatch)
    small = ["audit", "--eps", "1", "2", "--runs", "8", "--steps", "2", "--max-train", "16"]
    # a Poisson batch larger than the audit set (about 16 records; q >= 1): refused before the first run
    assert main(small + ["--batch-size", "100"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(small + ["--out", str(blocker / "audit.md")]) == 2
    assert "--out" in capsys.readouterr().err
    not_a_cache = tmp_path / "features.h5"
    not_a_cache.write_text("not hdf5")
    assert main(small + ["--features", str(not_a_cache)]) == 2
    err = capsys.readouterr().err
    assert "--features" in err and "not a dphpo feature cache" in err and "delete it" not in err


def test_workflow_audit_checks_the_batch_size_before_any_run(monkeypatch):
    _no_training(monkeypatch)
    with pytest.raises(ConfigError, match="audit.batch_size"):
        audits_from_config({"eps": [1.0], "max_train": 64, "batch_size": 256, "accountant": "prv"})


# -- the workflow rule -----------------------------------------------------------------------------


def test_schema_defaults_match_the_code():
    import yaml

    from dphpo.audit import CONFIG_DEFAULTS

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    props = schema["properties"]["audit"]["properties"]
    assert {k: v.get("default") for k, v in props.items()} == CONFIG_DEFAULTS


@pytest.mark.slow
def test_audit_rule_writes_the_table(tmp_path):
    import subprocess
    import sys

    import yaml

    cfg = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    cfg["audit"] = {"eps": [2.0], "runs": 400, "steps": 2, "max_train": 16, "threat_models": ["white-box"]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--cores",
        "1",
        "audit",
        "--configfile",
        str(path),
        "--replace-workflow-config",
        "-d",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = (tmp_path / "results" / "tables" / "audit.csv").read_text().splitlines()
    assert len(rows) == 2 and "white-box" in rows[1] and "pass" in rows[1]
    saved = json.loads((tmp_path / "results" / "tables" / "audit.json").read_text())
    assert saved["audits"][0]["spec"]["runs"] == 400 and saved["audits"][0]["rows"][0]["eps_lower"] <= 2.0
    assert (tmp_path / "results" / "logs" / "audit.log").exists()
