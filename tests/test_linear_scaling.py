"""The linear scaling rule: budgets, stages, the fit, and the ledger of every result."""

import math

import numpy as np
import pytest

from dphpo.errors import ConfigError, InfeasibleBudgetError
from dphpo.hpo import linear_scaling as ls
from dphpo.hpo.common import LinearHeadTrainer, TrainSettings
from dphpo.hpo.selection import SelectionRule
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps

from conftest import noise_scope

DELTA = 1e-5


SPACE = SearchSpace(eta_min=0.01, eta_max=2.0, eta_num=5, steps=(5, 10, 20, 40))
SETTINGS = TrainSettings()
SELECTION = SelectionRule(noise_std=50.0)


def test_paper_budget_check_point():
    # methods.md §2: n = 3, ε1 = 0.1, ε2 = 0.2, ε_f = 0.88 composes to ε = 0.9963 at δ = 1e-5.
    mus = [mu_from_eps(0.1, DELTA)] * 3 + [mu_from_eps(0.2, DELTA)] * 3 + [mu_from_eps(0.88, DELTA)]
    assert eps_from_mu(math.sqrt(sum(m * m for m in mus)), DELTA) == pytest.approx(0.9963, abs=5e-4)


def test_total_eps_includes_stage_trials_and_selection(digits_features):
    lsc = ls.LinearScalingConfig(budget_mode="absolute", stage_eps=(0.1, 0.2))
    results = ls.run(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [1.0, 4.0], noise=noise_scope(0))
    for res in results:
        entries = res.ledger.entries
        whats = [e.what for e in entries]
        assert sum(w.startswith("stage 1 trial") for w in whats) == 3
        assert sum(w.startswith("stage 2 trial") for w in whats) == 3
        assert "stage 1 selection: noisy training-score sums" in whats
        assert whats[-1] == "final run"
        # total of all releases is the target, and never above it
        assert res.total["eps"] <= res.target_eps
        assert res.total["eps"] == pytest.approx(res.target_eps, rel=1e-6)
        # the final run alone is cheaper than the target: the search was paid for
        assert res.released["standalone_eps"] < res.target_eps
        mu_search = math.sqrt(sum(e.mu_total**2 for e in entries[:-1]))
        assert math.hypot(mu_search, res.released["mu"]) == pytest.approx(res.ledger.mu)


def test_absolute_stage_budgets_share_one_search(digits_features):
    lsc = ls.LinearScalingConfig(budget_mode="absolute")
    stage1 = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [1.0, 2.0, 8.0], noise=noise_scope(0), stage=1, progress=False)
    assert len(stage1["searches"]) == 1
    assert stage1["searches"][0]["targets"] == [1.0, 2.0, 8.0]


def test_fraction_budgets_scale_with_target(digits_features):
    lsc = ls.LinearScalingConfig(budget_mode="fraction", stage_eps=(0.1, 0.2))
    stage1 = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [1.0, 8.0], noise=noise_scope(0), stage=1, progress=False)
    assert sorted(s["eps"] for s in stage1["searches"]) == pytest.approx([0.1, 0.8])
    for search in stage1["searches"]:
        for trial in search["trials"]:
            # every trial is exactly its stage budget: σ = √T/μ
            assert math.sqrt(trial["steps"]) / trial["sigma"] == pytest.approx(search["mu"])


def test_stage_two_samples_above_stage_one_pick(digits_features):
    lsc = ls.LinearScalingConfig(budget_mode="fraction")
    s1 = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [4.0], noise=noise_scope(3), stage=1, progress=False)
    s2 = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [4.0], noise=noise_scope(3), stage=2, previous=s1, progress=False)
    r1 = s1["searches"][0]["selected_r"]
    lo, cap = SPACE.clamp_r(r1), 0.2 * SPACE.r_max
    hi = cap if cap > lo else SPACE.r_max
    for trial in s2["searches"][0]["trials"]:
        assert lo * (1 - 1e-9) <= trial["r_requested"] <= hi * (1 + 1e-9)


def test_line_extrapolates_through_stage_points():
    coeffs = ls.LinearScalingConfig().fit([0.1, 0.2], [1.0, 3.0])
    assert np.polyval(coeffs, 0.88) == pytest.approx(1.0 + (0.88 - 0.1) * 20.0)
    quad = ls.LinearScalingConfig(stage_eps=(0.1, 0.2, 0.3), degree=2).fit([0.1, 0.2, 0.3], [1.0, 2.0, 5.0])
    assert np.polyval(quad, 0.3) == pytest.approx(5.0)


def test_infeasible_plan_is_refused_before_training():
    lsc = ls.LinearScalingConfig(budget_mode="absolute", stage_eps=(0.5, 1.0))
    with pytest.raises(InfeasibleBudgetError, match="stage 1 trials") as err:
        ls.check_budgets(lsc, SELECTION, [1.0], DELTA)
    assert "linear_scaling.stage_eps ([0.5, 1.0], budget_mode absolute)" in str(err.value)  # the keys to change


def test_same_seed_same_numbers(digits_features):
    lsc = ls.LinearScalingConfig()
    a = ls.run(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [2.0], noise=noise_scope(7))[0]
    b = ls.run(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [2.0], noise=noise_scope(7))[0]
    c = ls.run(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [2.0], noise=noise_scope(8))[0]
    assert np.array_equal(a.weights, b.weights)
    assert a.test_accuracy == b.test_accuracy
    assert not np.array_equal(a.weights, c.weights)


def test_private_result_is_useful_on_digits(digits_features):
    lsc = ls.LinearScalingConfig()
    res = ls.run(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [8.0], noise=noise_scope(0))[0]
    assert res.test_accuracy > 0.8  # raw-pixel linear probe reaches ~97 % non-privately


def test_decomposition_always_terminates_and_stays_on_grid():
    for r in [1e-9, 0.01, 0.05, 0.3, 7.7, 80.0, 1e9]:
        dec = SPACE.decompose(r)
        assert dec.steps in SPACE.steps
        assert SPACE.eta_min <= dec.eta <= SPACE.eta_max
    assert SPACE.decompose(3.0).r == pytest.approx(3.0)


def test_bad_config_names_the_key():
    with pytest.raises(ConfigError, match="linear_scaling.degree"):
        ls.LinearScalingConfig(degree=2, stage_eps=(0.1, 0.2))
    with pytest.raises(ConfigError, match="selection.rule"):
        SelectionRule(rule="best_guess")


def test_downward_line_does_not_extrapolate_below_stage_picks(digits_features):
    """Two noisy picks with r2 < r1 give a negative slope; the monotone guard keeps r ≥ max(r_k)."""
    lsc = ls.LinearScalingConfig()
    stages = []
    for stage, r_pick in [(1, 40.0), (2, 10.0)]:
        st = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [4.0], noise=noise_scope(0), stage=stage, previous=stages[-1] if stages else None, progress=False)
        st["searches"][0]["selected_r"] = r_pick
        stages.append(st)
    guarded = ls.run_final(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [4.0], noise=noise_scope(0), stages=stages, progress=False)[0]
    fit = guarded.search["fit"]
    assert fit["r_extrapolated"] < 10.0 and fit["guard_applied"]
    assert fit["r_clamped"] == pytest.approx(40.0)
    raw = ls.LinearScalingConfig(monotone=False)
    unguarded = ls.run_final(LinearHeadTrainer(digits_features, SETTINGS), raw, SPACE, SELECTION, [4.0], noise=noise_scope(0), stages=stages, progress=False)[0]
    assert unguarded.search["fit"]["r_clamped"] == pytest.approx(SPACE.r_min)


def test_stage_two_range_extends_upwards_when_first_pick_exceeds_cap(digits_features):
    lsc = ls.LinearScalingConfig()
    s1 = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [4.0], noise=noise_scope(1), stage=1, progress=False)
    s1["searches"][0]["selected_r"] = 0.9 * SPACE.r_max  # far above later_stage_cap · r_max
    s2 = ls.run_stage(LinearHeadTrainer(digits_features, SETTINGS), lsc, SPACE, SELECTION, [4.0], noise=noise_scope(1), stage=2, previous=s1, progress=False)
    assert all(t["r_requested"] >= 0.9 * SPACE.r_max * (1 - 1e-9) for t in s2["searches"][0]["trials"])


def test_stratified_sampling_puts_one_draw_in_each_slice_of_the_log_range():
    space = SearchSpace(eta_min=0.01, eta_max=3.0, eta_num=7, steps=(10, 25, 50, 100), r_sampling="stratified_log_uniform")
    edges = np.geomspace(space.r_min, space.r_max, 4)
    lows = []
    for seed in range(50):
        r = space.sample_r(np.random.default_rng(seed), 3)
        assert np.all((edges[:-1] <= r) & (r <= edges[1:])), r
        lows.append(r[0])
    assert np.ptp(lows) > 0.5 * (edges[1] - edges[0])  # random within each slice, not a fixed grid
    plain = SearchSpace(eta_min=0.01, eta_max=3.0, eta_num=7, steps=(10, 25, 50, 100))
    all_low = sum(np.all(plain.sample_r(np.random.default_rng(s), 3) < edges[2]) for s in range(300))
    assert all_low > 50  # log-uniform: (2/3)^3 ≈ 30 % of searches never try the top third
    with pytest.raises(ConfigError, match="search_space.r_sampling"):
        SearchSpace(eta_min=0.01, eta_max=3.0, eta_num=7, steps=(10,), r_sampling="sobol")


def test_log_grid_tries_the_top_of_each_slice_the_range_top_included():
    space = SearchSpace(eta_min=0.01, eta_max=3.0, eta_num=7, steps=(10, 25, 50, 100), r_sampling="log_grid")
    for seed in range(3):  # no draw: the same points for every seed
        np.testing.assert_allclose(space.sample_r(np.random.default_rng(seed), 3), np.geomspace(space.r_min, space.r_max, 4)[1:])
    np.testing.assert_allclose(space.sample_r(np.random.default_rng(0), 2, lo=1.0, hi=4.0), [2.0, 4.0])


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_stage_budget_that_is_not_finite_is_refused_naming_the_key(bad):
    """Audit: NaN or ∞ passed `e <= 0` and failed later inside scipy's root finder, naming no key."""
    with pytest.raises(ConfigError, match=r"linear_scaling\.stage_eps: need at least two positive, finite budgets"):
        ls.LinearScalingConfig(stage_eps=(bad, 0.2))
    with pytest.raises(ValueError, match="eps must be finite"):
        mu_from_eps(bad, 1e-5)


def test_fit_record_says_clamped_only_when_the_space_moved_r():
    # a falling line: the monotone guard lifts r to the largest pick, which lies inside the space
    lsc = ls.LinearScalingConfig(budget_mode="absolute", stage_eps=(0.1, 0.2))
    xs, rs = [0.1, 0.2], [10.0, 5.0]
    choice = ls.choose_final_r(lsc, SPACE, xs, rs, [True, True], 1.0)
    fit = ls._fit_record(lsc, SPACE, xs, rs, 1.0, choice, [True, True], [])
    assert fit["r_extrapolated"] < 0 and fit["guard_applied"] and fit["r_clamped"] == 10.0
    assert fit["clamped"] is False  # the monotone guard moved r, the clamp to [r_min, r_max] did not
    # a rising line past the grid's r_max (80): clamped
    choice = ls.choose_final_r(lsc, SPACE, xs, [10.0, 50.0], [True, True], 1.0)
    fit = ls._fit_record(lsc, SPACE, xs, [10.0, 50.0], 1.0, choice, [True, True], [])
    assert fit["clamped"] is True and fit["r_clamped"] == SPACE.r_max < fit["r_extrapolated"]
