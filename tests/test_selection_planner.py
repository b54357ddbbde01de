"""The selection planner (issue 29): the selection noise from public quantities, per target, and the
no-signal path of the recommended rule — one run at a public prior r where the noise cannot rank trials."""

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from dphpo.hpo import linear_scaling as ls
from dphpo.hpo.common import LinearHeadTrainer, TrainSettings
from dphpo.hpo.linear_scaling_plan import NO_SIGNAL_PRIOR, NO_SIGNAL_SNR, RECOMMENDED_SAFEGUARD
from dphpo.hpo.selection import (
    FINEST_FRACTION,
    PLANNED_SHARE,
    SIGNAL_FRACTION,
    SelectionRule,
    plan_selection_noise,
    selection_rule,
)
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.gdp import mu_from_eps
from dphpo.privacy.ledger import Ledger
from dphpo.studies.validate import load_config

from conftest import noise_scope

DELTA = 1e-5
SPACE = SearchSpace(eta_min=0.01, eta_max=2.0, eta_num=5, steps=(5, 10, 20, 40))


@pytest.mark.parametrize("n, eps, releases", [(500, 0.25, 6), (1000, 1.0, 7), (60_000, 0.1, 6), (60_000, 8.0, 6), (5000, 2.0, 30)])
def test_the_noise_is_the_budget_share_or_the_floor_whichever_is_larger(n, eps, releases):
    plan = plan_selection_noise(n, eps, DELTA, releases)
    budgeted = math.sqrt(releases / PLANNED_SHARE) / mu_from_eps(eps, DELTA)
    assert plan.noise_std == pytest.approx(max(FINEST_FRACTION * n, budgeted), rel=1e-12)
    # the released scores never spend more than the share, and exactly it where the budget binds
    assert plan.share <= PLANNED_SHARE * (1 + 1e-9)
    if budgeted > FINEST_FRACTION * n:
        assert plan.share == pytest.approx(PLANNED_SHARE, rel=1e-9)
    assert plan.signal == (plan.noise_std <= SIGNAL_FRACTION * n)
    assert f"{releases} released scores" in plan.why()


def test_mnist_sized_data_gets_the_embedded_configs_noise():
    # config/config.yaml's 300 counts was tuned on MNIST's 60,000: the planner lands on it at every target
    for eps in (0.1, 0.25, 1.0, 8.0):
        assert plan_selection_noise(60_000, eps, DELTA, 6).noise_std == pytest.approx(300.0)


def test_auto_is_planned_per_target_and_a_fixed_noise_stays_as_configured():
    auto = selection_rule({"selection": {"noise_std": "auto"}, "privacy": {"delta": DELTA}}, 1000)
    at1, at8 = auto.at(1.0, 6), auto.at(8.0, 6)
    assert at1.noise_std == pytest.approx(plan_selection_noise(1000, 1.0, DELTA, 6).noise_std)
    assert at8.noise_std < at1.noise_std and at1.planned and "N = 1000" in at1.describe()["planned"]
    with pytest.raises(ValueError, match="planned per target"):
        _ = auto.mu_per_release
    fixed = selection_rule({"selection": {"noise_std": 50.0}, "privacy": {"delta": DELTA}}, 1000)
    assert fixed.at(1.0, 6) is fixed
    # records of a fixed noise keep the fields they always had
    assert list(fixed.describe()) == ["rule", "noise_std", "private", "label"]


def test_the_schema_defaults_to_the_planner(tmp_path):
    tiny = yaml.safe_load((Path(__file__).parent / "configs" / "tiny.yaml").read_text())
    del tiny["selection"]["noise_std"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tiny))
    assert load_config([tmp_path / "c.yaml"])["selection"]["noise_std"] == "auto"


def _run(features, selection: SelectionRule, targets, seed=0):
    lsc = ls.LinearScalingConfig(safeguard=RECOMMENDED_SAFEGUARD)
    return ls.run(LinearHeadTrainer(features, TrainSettings()), lsc, SPACE, selection, targets, noise=noise_scope(seed))


def test_without_signal_the_whole_budget_goes_to_one_run_at_the_public_prior(digits_features):
    n = digits_features.n_public
    noisy = SelectionRule(noise_std=0.1 * n, n_public=n, delta=DELTA)
    assert not noisy.predicts_signal
    for res in _run(digits_features, noisy, [0.5, 2.0]):
        # no stage trial, no released score: the ledger is the final run alone, at the whole target
        assert res.trials == [] and [e.what for e in res.ledger.entries] == ["final run"]
        assert res.ledger.total(DELTA)["eps"] == pytest.approx(res.target_eps, rel=1e-6)
        assert res.ledger.total(DELTA)["eps"] <= res.target_eps
        mu = res.ledger.entries[0].mu
        prior = NO_SIGNAL_PRIOR * mu * n / math.sqrt(64 * 10)  # digits: a head of 64 x 10 weights
        assert res.search["fit"]["r_prior"] == pytest.approx(prior)
        assert res.released["r_requested"] == pytest.approx(SPACE.clamp_r(prior))
        assert "no signal" in res.search["fit"]["no_signal"]


def test_at_a_low_public_signal_to_noise_the_no_signal_run_takes_at_most_the_grids_middle_steps(digits_features):
    """mu*N/sqrt(P) below NO_SIGNAL_SNR: T <= sqrt(5 * 40) ~ 14, i.e. 10 on this grid, where the decomposition
    (most steps) alone would take 40; above it, or with the guard off, the decomposition's T."""
    n = digits_features.n_public
    noisy = SelectionRule(noise_std=0.1 * n, n_public=n, delta=DELTA)
    low, high = _run(digits_features, noisy, [0.1, 2.0])
    snr = lambda res: res.ledger.entries[0].mu * n / math.sqrt(64 * 10)  # noqa: E731
    assert snr(low) < NO_SIGNAL_SNR < snr(high)
    assert low.released["steps"] == 10 and low.search["fit"]["steps_at_most"] == 10
    assert high.released["steps"] == 40 and "steps_at_most" not in high.search["fit"]
    off = ls.LinearScalingConfig(safeguard=dataclasses.replace(RECOMMENDED_SAFEGUARD, no_signal_snr=None))
    (plain,) = ls.run(LinearHeadTrainer(digits_features, TrainSettings()), off, SPACE, noisy, [0.1], noise=noise_scope(0))
    assert plain.released["steps"] == 40 and plain.released["r"] == pytest.approx(low.released["r"])


def test_the_no_signal_decision_reads_only_public_quantities(digits_features):
    # the same N, noise, ε and δ with other labels: the same path and the same r (nothing data-dependent)
    n = digits_features.n_public
    noisy = SelectionRule(noise_std=0.1 * n, n_public=n, delta=DELTA)
    shuffled = dataclasses.replace(digits_features, y_train=digits_features.y_train.flip(0))
    a, b = _run(digits_features, noisy, [1.0]), _run(shuffled, noisy, [1.0])
    assert a[0].released["r"] == b[0].released["r"] and a[0].released["sigma"] == b[0].released["sigma"]


def test_with_signal_the_stages_run_as_before(digits_features):
    n = digits_features.n_public
    clear = SelectionRule(noise_std=SIGNAL_FRACTION * n, n_public=n, delta=DELTA)  # at the threshold: signal
    assert clear.predicts_signal
    unknown_n = dataclasses.replace(clear, n_public=None)
    a, b = _run(digits_features, clear, [8.0]), _run(digits_features, unknown_n, [8.0])
    assert len(a[0].trials) == 6 and "no_signal" not in a[0].search["fit"]
    assert a[0].released == b[0].released  # the planner's knowledge of N changes nothing where there is signal
    assert isinstance(a[0].ledger, Ledger) and any("selection" in e.what for e in a[0].ledger.entries)


def test_privacy_plan_prints_the_planners_choice_and_whether_there_is_signal(capsys):
    from dphpo.cli import main

    args = ["privacy", "plan", "--total-eps", "1", "--delta", "1e-5", "--n", "3", "--eps1", "0.1", "--eps2", "0.2"]
    assert main(args + ["--n-public", "60000"]) == 0
    out = capsys.readouterr().out
    assert "selection.noise_std = 300 counts = 0.50% of N = 60000" in out and "can rank the trials" in out
    assert main(args + ["--n-public", "1000"]) == 0
    assert "NO SIGNAL" in capsys.readouterr().out


def test_the_tables_say_where_no_stage_ran(digits_features):
    from dphpo.report.tables import no_signal_notes

    n = digits_features.n_public
    (res,) = _run(digits_features, SelectionRule(noise_std=0.1 * n, n_public=n, delta=DELTA), [1.0])
    record = {"search": res.search, "target": {"eps": res.target_eps},
              "provenance": {"dataset": "digits", "extractor": "raw", "variant": "safeguarded"}}
    (note,) = no_signal_notes([record, record | {"search": {"fit": {}}}])
    assert note.startswith("NOTE: digits × raw [safeguarded] at target ε = 1:") and "public prior" in note


def test_below_the_stage_snr_the_first_stages_trials_are_skipped_even_where_the_selection_noise_ranks(digits_features):
    """safeguard.stage_snr: the first stage's own mu_1*N/sqrt(P) decides too. The same fine selection noise:
    with the threshold above that value, no stage trial runs and the whole target goes to one run at the
    prior; with it below, the stages run."""
    n = digits_features.n_public
    clear = SelectionRule(noise_std=SIGNAL_FRACTION * n, n_public=n, delta=DELTA)
    snr = mu_from_eps(0.1 * 8.0, DELTA) * n / math.sqrt(64 * 10)  # stage 1 at a tenth of ε = 8 (the default fractions)

    def run(threshold):
        lsc = ls.LinearScalingConfig(safeguard=dataclasses.replace(RECOMMENDED_SAFEGUARD, stage_snr=threshold))
        (res,) = ls.run(LinearHeadTrainer(digits_features, TrainSettings()), lsc, SPACE, clear, [8.0], noise=noise_scope(0))
        return res

    skipped, ran = run(1.1 * snr), run(0.9 * snr)
    assert skipped.trials == [] and [e.what for e in skipped.ledger.entries] == ["final run"]
    assert skipped.ledger.total(DELTA)["eps"] == pytest.approx(8.0, rel=1e-6)
    why = skipped.search["fit"]["no_signal"]
    assert f"mu_1*N/sqrt(P) = {snr:.3g}" in why and "stage 1 at eps=0.8" in why
    assert len(ran.trials) == 6 and "no_signal" not in ran.search["fit"]


def test_the_stage_snr_guard_is_checked_and_recorded():
    from dphpo.errors import ConfigError
    from dphpo.hpo.linear_scaling_plan import Safeguard

    with pytest.raises(ConfigError, match="stage_snr: must be > 0"):
        Safeguard(no_signal_prior=1.0, stage_snr=0.0)
    with pytest.raises(ConfigError, match="stage_snr: needs linear_scaling.safeguard.no_signal_prior"):
        Safeguard(stage_snr=1.0)
    on = Safeguard.from_config({"no_signal_prior": 1.8, "stage_snr": 1.5})
    assert on.stage_snr == 1.5 and on.to_dict()["stage_snr"] == 1.5
    assert "stage_snr" not in Safeguard.from_config({"no_signal_prior": 1.8}).to_dict()  # older records keep their bytes


def test_privacy_plan_says_whether_the_first_stage_can_learn(capsys):
    from dphpo.cli import main
    from dphpo.hpo.linear_scaling_plan import first_stage_snr

    args = ["privacy", "plan", "--total-eps", "1", "--delta", "1e-5", "--n", "3", "--eps1", "0.1", "--eps2", "0.2", "--n-public", "60000"]
    assert main(args + ["--n-parameters", "12800"]) == 0  # MNIST x Lite0: 1280 x 10
    out = capsys.readouterr().out
    assert f"mu_1*N/sqrt(P) = {first_stage_snr(0.1, 1e-5, 60000, 12800):.3g}" in out and "runs its stages" in out
    assert main(args + ["--n-parameters", str(1280 * 1000), "--json"]) == 0  # a 1000-class head: too many weights
    import json

    signal = json.loads(capsys.readouterr().out)["stage_signal"]
    assert not signal["stages_run"] and signal["snr"] < signal["threshold"] and "NO SIGNAL" in signal["why"]
    assert main(args[:-2] + ["--n-parameters", "12800"]) == 2  # P without N: refused, named
    assert "--n-parameters needs --n-public" in capsys.readouterr().err
