"""The workflow driven as users drive it: `python -m snakemake` in a subprocess."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"


def snakemake(*args, cwd=REPO, check=True):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def write_config(tmp_path, **overrides):
    cfg = yaml.safe_load(TINY.read_text())
    for key, value in overrides.items():
        cfg[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_lint_is_clean():
    proc = snakemake("--lint", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakefmt_is_clean():
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_default_config_dry_run_builds_the_study(tmp_path):
    # an empty working directory, so results already built in the checkout hide no job
    config = str(REPO / "config" / "config.yaml")
    proc = snakemake("-n", "--quiet", "rules", "--configfile", config, "-d", str(tmp_path))
    out = proc.stdout + proc.stderr
    for rule in [
        "extract_features",
        "linear_scaling_stage",
        "linear_scaling_final",
        "nonprivate_reference",
        "table_linear_scaling",
        "run_method",
        "table_hpo_comparison",
    ]:
        assert rule in out


def test_unknown_config_key_is_named(tmp_path):
    cfg = write_config(tmp_path, privacy={"target_eps": [1], "delta": 1e-5, "dleta": 3})
    proc = snakemake("-n", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path), check=False)
    assert proc.returncode != 0
    assert "dleta" in proc.stdout + proc.stderr


def test_unknown_dataset_is_refused(tmp_path):
    cfg = write_config(tmp_path, studies=[{"dataset": "imagenet21k", "extractor": "raw"}])
    proc = snakemake("-n", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "imagenet21k" in out and "studies[0].dataset" in out


def test_infeasible_budget_is_refused_before_any_job(tmp_path):
    cfg = write_config(tmp_path, linear_scaling={"stage_eps": [0.5, 1.0], "budget_mode": "absolute"})
    proc = snakemake("--cores", "1", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path), check=False)
    assert proc.returncode != 0
    assert "infeasible privacy plan" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path):
    cfg = write_config(tmp_path)
    proc = snakemake("--cores", "2", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path))
    # the run ends with what its releases protect, in plain words, and the command that publishes them
    said = proc.stdout + proc.stderr
    assert "privacy: digits: each released model is (1 / 8, 1e-05)-DP at its target ε, its search included" in said
    assert "all 36 DP releases about it under results together" in said and "dphpo release results release" in said
    results = sorted((tmp_path / "results" / "runs" / "digits" / "raw" / "linear_scaling" / "default").glob("seed*/eps*/result.json"))
    assert len(results) == 4  # 2 seeds × 2 targets
    for path in results:
        res = json.loads(path.read_text())
        target = res["target"]["eps"]
        assert res["total_eps"] <= target
        assert res["total_eps"] == pytest.approx(target, rel=1e-6)
        assert res["within_budget"] and res["selection"]["private"]
        whats = [e["what"] for e in res["privacy"]["entries"]]
        assert sum(w.startswith("stage") and "trial" in w for w in whats) == 6
        assert whats[-1] == "final run"
        assert res["test_accuracy"] > 0.5
        prov = res["provenance"]
        # the release carries keyed MACs of the private data's checksums, never the plain ones
        assert len(prov["feature_cache"]["content_sha256_mac"]) == 64 and prov["config_hash"]
        assert "content_sha256" not in prov["feature_cache"] and '"train_accuracy"' not in path.read_text()
        assert prov["randomness"]["noise_key_fingerprint"] and "noise_seed" not in path.read_text()
        internal = json.loads((path.parent / "internal.json").read_text())
        assert internal["internal"].startswith("NOT FOR PUBLICATION") and internal["train_accuracy"] is not None
        assert prov["package_versions"]["torch"]
        assert (path.parent / "model.npz").exists()
    table = (tmp_path / "results" / "tables" / "linear_scaling.csv").read_text().splitlines()
    assert len(table) == 1 + 2  # header + one row per target
    assert "total ε (incl. search)" in table[0]
    assert (tmp_path / "results" / "figures" / "linear_scaling_accuracy_vs_eps.png").stat().st_size > 1000
    # every baseline ran end to end (2 seeds × 2 targets each) and stayed within its budget
    runs = tmp_path / "results" / "runs" / "digits" / "raw"
    for method in ["random_search", "random_search_k", "grid_oracle", "grid_accounted", "papernot_steinke", "koskela", "oso_dpsgd", "oso_dpsgd_cnn", "mehta"]:
        paths = sorted((runs / method / "default").glob("seed*/eps*/result.json"))
        assert len(paths) == 4, method
        for path in paths:
            res = json.loads(path.read_text())
            if method == "grid_oracle":  # selected on test data: its search is not accounted, ε = ∞
                assert res["total_eps"] == "inf" and not res["within_budget"], (method, res["total_eps"])
            else:
                assert res["within_budget"] and res["total_eps"] <= res["target"]["eps"], (method, res["total_eps"])
            assert (path.parent / "model.npz").exists()
    comparison = (tmp_path / "results" / "tables" / "hpo_comparison.csv").read_text().splitlines()
    assert len(comparison) == 1 + 2 * 10  # header + (linear scaling + 9 baselines) × 2 targets
    assert "grid search ORACLE (non-private HPO)" in (tmp_path / "results" / "tables" / "hpo_comparison.md").read_text()
    assert (tmp_path / "results" / "figures" / "hpo_comparison_accuracy_vs_eps.png").stat().st_size > 1000
    provenance = (tmp_path / "results" / "tables" / "study_provenance.md").read_text()  # every method of the study
    for method in ["linear_scaling", "nonprivate", "random_search", "grid_accounted", "oso_dpsgd_cnn", "mehta"]:
        assert f"| {method} |" in provenance, method
    for name in ("linear_scaling", "hpo_comparison"):  # the tables the Snakemake report shows inline
        assert "<table>" in (tmp_path / "results" / "tables" / f"{name}.html").read_text()
    snakemake("--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path), "--report", str(tmp_path / "report.html"))
    report = (tmp_path / "report.html").read_text()
    # labels sit in the report's JSON (non-ASCII escaped): match their ASCII part
    for text in ("hpo_comparison.html", "linear_scaling.html", "every method at equal total", "accuracy at each total"):
        assert text in report, text
    # no temporary files left behind
    assert not list((tmp_path / "results").rglob("*.tmp"))
    # a second run has nothing to do
    proc = snakemake("-n", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path))
    assert "Nothing to be done" in proc.stdout + proc.stderr
    # one method's section changed: its jobs rerun (and the tables), no sibling's (per-method settings hashes)
    mehta = yaml.safe_load(cfg.read_text())
    mehta["baselines"]["mehta"] = {"eta": 0.5}
    (tmp_path / "mehta.yaml").write_text(yaml.safe_dump(mehta))
    proc = snakemake("-n", "--configfile", str(tmp_path / "mehta.yaml"), "--replace-workflow-config", "-d", str(tmp_path))
    out = proc.stdout + proc.stderr
    assert set(re.findall(r"method=(\w+)", out)) == {"mehta"} and "linear_scaling_stage" not in out, out
    # a deleted released model is restored by the same command (models are targets of `all`)
    (runs / "mehta" / "default" / "seed0" / "eps1" / "model.npz").unlink()
    proc = snakemake("-n", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path))
    assert "run_method" in proc.stdout + proc.stderr and "Nothing to be done" not in proc.stdout + proc.stderr
    snakemake("--cores", "2", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path))
    # the publishable bundle of the tree: DP releases only, checked; the raw tree is no bundle
    from dphpo.cli import main as dphpo

    bundle = tmp_path / "bundle"
    assert dphpo(["release", str(tmp_path / "results"), str(bundle)]) == 0
    files = [p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()]
    assert not [f for f in files if "/nonprivate/" in f or "/grid_oracle/" in f or "/stage" in f or f.endswith((".json", ".tsv", ".log", ".h5")) and not f.endswith(("result.json", "privacy.json"))]
    assert len([f for f in files if f.endswith("result.json")]) == 4 * 9  # linear scaling + 8 DP baselines
    assert dphpo(["verify", "--release", str(bundle)]) == 0
    assert dphpo(["verify", "--release", str(tmp_path / "results")]) == 1
    assert dphpo(["verify", str(tmp_path / "results"), "--configfile", str(cfg)]) == 0  # complete, and nothing extra
    (digits,) = json.loads((bundle / "privacy.json").read_text())["datasets"]
    assert digits["composed"]["eps"] > 8 and len(digits["releases"]) == 36
    # metadata lost, then a run setting changed: the log says the results are rerun, and they are
    import shutil

    shutil.rmtree(tmp_path / ".snakemake")
    cfg = write_config(tmp_path, training={"clip_norm": 0.5})
    before = (tmp_path / "results" / "tables" / "linear_scaling.csv").stat().st_mtime
    proc = snakemake("--cores", "2", "--configfile", str(cfg), "--replace-workflow-config", "-d", str(tmp_path))
    assert "were computed with other settings (training.clip_norm" in proc.stdout + proc.stderr
    for path in (tmp_path / "results" / "runs").rglob("eps*/result.json"):
        assert json.loads(path.read_text())["provenance"]["settings"]["training"]["clip_norm"] == 0.5, path
    assert (tmp_path / "results" / "tables" / "linear_scaling.csv").stat().st_mtime > before  # the tables too
