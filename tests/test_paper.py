"""The paper target: the full grid's DAG, the two ablation accountants, and every table and figure of a
tiny real run (scikit-learn digits, raw pixels) checked against its config and its result files."""

import csv
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dphpo.hpo import linear_scaling as ls
from dphpo.hpo.common import LinearHeadTrainer, PreparedFeatures, TrainSettings
from dphpo.hpo.selection import SelectionRule
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.accountant import MINIBATCH_RDP_ORDERS, RUN_RDP_ORDERS
from dphpo.privacy.gdp import mu_from_eps
from dphpo.privacy.rdp import rdp_to_dp
from dphpo.train.dpgd import TrialBatch, train_linear_dpgd
from dphpo.train.noise import secret_generator

from conftest import noise_scope

REPO = Path(__file__).resolve().parents[1]
PAPER_TINY = REPO / "tests" / "configs" / "paper_tiny.yaml"
DELTA = 1e-5


def snakemake(*args, cwd=REPO, check=True, timeout=1200):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' block of a dry-run: rule -> number of jobs (and 'total')."""
    block = output.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


# --------------------------------------------------------------------------------------------
# The full grid and the embedded run: the DAG builds


def test_paper_config_dry_run_builds_the_full_dag(tmp_path):
    # how long the DAG takes to build is measured by benchmarks/dag.py, not asserted here
    proc = snakemake("-n", "--quiet", "rules", "--configfile", "config/paper.yaml", "--replace-workflow-config", "paper", "-d", str(tmp_path))
    jobs = job_counts(proc.stdout + proc.stderr)
    # low thousands: trials are batched into one job per (study, method/stage, variant, seed)
    assert 1000 <= jobs["total"] <= 3500
    # 5 datasets × 4 timm models + CIFAR10 with the four pretrained-on-public extractors (two of them
    # GroupNorm WRNs without / with DP continual pre-training, Bu et al.) (+ CNN pixels)
    # + Table 5's shifts: three WILDS studies (waterbirds, fmow, camelyon17 with beitv2) and five test-only
    # caches (fmow_ood, camelyon17_ood, cifar10_1, cifar10_c, cifar100_c) + ImageNet on EVA-02 (Tables 3, 10, 12, Fig. 2)
    assert jobs["extract_features"] == 34 and jobs["pretrain_public"] == 4
    assert jobs["nonprivate_reference"] == 28
    # one generic rule per kind: Tables 2-5, 10-16, Bu et al.'s and Fig. 2 tabulated; Figures 2, 3 and 6
    assert jobs["paper_table"] == 13 and jobs["paper_figure"] == 3
    # Fig. 2's shared search (variant shared_search): its own 9 targets, a final job per target and seed
    assert jobs["linear_scaling_target"] == 9 * 5
    # Table 14: more noise and subsampling, one job per seed each
    assert jobs["linear_scaling_reduce"] == 10
    assert jobs["paper_evaluation"] == 1 and jobs["paper_provenance"] == 1  # Table 5's evaluation
    assert jobs["paper_heatmap"] == 12 and jobs["paper_pareto"] == 4
    # the language half (Panda et al. §5.4-5.5): 10 studies × their methods × 5 seeds, Tables 6-9, 17-20, Fig. 4,
    # and Table 3's SQuAD row (OPT-13B, DP-SGD + LoRA: 3 methods × 5 seeds at eps 1, no non-private reference)
    # one generic rule: a job per study x method x seed; a local language_release per target eps links its files
    assert jobs["language_method"] == 145 and jobs["language_nonprivate"] == 8 and jobs["language_cache"] == 5
    assert jobs["language_release"] == 510
    assert jobs["language_table"] == 8 and jobs["language_figure4"] == 1


def test_paper_config_pins_timm_models_to_tags_that_exist():
    import timm

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    models = [e["model"] for e in cfg["extractors"].values() if e["kind"] == "timm"]
    assert len(models) == 5  # 4 for Table 4, EVA-02 for the ImageNet rows
    for model in models:
        assert "." in model, f"{model}: not pinned to a pretrained tag"
        assert model in timm.list_pretrained(model), model


def test_paper_embedded_dry_run_builds_every_table_and_figure(tmp_path):
    proc = snakemake("-n", "--quiet", "rules", "--configfile", "config/paper_embedded.yaml", "--replace-workflow-config", "paper", "-d", str(tmp_path))
    jobs = job_counts(proc.stdout + proc.stderr)
    assert jobs["total"] - jobs["language_release"] < 320  # sized for about an hour on 2 cores (a release is a link)
    assert jobs["linear_scaling_target"] == 5 * 2  # Fig. 2's shared search: 5 targets × 2 seeds
    # 5 studies (MNIST × 2, tweets, digits × 2 for Bu et al.), 3 datasets, 3 pretrained extractors
    assert jobs["paper_heatmap"] == 5 and jobs["paper_pareto"] == 3 and jobs["pretrain_public"] == 3
    assert jobs["paper_table"] == 13 and jobs["paper_evaluation"] == 1
    assert jobs["linear_scaling_reduce"] == 2 * len(yaml.safe_load((REPO / "config" / "paper_embedded.yaml").read_text())["seeds"])


def test_paper_embedded_runs_the_default_studys_settings():
    """Both configs write the same result paths with the same settings but for the target list (which the
    run-settings hash covers, README says so): the hash, a rule param, reruns whatever differs instead of
    reusing it."""
    from dphpo.studies import config as study_config

    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    paper = yaml.safe_load((REPO / "config" / "paper_embedded.yaml").read_text())
    for key in study_config.RUN_SETTINGS_KEYS:
        if key != "privacy":
            assert paper[key] == default[key], key
    assert set(default["privacy"]["target_eps"]) <= set(paper["privacy"]["target_eps"])
    assert paper["extractors"]["efficientnet_lite0"] == default["extractors"]["efficientnet_lite0"]
    changed = study_config.deep_merge(default, {"search_space": {"steps": [10, 20]}})
    same = study_config.run_settings_hash(default, "default", "efficientnet_lite0", "mnist", "linear_scaling")
    assert study_config.run_settings_hash(changed, "default", "efficientnet_lite0", "mnist", "linear_scaling") != same
    assert study_config.run_settings_hash(study_config.deep_merge(default, {"seeds": [7]}), "default", "efficientnet_lite0", "mnist", "linear_scaling") == same


def test_slurm_profile_sets_gpu_model_and_partition_on_gpu_rules_only():
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert {"slurm_account", "slurm_partition"} <= set(profile["default-resources"])
    assert "gpu_model" not in profile["default-resources"] and "gpu" not in profile["default-resources"]
    gpu_rules = {rule for rule, res in paper["resources"].items() if res.get("gpu")}
    assert gpu_rules >= {"extract_features", "linear_scaling_stage", "linear_scaling_final", "run_method"}
    for rule in gpu_rules:
        assert {"gpu_model", "slurm_partition"} <= set(profile["set-resources"][rule]), rule
    for key in ("jobs", "latency-wait", "retries"):
        assert key in profile
    # rules themselves set no partition, account or GPU model
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        assert not re.search(r"\b(slurm_partition|slurm_account|gpu_model)\s*[=:]\s*[\"'\w]", smk.read_text()), smk


# --------------------------------------------------------------------------------------------
# The two ablations that leave exact GDP: minibatch DP-SGD and RDP accounting


def test_minibatch_run_rdp_curve_matches_dp_accounting():
    import dp_accounting as dpa
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    entry = TrainSettings(batch_size=256).accountant_for(10_000).entry("run", sigma=1.3, steps=120)
    orders, curve = np.asarray(entry.rdp_orders), np.asarray(entry.rdp_values)
    assert np.array_equal(orders, MINIBATCH_RDP_ORDERS)
    acc = RdpAccountant(list(orders))
    acc.compose(dpa.PoissonSampledDpEvent(256 / 10_000, dpa.GaussianDpEvent(1.3)), 120)
    np.testing.assert_allclose(curve, acc._rdp, rtol=1e-8)
    assert rdp_to_dp(orders, curve, DELTA) == pytest.approx(acc.get_epsilon(DELTA), rel=1e-6)


def test_minibatch_sigma_is_calibrated_to_the_budget_and_prv_agrees():
    from dphpo.privacy.prv import prv_eps_bounds_subsampled_gaussian

    accountant = TrainSettings(batch_size=256).accountant_for(10_000)
    sigma = accountant.sigma_for_eps(1.0, steps=100)
    eps = accountant.standalone_eps(sigma, 100)
    assert 0.999 <= eps <= 1.0
    prv = prv_eps_bounds_subsampled_gaussian(256 / 10_000, sigma, 100, DELTA)
    # the PRV accountant is tighter than RDP: its upper bound stays below the RDP-calibrated budget
    assert 0.7 < prv["eps_upper"] <= 1.0
    # subsampling buys privacy: far less noise than the same steps full batch
    assert sigma < TrainSettings().accountant_for(10_000).sigma_for_eps(1.0, 100) / 5


def test_rdp_accounting_needs_more_noise_than_exact_gdp():
    import dp_accounting as dpa
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    gdp, rdp = TrainSettings().accountant_for(1000), TrainSettings(accountant="rdp").accountant_for(1000)
    for eps in (0.1, 1.0, 4.0):
        s_gdp, s_rdp = gdp.sigma_for_eps(eps, 50), rdp.sigma_for_eps(eps, 50)
        assert s_rdp > s_gdp  # RDP → (ε, δ) is looser, so the ablation pays with noise
        assert s_gdp == pytest.approx(math.sqrt(50) / mu_from_eps(eps, DELTA))
        # dp_accounting's RDP of 50 Gaussian steps at σ_rdp agrees with the budget
        acc = RdpAccountant(list(RUN_RDP_ORDERS))
        acc.compose(dpa.GaussianDpEvent(s_rdp), 50)
        assert acc.get_epsilon(DELTA) == pytest.approx(eps, rel=2e-3)
        assert rdp.standalone_eps(s_rdp, 50) <= eps


def test_minibatch_trainer_sums_a_poisson_subset_over_the_expected_batch():
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(200, 6, generator=g, dtype=torch.float64), torch.randint(0, 4, (200,), generator=g)
    q, seed = 0.25, 11
    w = train_linear_dpgd(x, y, 4, n_public=len(y), trials=TrialBatch([1.0], [1], [0.0], [seed]), momentum=0.0, free_step=False, sample_rate=q)[0]
    keep = torch.rand(200, generator=secret_generator(seed), dtype=torch.float64) < q  # the trial's first draws (float64, as drawn)
    resid = torch.softmax(torch.zeros(200, 4, dtype=torch.float64), 1) - torch.nn.functional.one_hot(y, 4)
    norms = resid.norm(dim=1) * x.norm(dim=1)
    scale = torch.clamp(1.0 / norms, max=1.0) * keep
    expected = -((resid * scale[:, None]).T @ x) / (q * 200)
    torch.testing.assert_close(w, expected)
    # full batch is untouched: q = 1 and q = None give the same weights
    w1 = train_linear_dpgd(x, y, 4, n_public=len(y), trials=TrialBatch([0.5], [3], [2.0], [seed]), sample_rate=1.0)
    w0 = train_linear_dpgd(x, y, 4, n_public=len(y), trials=TrialBatch([0.5], [3], [2.0], [seed]))
    torch.testing.assert_close(w1, w0)


@pytest.fixture(scope="module")
def digits_features():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    return PreparedFeatures(x[:1400], y[:1400], x[1400:], y[1400:], 10, "digits", {}, 1400)


@pytest.mark.parametrize("settings", [TrainSettings(batch_size=200), TrainSettings(accountant="rdp")], ids=["minibatch", "rdp"])
def test_linear_scaling_ablations_account_every_run_in_rdp_within_the_target(digits_features, settings):
    import dp_accounting as dpa
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    space = SearchSpace(eta_min=0.05, eta_max=2.0, eta_num=4, steps=(5, 10, 20))
    lsc = ls.LinearScalingConfig(n_trials=2)
    results = ls.run(LinearHeadTrainer(digits_features, settings), lsc, space, SelectionRule(noise_std=50.0), [1.0], noise_scope(0))
    for res in results:
        total = res.total
        assert total["accountant"] == "rdp" and total["mu"] is None
        assert res.target_eps * 0.999 <= total["eps"] <= res.target_eps
        runs = [e for e in res.ledger.entries if "trial" in e.what or e.what == "final run"]
        assert len(runs) == 5 and all(e.mechanism == "rdp" for e in runs)
        assert res.released["mu"] is None and res.released["standalone_eps"] < res.target_eps
        # recompose every release independently with dp_accounting
        acc = RdpAccountant(list(np.unique(np.concatenate([MINIBATCH_RDP_ORDERS, RUN_RDP_ORDERS]))))
        for e in res.ledger.entries:
            if e.mechanism == "gdp":  # noisy selection counts: Gaussian, sensitivity 1
                acc.compose(dpa.GaussianDpEvent(1.0 / e.mu), e.count)
            elif e.details["sample_rate"] is None:
                acc.compose(dpa.GaussianDpEvent(e.details["sigma"]), e.details["steps"])
            else:
                acc.compose(dpa.PoissonSampledDpEvent(e.details["sample_rate"], dpa.GaussianDpEvent(e.details["sigma"])), e.details["steps"])
        assert acc.get_epsilon(DELTA) <= res.target_eps * 1.002


# --------------------------------------------------------------------------------------------
# A tiny real paper run: every table and figure, against the config and the result files


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("paper_tiny")
    start = time.monotonic()
    snakemake("--cores", "2", "--configfile", str(PAPER_TINY), "--replace-workflow-config", "paper", "-d", str(workdir))
    snakemake("--configfile", str(PAPER_TINY), "--replace-workflow-config", "paper", "-d", str(workdir), "--report", str(workdir / "report.html"))
    print(f"paper_tiny run + report: {time.monotonic() - start:.0f} s")
    return workdir, yaml.safe_load(PAPER_TINY.read_text())


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames), list(reader)


def number(cell: str) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


TABLES = ["table2", "table3", "table4", "table5", "table10", "table11", "table13", "table14", "table15", "table16"]


@pytest.mark.slow
def test_every_table_is_written_in_four_formats_with_its_total_eps_and_selection(paper_run):
    workdir, _ = paper_run
    for name in TABLES:
        for ext in ("md", "csv", "tex", "html"):
            assert (workdir / "results" / "tables" / f"{name}.{ext}").stat().st_size > 200, (name, ext)
        columns, _ = read_csv(workdir / "results" / "tables" / f"{name}.csv")
        assert any(c.startswith("total ε") for c in columns), name
        assert any(c.startswith("selection") for c in columns), name
        md = (workdir / "results" / "tables" / f"{name}.md").read_text()
        assert "Panda et al. Table" in md
        assert "\\begin{tabular}" in (workdir / "results" / "tables" / f"{name}.tex").read_text()


@pytest.mark.slow
def test_every_table_has_the_rows_the_config_implies(paper_run):
    workdir, cfg = paper_run
    tables = workdir / "results" / "tables"
    p = cfg["paper"]
    _, t2 = read_csv(tables / "table2.csv")
    assert [r["method"] for r in t2] == [
        "Koskela & Kulkarni (2023)", "Papernot & Steinke (2022)", "Ours (linear scaling)",
        "Random search", "Grid search (oracle, HPO cost not included)", "Ours (linear scaling)",
    ]
    _, t3 = read_csv(tables / "table3.csv")
    assert [(r["dataset"], r["extractor"]) for r in t3] == [(s["dataset"], s["extractor"]) for s in cfg["studies"]]
    _, t4 = read_csv(tables / "table4.csv")
    assert len(t4) == len(cfg["studies"])
    _, t5 = read_csv(tables / "table5.csv")
    assert [r["train → test"] for r in t5] == [f"{s['train']} → {s['test']}" for s in p["table5"]]
    _, t10 = read_csv(tables / "table10.csv")
    assert [r["variant"] for r in t10] == ["default", "linear3", "quadratic3"]
    _, t11 = read_csv(tables / "table11.csv")
    assert len(t11) == 3
    _, t13 = read_csv(tables / "table13.csv")
    assert [r["variant"] for r in t13] == ["–", *p["table13"]["variants"]]
    _, t15 = read_csv(tables / "table15.csv")
    assert [r["variant"] for r in t15] == ["bias", "random_init", "minibatch", "no_momentum", "rdp_accounting", "small_clip"]
    _, t16 = read_csv(tables / "table16.csv")
    assert [r["dataset"] for r in t16] == p["table16"]["datasets"]


@pytest.mark.slow
def test_every_reported_total_eps_is_at_most_its_target(paper_run):
    workdir, _ = paper_run
    checked = 0
    for name in TABLES:
        _, rows = read_csv(workdir / "results" / "tables" / f"{name}.csv")
        for row in rows:
            target = number(row.get("target ε"))
            for col, cell in row.items():
                if col.startswith("total ε") and number(cell) is not None:
                    assert target is not None, (name, col)
                    if math.isinf(number(cell)):  # a search not accounted says so on its row
                        assert any(w in str(row).lower() for w in ("not included", "non-private")), (name, row)
                        continue
                    assert number(cell) <= target, (name, row)
                    checked += 1
        # an oracle row's ε = ∞ is stated, not an overrun: no false warning beside it
        assert "WARNING" not in (workdir / "results" / "tables" / f"{name}.md").read_text(), name
    assert checked >= 20


@pytest.mark.slow
def test_cells_the_config_cannot_fill_name_what_they_need(paper_run):
    workdir, _ = paper_run
    t15 = (workdir / "results" / "tables" / "table15.md").read_text()
    for variant in ("bias", "random_init", "no_momentum", "small_clip"):  # not defined in paper_tiny.yaml
        assert f"needs: variants.{variant}" in t15
    assert "needs: variants.quadratic3" in (workdir / "results" / "tables" / "table10.md").read_text()
    _, t15_rows = read_csv(workdir / "results" / "tables" / "table15.csv")
    defined = {r["variant"]: r for r in t15_rows}
    # the paper's CIFAR numbers are shown only beside the paper's own setting, not beside paper_tiny's study
    assert not any(r["Panda et al. baseline / improvement"] for r in t15_rows)
    _, t13_rows = read_csv(workdir / "results" / "tables" / "table13.csv")
    assert not any(r["Panda et al. ε_f / acc"] for r in t13_rows)
    assert number(defined["minibatch"]["improvement (points)"]) is not None
    assert defined["minibatch"]["accountant baseline / ours"] == "rdp / gdp_closed_form"
    assert defined["rdp_accounting"]["accountant baseline / ours"] == "rdp / gdp_closed_form"


@pytest.mark.slow
def test_table_numbers_are_those_of_the_result_files(paper_run):
    workdir, cfg = paper_run
    runs = workdir / "results" / "runs" / "digits" / "raw"
    eps = "1"

    def mean_acc(method, variant="default"):
        files = sorted((runs / method / variant).glob(f"seed*/eps{eps}/result.json"))
        assert len(files) == len(cfg["seeds"])
        return 100 * np.mean([json.loads(f.read_text())["test_accuracy"] for f in files])

    ours, random, oracle = mean_acc("linear_scaling"), mean_acc("random_search"), mean_acc("grid_oracle")
    _, t3 = read_csv(workdir / "results" / "tables" / "table3.csv")
    assert t3[0]["ours (%)"].startswith(f"{ours:.2f}")
    assert t3[0]["oracle (%)"].startswith(f"{oracle:.2f}")
    assert number(t3[0]["RERR (%)"]) == pytest.approx(100 * (ours - random) / (oracle - random), abs=0.01)
    ref = json.loads((runs / "nonprivate" / "result.json").read_text())["test_accuracy"]
    _, t4 = read_csv(workdir / "results" / "tables" / "table4.csv")
    assert number(t4[0]["gap (points)"]) == pytest.approx(100 * ref - ours, abs=0.01)


@pytest.mark.slow
def test_figure2_reads_one_search_shared_by_its_variants_own_targets(paper_run):
    workdir, cfg = paper_run
    variant = cfg["paper"]["figure2"]["variant"]
    own = cfg["variants"][variant]["privacy"]["target_eps"]
    runs = workdir / "results" / "runs" / "digits" / "raw" / "linear_scaling" / variant / "seed0"
    assert sorted(p.name for p in runs.glob("eps*")) == sorted(f"eps{e:g}" for e in own)  # its targets only
    stages = [json.loads((runs / f"stage{k}.json").read_text()) for k in (1, 2)]
    assert [len(st["searches"]) for st in stages] == [1, 1]  # one search for all of them
    ledgers = []
    for e in own:
        result = json.loads((runs / f"eps{e:g}" / "result.json").read_text())
        assert result["total_eps"] <= e * (1 + 1e-9)
        ledgers.append([x for x in result["privacy"]["entries"] if x["what"].startswith("stage")])
    assert ledgers[0] and all(ledger == ledgers[0] for ledger in ledgers)  # every total holds the same search
    _, rows = read_csv(workdir / "results" / "tables" / "figure2.csv")
    ours = [r for r in rows if number(r["target ε"]) is not None]  # not the ε = ∞ reference row
    assert [number(r["target ε"]) for r in ours] == own
    assert {r["search"] for r in ours} == {"shared by all targets (budget_mode absolute)"}


@pytest.mark.slow
def test_every_figure_and_the_report_are_written(paper_run):
    workdir, _ = paper_run
    figures = workdir / "results" / "figures"
    for png in ["figure2_accuracy_vs_eps.png", "figure3_r_vs_eps.png", "figure6_r_vs_gap.png", "heatmaps/digits/raw.png", "pareto/digits.png"]:
        data = (figures / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png
    report = (workdir / "report.html").read_text()
    for text in ["Panda et al., Table 2", "Panda et al., Table 15", "Panda et al., Figure 2", "Panda et al., Figure 3", "Figures 5, 17 and 18", "Provenance"]:
        assert text in report, text
    prov = (workdir / "results" / "tables" / "provenance.md").read_text()
    assert "rdp" in prov and "gdp_closed_form" in prov


@pytest.mark.slow
def test_a_paper_table_refuses_a_release_computed_with_other_settings(paper_run):
    """As the study tables do (check_inputs): a release Snakemake did not rerun after a config change (its
    metadata lost, --rerun-triggers mtime, a copied tree) is refused by the paper tables, naming the key."""
    from dphpo.errors import OutputFileError
    from dphpo.hpo import registry
    from dphpo.report import plan as paper_plan
    from dphpo.studies import config as study_config
    from dphpo.studies.validate import load_config

    workdir, _ = paper_run
    cfg = load_config([PAPER_TINY])
    files = paper_plan.inputs(cfg, "table3", [list(job) for job in registry.method_jobs(cfg)])
    runs = study_config.run_results(str(workdir / f) for fs in files.values() for f in fs)
    assert runs and all(p.endswith("result.json") for p in runs)
    study_config.check_inputs(runs, cfg)  # the releases the paper run wrote are of its config
    cfg["selection"]["noise_std"] = 5.0
    with pytest.raises(OutputFileError, match=r"selection\.noise_std"):
        study_config.check_inputs(runs, cfg)


@pytest.mark.slow
def test_a_changed_table5_label_map_re_evaluates_and_rewrites_table5(paper_run, tmp_path):
    """Audit: paper_evaluation's only param was the method jobs, so another `paper.table5[].label_map` (or
    metric) left table5_shift.json and Table 5 as they were, computed with the old mapping."""
    workdir, _ = paper_run
    same = snakemake("-n", "--configfile", str(PAPER_TINY), "--replace-workflow-config", "paper", "-d", str(workdir)).stdout
    assert "paper_evaluation" not in (job_counts(same) if "Job stats:" in same else {})
    cfg = yaml.safe_load(PAPER_TINY.read_text())
    cfg["paper"]["table5"][0]["label_map"] = {9: 8}
    changed = tmp_path / "paper_tiny.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    out = snakemake("-n", "--configfile", str(changed), "--replace-workflow-config", "paper", "-d", str(workdir)).stdout
    assert "Job stats:" in out, out[-1000:]  # before: "Nothing to be done"
    counts = job_counts(out)
    assert counts.get("paper_evaluation") == 1 and counts.get("paper_table", 0) >= 1, counts
    assert not {"run_method", "extract_features"} & set(counts), counts  # nothing trained again


def test_a_final_run_of_an_unplanned_or_aliased_target_is_refused_before_any_job(tmp_path):
    # Fig. 2's shared search has its own targets (1, 4): eps1.0 would release ε = 1 a second time under a
    # path every consumer refuses, eps0.5 a target whose budget was never checked
    base = "results/runs/digits/raw/linear_scaling/shared_search/seed0"
    for eps, why in (("1.0", "'1.0' is not one of its targets (1, 4"), ("0.5", "'0.5' is not one of its targets")):
        proc = snakemake("-n", "--configfile", str(PAPER_TINY), "--replace-workflow-config", "-d", str(tmp_path),
                         f"{base}/eps{eps}/result.json", check=False)
        assert proc.returncode != 0 and why in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    snakemake("-n", "--configfile", str(PAPER_TINY), "--replace-workflow-config", "-d", str(tmp_path), f"{base}/eps4/result.json")
