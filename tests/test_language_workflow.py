"""The language half of the paper through Snakemake: the DAG of every language table and Fig. 4, and a
tiny real study end to end (a small GPT-2 pretrained on public text, DP fine-tuned on tweets) whose
every result stays within its total ε."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = "tests/configs/language_tiny.yaml"
LANGUAGE_TARGETS = [f"results/tables/table{n}.md" for n in (6, 7, 8, 9, 17, 18, 19, 20)] + ["results/figures/figure4_language_pareto.png"]


def snakemake(*args, cwd=ROOT, timeout=900):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_language_tables_are_in_the_paper_dag():
    out = snakemake("-n", "--configfile", TINY, "--replace-workflow-config", "paper", "--quiet", "rules")
    assert out.returncode == 0, out.stderr[-3000:]
    for rule in ("language_pretrain", "language_cache", "language_method", "language_nonprivate", "language_table", "language_figure4"):
        assert rule in out.stdout, rule


def test_table9_at_an_eps_no_study_targets_says_so(monkeypatch):
    """language.tables.eps picks Table 9's rows among each study's targets: at another ε the table says which
    targets there are, not that the study is undefined."""
    import yaml

    from dphpo.report import language
    from dphpo.studies.validate import validate_config

    cfg = yaml.safe_load((ROOT / TINY).read_text())
    validate_config(cfg, str(ROOT / "workflow/schemas/config.schema.yaml"), cuda_available=None)
    study = cfg["language"]["tables"]["table9"]

    def records(self, name, method):  # every target's release present
        return [{"target": {"eps": t}, "test_metric": 80.0, "metric": "accuracy", "total_eps": t, "total_delta": 1e-5,
                 "released": {"r": 1.0}, "selection": {"rule": "noisy_train_accuracy"}, "private": True}
                for t in self.targets(name)]

    monkeypatch.setattr(language.Reader, "records", records)
    target = language.Reader(cfg).targets(study)[0]
    cfg["language"]["tables"]["eps"] = target
    assert language.build(cfg, "table9").rows
    cfg["language"]["tables"]["eps"] = target / 3
    table = language.build(cfg, "table9")
    assert not table.rows and table.notes[0].startswith(f"language.tables.eps = {target / 3:g} is not a target ε of {study}")


def test_bad_language_study_is_refused_before_any_job(tmp_path):
    import yaml

    cfg = yaml.safe_load((ROOT / TINY).read_text())
    cfg["language"]["studies"][0]["methods"] = ["papernot_steinke"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = snakemake("-n", "--configfile", str(path), "--replace-workflow-config", "paper")
    assert out.returncode != 0 and "methods" in (out.stderr + out.stdout)


def test_infeasible_language_budget_is_refused_before_any_job(tmp_path):
    import yaml

    cfg = yaml.safe_load((ROOT / TINY).read_text())
    cfg["language"]["studies"][0]["overrides"]["linear_scaling"] = {"stage_eps": [0.6, 0.7], "budget_mode": "fraction"}
    path = tmp_path / "infeasible.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = snakemake("-n", "--configfile", str(path), "--replace-workflow-config", "paper")
    assert out.returncode != 0
    assert "language.studies.tiny_cls" in out.stderr + out.stdout and "eps" in out.stderr + out.stdout


@pytest.mark.slow
def test_tiny_language_study_end_to_end_within_budget(tmp_path, monkeypatch):
    run = "results/language/tiny_lm/random_search/seed0"
    targets = [f"{run}/eps{e}/result.json" for e in (1, 3)]
    out = snakemake("--cores", "2", "--configfile", str(ROOT / TINY), "--replace-workflow-config", "-d", str(tmp_path),
                    "--snakefile", str(ROOT / "Snakefile"), *targets, "results/tables/table17.md", "results/tables/table20.md")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = [json.loads((tmp_path / t).read_text()) for t in targets]
    assert [r["target"]["eps"] for r in records] == [1, 3]  # the eps is in the record (one per target)
    for r in records:
        assert r["metric"] == "perplexity" and "release" in r
        assert r["total_eps"] <= r["target"]["eps"] and r["within_budget"]
        assert r["provenance"]["accountant"]["name"] == "prv"
        assert r["provenance"]["study"] == "tiny_lm" and r["provenance"]["method"] == "random_search"
        assert r["test_metric"] > 1.0
    assert (tmp_path / run / "eps3/model.pt").is_file() and "internal" in json.loads((tmp_path / run / "eps3/internal.json").read_text())
    assert "tiny_lm" in (tmp_path / "results/tables/table17.md").read_text()
    lora = [json.loads((tmp_path / f"results/language/tiny_lm_lora/linear_scaling/seed0/eps{e}/result.json").read_text()) for e in (1, 3)]
    trainer = lora[0]["provenance"]["trainer"]
    assert trainer["task"]["lora"]["rank"] == 2 and all("lora_" in n for n in trainer["task"]["trainable"])
    assert all(r["total_eps"] <= r["target"]["eps"] for r in lora)
    assert "| LoRA" in (tmp_path / "results/tables/table20.md").read_text()
    # a table of another config refuses these releases (Snakemake may not rerun them: --rerun-triggers mtime)
    from dphpo.errors import OutputFileError
    from dphpo.report.tables import load_results
    from dphpo.studies import config as study_config
    from dphpo.studies.validate import load_config

    monkeypatch.chdir(tmp_path)

    def check_nonprivate(config):
        paths = study_config.language_result_files(config, "tiny_lm", "nonprivate")
        study_config.check_language_inputs(paths, load_results(paths), config, "tiny_lm", "nonprivate")

    config = load_config([ROOT / TINY])
    study_config.check_language_inputs(targets, load_results(targets), config, "tiny_lm", "random_search")  # the config that made them
    check_nonprivate(config)
    tiny_lm = next(s for s in config["language"]["studies"] if s["name"] == "tiny_lm")
    tiny_lm["training"]["batch_size"] = 20
    with pytest.raises(OutputFileError, match="other settings than language.studies.tiny_lm") as err:
        study_config.check_language_inputs(targets, load_results(targets), config, "tiny_lm", "random_search")
    assert targets[0] in str(err.value)
    config["language"]["pretrain"]["tiny_lm"]["steps"] = 6  # another version of the LM it fine-tunes
    tiny_lm["training"]["batch_size"] = 10
    with pytest.raises(OutputFileError, match="other settings"):
        check_nonprivate(config)
