"""The safeguarded linear scaling rule (`linear_scaling.safeguard`): its guards act, cost nothing,
and leave the paper's rule exact when off."""

import math

import pytest
import torch

from dphpo.errors import ConfigError
from dphpo.hpo import linear_scaling as ls
from dphpo.hpo.common import LinearHeadTrainer, TrainSettings
from dphpo.hpo.linear_scaling_plan import RECOMMENDED_SAFEGUARD as RECOMMENDED
from dphpo.hpo.linear_scaling_plan import Safeguard
from dphpo.hpo.selection import SelectionRule, best_released
from dphpo.hpo.space import SearchSpace
from dphpo.report import comparison
from dphpo.report import linear_scaling as ls_table
from dphpo.studies import config as study_config

from conftest import noise_scope

SPACE = SearchSpace(eta_min=0.01, eta_max=2.0, eta_num=5, steps=(5, 10, 20, 40))
SELECTION = SelectionRule(noise_std=50.0)
TARGETS = [1.0, 4.0]


def run(features, safeguard: Safeguard | None, seed: int = 0):
    lsc = ls.LinearScalingConfig(safeguard=safeguard)
    return ls.run(LinearHeadTrainer(features, TrainSettings()), lsc, SPACE, SELECTION, TARGETS, noise=noise_scope(seed))


def test_max_steps_decomposes_every_stage_trial_and_the_final_run_with_the_most_steps(digits_features):
    for res in run(digits_features, Safeguard(decompose="max_steps")):
        for t in res.trials + [res.released]:
            fitting = [s for s in SPACE.steps if t["r_requested"] / s >= SPACE.eta_min]
            assert t["steps"] == (fitting[-1] if fitting else SPACE.steps[0])
        assert res.search["config"]["safeguard"] == {"decompose": "max_steps", "max_extrapolation": None}


def test_the_bound_keeps_the_final_r_within_a_multiple_of_the_largest_stage_pick(digits_features):
    unbounded = run(digits_features, None, seed=2)
    bounded = run(digits_features, Safeguard(max_extrapolation=1.0), seed=2)
    assert any(r.search["fit"]["r_clamped"] > max(r.search["selected_r"]) * (1 + 1e-9) for r in unbounded), "nothing to bound"
    for res in bounded:
        assert res.released["r_requested"] <= max(res.search["selected_r"]) * (1 + 1e-9)
        assert "safeguard_bound" in res.search["fit"]


def test_the_guards_are_post_processing_the_same_stages_and_the_same_privacy(digits_features):
    # the bound alone changes only what is done with the released picks: same trials, same ledger
    paper, guarded = run(digits_features, None, seed=2), run(digits_features, Safeguard(max_extrapolation=1.0), seed=2)
    for a, b in zip(paper, guarded, strict=True):
        assert a.trials == b.trials
        assert [e.what for e in a.ledger.entries] == [e.what for e in b.ledger.entries]
        assert [e.mu_total for e in a.ledger.entries[:-1]] == [e.mu_total for e in b.ledger.entries[:-1]]
        assert a.total["eps"] == pytest.approx(b.total["eps"], rel=1e-9) and b.total["eps"] <= b.target_eps
    for res in run(digits_features, Safeguard(decompose="max_steps", max_extrapolation=2.0)):
        assert res.total["eps"] <= res.target_eps * (1 + 1e-12)
        assert math.isclose(res.total["eps"], res.target_eps, rel_tol=1e-6)


def test_off_records_exactly_what_the_paper_rule_recorded(digits_features):
    (res, _) = run(digits_features, None)
    assert "safeguard" not in res.search["config"]
    assert "safeguard_bound" not in res.search["fit"]


def test_the_origin_fit_is_least_squares_through_the_origin():
    origin = ls.LinearScalingConfig(safeguard=Safeguard(fit="origin"))
    # picks on a line through the origin: the same line as the paper's
    assert origin.fit([0.1, 0.2], [10.0, 20.0]) == pytest.approx([100.0, 0.0])
    # flat picks (a noisy stage): the paper's line stays flat, the origin fit still scales with ε
    assert ls.LinearScalingConfig().fit([0.1, 0.2], [19.0, 19.0]) == pytest.approx([0.0, 19.0], abs=1e-9)
    assert origin.fit([0.1, 0.2], [19.0, 19.0]) == pytest.approx([(0.1 * 19 + 0.2 * 19) / 0.05, 0.0])


def test_the_origin_fit_is_post_processing_of_the_same_stages(digits_features):
    paper, origin = run(digits_features, None, seed=1), run(digits_features, Safeguard(fit="origin"), seed=1)
    for a, b in zip(paper, origin, strict=True):
        assert a.trials == b.trials and a.search["selected_r"] == b.search["selected_r"]
        assert b.search["fit"]["coefficients"][1] == 0.0 and b.search["config"]["safeguard"]["fit"] == "origin"
        assert b.total["eps"] <= b.target_eps * (1 + 1e-12)


TESTED = Safeguard(fit="origin", informative_margin=2.0)


def test_picks_that_beat_the_null_model_are_fitted_and_its_release_is_accounted(digits_features):
    for res in run(digits_features, TESTED):
        fit = res.search["fit"]
        # digits at eps >= 0.1 learn far above the majority label's 10 %: every pick counts
        assert fit["informative"] == [True, True] and not fit["fallback_r_max"]
        assert fit["null_score"] < min(t["score"] for t in res.trials)
        null = [e for e in res.ledger.entries if e.what.startswith("null model")]
        assert len(null) == 1 and null[0].mu_total == pytest.approx(1 / SELECTION.noise_std)
        assert res.total["eps"] <= res.target_eps * (1 + 1e-12)
        assert math.isclose(res.total["eps"], res.target_eps, rel_tol=1e-6)
    # the same stages, picks and fit as without the test; only the final budget pays for the release
    for a, b in zip(run(digits_features, Safeguard(fit="origin")), run(digits_features, TESTED), strict=True):
        assert a.trials == b.trials and a.search["fit"]["coefficients"] == b.search["fit"]["coefficients"]
        assert b.search["fit"]["x_final"] < a.search["fit"]["x_final"]


def test_stages_at_chance_fall_back_to_the_largest_r_and_search_the_whole_range(digits_features):
    # a margin no pick can clear stands for trials at chance (MiniLM at eps = 0.1, docs/methods.md §2a)
    lsc = ls.LinearScalingConfig(safeguard=Safeguard(fit="origin", informative_margin=1e6))
    trainer = LinearHeadTrainer(digits_features, TrainSettings())
    stages = [ls.run_stage(trainer, lsc, SPACE, SELECTION, TARGETS, noise_scope(3), 1, progress=False)]
    stages.append(ls.run_stage(trainer, lsc, SPACE, SELECTION, TARGETS, noise_scope(3), 2, stages[0], progress=False))
    for search in stages[1]["searches"]:
        assert search["informative"] is False
        # stage 1's pick bounds nothing: stage 2 draws from the whole range, not [r_1, 0.2·r_max]
        whole = SPACE.sample_r(noise_scope(3).rng(ls.METHOD, 2, search["key"]), lsc.n_trials)
        assert [t["r_requested"] for t in search["trials"]] == pytest.approx(list(whole))
    for res in ls.run_final(trainer, lsc, SPACE, SELECTION, TARGETS, noise_scope(3), stages, progress=False):
        assert res.search["fit"]["fallback_r_max"] and res.released["r"] == pytest.approx(SPACE.r_max)
        assert res.total["eps"] <= res.target_eps * (1 + 1e-12)


def test_the_null_model_predicts_the_majority_label_and_exact_scores_need_no_margin(digits_features):
    train, test, acc = LinearHeadTrainer(digits_features, TrainSettings()).null_scores()
    counts = torch.bincount(digits_features.y_train, minlength=10)
    label = int(counts.argmax())
    assert train == counts.max() and test == int((digits_features.y_test == label).sum())
    assert acc == pytest.approx(test / len(digits_features.y_test))
    lsc = ls.LinearScalingConfig(safeguard=TESTED)
    assert lsc.informative(141.0, 140.0, SelectionRule(rule="train_nonprivate"))
    assert not lsc.informative(140.0, 140.0, SelectionRule(rule="train_nonprivate"))
    # noisy scores: the difference of two releases has std sqrt(2)·noise_std
    assert not lsc.informative(140.0 + 2 * 50 * math.sqrt(2) - 1, 140.0, SELECTION)
    assert lsc.informative(140.0 + 2 * 50 * math.sqrt(2) + 1, 140.0, SELECTION)


def test_the_tie_margin_picks_the_largest_r_the_noise_cannot_tell_from_the_best():
    lsc = ls.LinearScalingConfig(safeguard=Safeguard(tie_margin=1.0))
    gap = 50 * math.sqrt(2)  # one std of the difference of two released scores
    rs = [0.1, 1.0, 10.0]
    assert lsc.pick([500.0, 500.0 - gap + 1, 100.0], rs, SELECTION) == 1  # within: the larger r
    assert lsc.pick([500.0, 500.0 - gap - 1, 100.0], rs, SELECTION) == 0  # beyond: the best
    assert lsc.pick([100.0, 500.0, 499.0], rs, SELECTION) == 2
    assert ls.LinearScalingConfig().pick([500.0, 499.0, 100.0], rs, SELECTION) == 0  # the paper: the best
    assert lsc.pick([500.0, 499.0], [1.0, 2.0], SelectionRule(rule="train_nonprivate")) == 0  # exact scores


def test_the_tie_margin_is_post_processing_of_the_released_scores(digits_features):
    paper, tied = run(digits_features, None, seed=4), run(digits_features, Safeguard(tie_margin=3.0), seed=4)
    assert any(a.search["selected_r"] != b.search["selected_r"] for a, b in zip(paper, tied)), "no tie to break"
    for a, b in zip(paper, tied, strict=True):
        stage1 = [t for t in a.trials if t["stage"] == 1]
        assert stage1 == [t for t in b.trials if t["stage"] == 1]  # the same draws and released scores
        for k, pick in enumerate(b.search["selected_r"], start=1):
            trials = [t for t in b.trials if t["stage"] == k]
            best = max(t["score"] for t in trials)
            assert pick == max(t["r"] for t in trials if t["score"] >= best - 3.0 * 50 * math.sqrt(2))
        assert [e.mu_total for e in a.ledger.entries[:-1]] == [e.mu_total for e in b.ledger.entries[:-1]]
        assert b.total["eps"] <= b.target_eps * (1 + 1e-12)


def test_the_safeguard_cap_widens_stage_2_and_keeps_stage_1(digits_features):
    paper, lifted = run(digits_features, None, seed=1), run(digits_features, Safeguard(later_stage_cap=1.0), seed=1)
    for a, b in zip(paper, lifted, strict=True):
        assert [t for t in a.trials if t["stage"] == 1] == [t for t in b.trials if t["stage"] == 1]
        r1 = b.search["selected_r"][0]
        stage2 = [[t["r_requested"] for t in res.trials if t["stage"] == 2] for res in (a, b)]
        assert all(r1 <= r <= 0.2 * SPACE.r_max for r in stage2[0]) or r1 > 0.2 * SPACE.r_max
        assert all(r1 <= r <= SPACE.r_max for r in stage2[1])
        assert stage2[0] != stage2[1]  # the same draws, spread over the wider range
        assert [e.mu_total for e in a.ledger.entries[:-1]] == [e.mu_total for e in b.ledger.entries[:-1]]
    assert lifted[0].search["config"]["safeguard"]["later_stage_cap"] == 1.0


def test_beyond_grid_lets_the_final_r_leave_the_grid_up_to_the_bound_only(digits_features):
    small = SearchSpace(eta_min=0.01, eta_max=0.02, eta_num=3, steps=(5, 10))  # r in [0.05, 0.2]: the line points past it
    lsc = lambda g: ls.LinearScalingConfig(safeguard=Safeguard(fit="origin", max_extrapolation=3.0, beyond_grid=g))  # noqa: E731
    trainer = LinearHeadTrainer(digits_features, TrainSettings())
    clamped, freed = (ls.run(trainer, lsc(g), small, SELECTION, [8.0], noise=noise_scope(3)) for g in (None, True))
    a, b = clamped[0], freed[0]
    assert a.trials == b.trials and a.search["selected_r"] == b.search["selected_r"]  # post-processing only
    assert a.released["r"] == pytest.approx(small.r_max)
    bound = b.search["fit"]["safeguard_bound"]
    assert small.r_max < bound <= 3.0 * max(b.search["selected_r"]) * (1 + 1e-12)
    assert b.released["r"] == pytest.approx(bound) and b.released["steps"] == small.steps[-1]
    assert b.released["eta"] > small.eta_max and b.search["fit"]["beyond_grid"]
    assert a.ledger.entries[-1].mu_total == pytest.approx(b.ledger.entries[-1].mu_total)
    assert b.total["eps"] <= 8.0 * (1 + 1e-12)


def test_the_plan_charges_the_untrained_release_before_any_training():
    plain = ls.check_budgets(ls.LinearScalingConfig(safeguard=Safeguard(fit="origin")), SELECTION, [1.0], 1e-5)
    tested = ls.check_budgets(ls.LinearScalingConfig(safeguard=TESTED), SELECTION, [1.0], 1e-5)
    assert tested[1.0]["final_mu"] < plain[1.0]["final_mu"]


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        ({"decompose": "most"}, "linear_scaling.safeguard.decompose"),
        ({"max_extrapolation": 0.5}, "linear_scaling.safeguard.max_extrapolation"),
        ({"fit": "log"}, "linear_scaling.safeguard.fit"),
        ({"informative_margin": -1, "fit": "origin"}, "linear_scaling.safeguard.informative_margin"),
        ({"informative_margin": 2}, "linear_scaling.safeguard.informative_margin"),  # needs fit: origin
        ({"tie_margin": -0.5}, "linear_scaling.safeguard.tie_margin"),
        ({"beyond_grid": True}, "linear_scaling.safeguard.beyond_grid"),  # needs max_extrapolation
        ({"later_stage_cap": 0}, "linear_scaling.safeguard.later_stage_cap"),
        ({"later_stage_cap": 1.5}, "linear_scaling.safeguard.later_stage_cap"),
    ],
)
def test_bad_safeguard_settings_name_their_key(cfg, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ls.LinearScalingConfig.from_config({"safeguard": cfg})


def test_safeguarded_variants_are_run_and_tabled_beside_the_paper_rule():
    config = {"variants": {"safeguarded": {"linear_scaling": {"safeguard": {"decompose": "max_steps"}}}, "bias": {"training": {"bias": True}}}}
    assert study_config.rule_variants(config) == ["default", "safeguarded"]

    def record(variant, acc):
        return {
            "method": "linear_scaling",
            "provenance": {"dataset": "d", "extractor": "e", "variant": variant},
            "target": {"eps": 1.0},
            "test_accuracy": acc,
            "total_eps": 1.0,
            "total_delta": 1e-5,
            "selection": {"rule": "noisy_train_accuracy", "private": True},
            "privacy": {"total": {"accountant": "gdp"}},
            "search": {"config": {"safeguard": {"decompose": "max_steps", "max_extrapolation": 2.0}} if variant != "default" else {}},
        }

    results = [record("default", 0.5), record("safeguarded", 0.9)]
    rows = ls_table.summarize(results, [])
    assert [(r["rule"], r["_mean"]) for r in rows] == [(ls_table.PAPER_RULE, 0.5), ("safeguarded", 0.9)]
    assert any("'safeguarded'" in n and "2 × the largest stage pick" in n for n in ls_table.safeguard_notes(results))
    methods = {r["method_id"]: r["method"] for r in comparison.summarize(results)}
    assert methods == {"linear_scaling": "linear scaling rule (ours)", "linear_scaling:safeguarded": "linear scaling rule, safeguarded (ours)"}


def test_the_safeguarded_method_draws_its_own_noise_and_names_itself(digits_features):
    config = {
        "privacy": {"target_eps": TARGETS},
        "search_space": {"eta": {"min": 0.01, "max": 2.0, "num": 5}, "steps": [5, 10, 20, 40]},
        "selection": {"rule": "noisy_train_accuracy", "noise_std": 50.0},
        "linear_scaling": {},
    }
    trainer = LinearHeadTrainer(digits_features, TrainSettings())
    paper = ls.run_from_config(trainer, config, noise_scope(0))
    safe = ls.run_safeguarded_from_config(trainer, config, noise_scope(0))
    assert {r.method for r in safe} == {ls.SAFEGUARDED}
    assert safe[0].search["config"]["safeguard"] == Safeguard.from_config(True).to_dict()
    # published beside the paper rule's release, it shares none of its draws (trial r's, noise seeds)
    assert [t["r_requested"] for t in paper[0].trials] != [t["r_requested"] for t in safe[0].trials]
    with pytest.raises(ValueError, match="rule"):
        noise_scope(0).extend(rule="a").extend(rule="b")


def test_a_language_studys_safeguard_leaves_its_paper_rule_exact(digits_features):
    """A language study's `overrides.linear_scaling.safeguard` configures `linear_scaling_safeguarded`;
    the row labelled the paper's rule runs without it."""
    guards = {"decompose": "max_steps", "max_extrapolation": 4, "sampling": "stratified_log_uniform", "fit": "origin", "tie_margin": 1}
    config = {
        "privacy": {"target_eps": TARGETS},
        "search_space": {"eta": {"min": 0.01, "max": 2.0, "num": 5}, "steps": [5, 10, 20, 40]},
        "selection": {"rule": "noisy_train_accuracy", "noise_std": 50.0},
        "linear_scaling": {"n_trials": 3, "safeguard": guards},
    }
    paper_cfg = study_config.language_method_config(config, "linear_scaling")
    assert paper_cfg["linear_scaling"] == {"n_trials": 3} and config["linear_scaling"]["safeguard"] == guards
    assert study_config.language_method_config(config, ls.SAFEGUARDED) is config
    trainer = LinearHeadTrainer(digits_features, TrainSettings())
    paper = ls.run_from_config(trainer, paper_cfg, noise_scope(0))
    assert "safeguard" not in paper[0].search["config"]
    assert paper[0].search["config"] == ls.run_from_config(trainer, {**config, "linear_scaling": {}}, noise_scope(0))[0].search["config"]
    safe = ls.run_safeguarded_from_config(trainer, config, noise_scope(0))
    assert safe[0].search["config"]["safeguard"] == Safeguard.from_config(guards).to_dict()


def test_true_is_hashed_as_the_recommended_constants_it_stands_for():
    base = {"privacy": {"delta": 1e-5, "target_eps": [1]}, "search_space": {}, "training": {},
            "selection": {}, "baselines": {}}
    explicit = RECOMMENDED.to_dict()
    settings = study_config.run_settings(base | {"linear_scaling": {"safeguard": True}}, "raw", "digits", "linear_scaling")
    assert settings["linear_scaling"]["safeguard"] == explicit
    assert settings == study_config.run_settings(base | {"linear_scaling": {"safeguard": explicit}}, "raw", "digits", "linear_scaling")


def test_a_language_safeguarded_job_hashes_the_guards_it_runs(monkeypatch):
    """The language method `linear_scaling_safeguarded` runs the recommended guards unless its study
    sets others: its settings (what reruns it) hold them, so new recommended constants rerun it."""
    study = {"name": "s", "task": "classification", "methods": ["linear_scaling", ls.SAFEGUARDED], "overrides": {}}
    config = {"language": {"studies": [study]}, "privacy": {"delta": 1e-5, "target_eps": [1]}, "linear_scaling": {}}
    settings = study_config.language_settings(config, "s", ls.SAFEGUARDED)
    assert settings["safeguard"] == RECOMMENDED.to_dict() and "noise_key" in settings
    paper = study_config.language_settings(config, "s", "linear_scaling")
    assert "safeguard" not in paper and study_config.language_settings(config, "s") == {k: paper[k] for k in ("study", "base")}
    monkeypatch.setattr("dphpo.hpo.linear_scaling_plan.RECOMMENDED_SAFEGUARD", Safeguard(decompose="max_steps"))
    assert study_config.language_settings(config, "s", ls.SAFEGUARDED)["safeguard"] == {"decompose": "max_steps", "max_extrapolation": None}
    study["overrides"] = {"linear_scaling": {"safeguard": {"decompose": "min_steps", "tie_margin": 2}}}
    assert study_config.language_settings(config, "s", ls.SAFEGUARDED)["safeguard"]["tie_margin"] == 2.0


def test_a_nan_score_is_never_the_pick():
    """Audit: np.argmax returns the first NaN, so a diverged trial's NaN score was the paper's pick, and the
    tie-margin pick raised after the stage had trained (max of an empty list)."""
    from dphpo.hpo.linear_scaling_guards import LargestTied, best_score

    scores, rs = [401.3, math.nan, 386.4], [1.0, 2.0, 3.0]
    rule = SelectionRule(rule="noisy_train_accuracy", noise_std=1.0)
    assert best_released(scores) == best_score(scores, rs, rule) == 0
    assert LargestTied(2.0)(scores, rs, rule) == 0 and LargestTied(20.0)(scores, rs, rule) == 2
    assert LargestTied(2.0)([math.nan, math.nan], rs, rule) == 0  # nothing finite: the first, no error
