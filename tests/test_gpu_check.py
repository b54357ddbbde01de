"""benchmarks/gpu_check.py: the language rows it derives from a config, and how it judges two devices' releases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def test_the_language_rows_are_the_causal_lm_studies_with_their_pretraining_and_tables(tmp_path):
    config, targets = gpu_check.language_rows(ROOT / "config/paper_embedded.yaml", tmp_path / "rows.yaml")
    rows = yaml.safe_load(config.read_text())
    names = [s["name"] for s in rows["language"]["studies"]]
    assert names and all(s["task"] == "causal_lm" for s in rows["language"]["studies"])
    assert "tweets_minilm_last1" not in names  # needs the MiniLM package
    assert set(rows["language"]["pretrain"]) == {s["model"]["pretrain"] for s in rows["language"]["studies"]}
    assert "table6" not in rows["language"]["tables"] and "table9" not in rows["language"]["tables"]  # MiniLM's tables
    assert "results/tables/table20.md" in targets and "paper" not in rows and "variants" not in rows
    # the derived config is a valid study whose targets are exactly the language jobs
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(config), "--replace-workflow-config",
                          "-d", str(tmp_path / "tree"), "-s", str(ROOT / "Snakefile"), *targets],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "wildcards: study=tweets_gpt2_small, method=linear_scaling" in out.stdout and "run_method" not in out.stdout


def write_release(root: Path, rel: str, record: dict, weights: dict) -> None:
    path = root / "results" / rel
    path.mkdir(parents=True)
    (path / "result.json").write_text(json.dumps(record))
    if rel.startswith("language"):
        torch.save({k: torch.tensor(v) for k, v in weights.items()}, path / "model.pt")
    else:
        np.savez(path / "model.npz", **weights)


@pytest.mark.parametrize(("score", "delta", "agree"), [(0.91, 0.0, True), (0.91, 1e-3, False), (250.0, 0.01, True), (250.0, 0.1, False)])
def test_scores_agree_to_float_rounding_not_beyond(score, delta, agree):
    assert gpu_check._scores_agree(score, score + delta) is agree


def test_releases_are_compared_by_score_and_weights_with_the_language_tolerance(tmp_path):
    w = np.linspace(1.0, 2.0, 6, dtype=np.float32)
    write_release(tmp_path / "a", "runs/d/e/m/default/seed0/eps1", {"test_accuracy": 0.9}, {"W": w})
    write_release(tmp_path / "b", "runs/d/e/m/default/seed0/eps1", {"test_accuracy": 0.9}, {"W": w * (1 + 5e-4)})
    write_release(tmp_path / "a", "language/s/m/seed0/eps1", {"test_accuracy": None, "test_metric": 250.0}, {"w": w})
    write_release(tmp_path / "b", "language/s/m/seed0/eps1", {"test_accuracy": None, "test_metric": 250.001}, {"w": w * (1 + 5e-4)})
    rows = {r["release"]: r for r in gpu_check.compare_releases(tmp_path / "a", tmp_path / "b")}
    vision, language = rows["runs/d/e/m/default/seed0/eps1"], rows["language/s/m/seed0/eps1"]
    assert vision["weights_rel"] == pytest.approx(5e-4, rel=1e-2) and vision["weights_rel"] > vision["weights_rtol"]  # a vision miss
    assert language["acc_cpu"] == 250.0 and language["weights_rel"] <= language["weights_rtol"]  # Adam's rounding, within
