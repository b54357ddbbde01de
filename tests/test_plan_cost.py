"""`dphpo plan-cost` (issue 32): the study target's cost per rule before it runs — the jobs it counts are
the jobs Snakemake's DAG holds, and its FLOP follow 4·N·d·K per trial-step."""

import json
import re

import pytest
import yaml

from dphpo.cli import main
from dphpo.hpo.nonprivate import ceiling_grid
from dphpo.hpo.space import SearchSpace
from dphpo.studies import config as study_config
from dphpo.studies import cost, extraction_cost
from dphpo.studies.validate import load_config

from test_workflow import REPO, TINY, snakemake

MODELLED = ("linear_scaling_stage", "linear_scaling_final", "run_method", "nonprivate_reference", "extract_features")


def dag_jobs(workdir, configfile=TINY) -> dict[str, int]:
    """Jobs per rule of a dry run of `all` (Snakemake's job stats table)."""
    proc = snakemake("-n", "--configfile", str(configfile), "--replace-workflow-config", "-d", str(workdir))
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout + proc.stderr, re.M))
    assert counts, proc.stdout + proc.stderr
    return {rule: int(n) for rule, n in counts.items()}


def test_the_jobs_it_counts_are_the_dags(tmp_path):
    config = load_config([TINY])
    counted: dict[str, int] = {}
    for r in cost.plan_cost(config, gflops=None) + extraction_cost.extraction_costs(extraction_cost.extraction_jobs(config), None, 0.0):
        rule = r.rule.split(" ")[0]  # "run_method (oso_dpsgd_cnn)" is a run_method job too
        counted[rule] = counted.get(rule, 0) + r.jobs
    dag = dag_jobs(tmp_path)
    assert {rule: dag.get(rule, 0) for rule in MODELLED} == {rule: counted.get(rule, 0) for rule in MODELLED}


def test_a_variant_with_its_own_targets_is_counted_as_a_final_job_per_target(tmp_path):
    raw = yaml.safe_load(TINY.read_text())
    raw["variants"] = {"safe_high": {"linear_scaling": {"safeguard": True}, "privacy": {"target_eps": [8]}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config([path])
    counted = {r.rule: r.jobs for r in cost.plan_cost(config, gflops=None)}
    dag = dag_jobs(tmp_path / "work", path)
    seeds = len(config["seeds"])
    assert counted["linear_scaling_target"] == dag["linear_scaling_target"] == seeds  # one target, one job per seed
    assert counted["linear_scaling_final"] == dag["linear_scaling_final"] == seeds  # the main study's, both targets
    assert counted["linear_scaling_stage"] == dag["linear_scaling_stage"]


def test_flop_are_four_n_d_k_per_trial_step_and_the_reference_trains_each_eta_of_its_grid_once():
    config = load_config([TINY])
    study = config["studies"][0]
    n, d, k = cost.study_shape(config, study["dataset"], study["extractor"])
    assert (n, d, k) == (1438, 64, 10)  # digits: 1,438 public training images of 8 x 8 pixels, 10 classes
    space = SearchSpace.from_config(config["search_space"])
    grid = ceiling_grid(space, study_config.ceiling_eta_factor(config), study_config.CEILING_ETA_DENSITY)
    assert len(grid) > len(space.grid())  # 4x as dense in η as the search grid
    (reference,) = [r for r in cost.plan_cost(config, gflops=100.0, overhead_s=0.0) if r.rule == "nonprivate_reference"]
    # the noiseless trials of one η are one run to the largest T
    assert reference.trial_steps == len({e for e, _ in grid}) * max(space.steps) * len(config["studies"])
    assert reference.flop == pytest.approx(4 * n * d * k * reference.trial_steps)
    assert reference.seconds == pytest.approx(reference.flop / 100e9)


def test_a_measured_throughput_is_positive_and_the_command_prints_every_rule(capsys):
    assert cost.measure_gflops(n=1024, d=64, k=10, trials=4, steps=2) > 0
    assert main(["plan-cost", "--configfile", str(TINY), "--gflops", "50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gflops"] == 50 and {r["rule"] for r in out["rules"]} >= set(MODELLED)
    assert out["total_seconds"] == pytest.approx(sum(r["seconds"] for r in out["rules"]))


def test_an_unknown_width_is_none_not_a_guess():
    assert cost.feature_width({"extractors": {"x": {"kind": "something_new"}}}, "digits", "x") is None


def test_runtime_limits_are_three_times_the_slowest_job_and_merge_into_the_config(tmp_path, capsys):
    rules = cost.plan_cost(load_config([TINY]), gflops=0.001, overhead_s=0.0)  # slow enough for limits above the floor
    by_rule = {r.rule: r for r in rules}
    limits = cost.runtime_limits(rules)
    for name, limit in limits.items():
        r = by_rule[name]
        assert r.longest_job_seconds * r.jobs >= r.seconds * 0.999  # the slowest job is at least the mean one
        assert limit == {"runtime": max(cost.RUNTIME_FLOOR_MIN, -(-cost.RUNTIME_SAFETY * r.longest_job_seconds // 60))}
    # the CNN baseline's jobs are run_method's too and not modelled: a limit sized for the linear heads killed
    # them (audit), so the rule keeps its own; without them it gets one
    assert "run_method" not in limits and not any(" " in name for name in limits)
    heads_only = load_config([TINY])
    heads_only["baselines"]["oso_dpsgd_cnn"]["studies"] = []
    assert "run_method" in cost.runtime_limits(cost.plan_cost(heads_only, gflops=0.001, overhead_s=0.0))
    out = tmp_path / "runtimes.yaml"
    assert main(["plan-cost", "--configfile", str(TINY), "--gflops", "0.001", "--overhead", "0", "--runtimes", str(out)]) == 0
    merged = load_config([TINY, out])
    assert {name: merged["resources"][name]["runtime"] for name in limits} == {n: v["runtime"] for n, v in limits.items()}
    assert f"wrote {out}" in capsys.readouterr().err  # stdout stays the table (or --json's object alone)
    # its own file is rewritten; any other file is not replaced, a --configfile least of all
    assert main(["plan-cost", "--configfile", str(TINY), "--gflops", "0.001", "--runtimes", str(out), "--json"]) == 0
    json.loads(capsys.readouterr().out)
    config_copy = tmp_path / "study.yaml"
    config_copy.write_text(TINY.read_text())
    for path, why in ((config_copy, "is a --configfile"), (tmp_path / "notes.yaml", "was not written by plan-cost"), (tmp_path, "is a folder")):
        if path.name == "notes.yaml":
            path.write_text("mine: 1\n")
        before = path.read_text() if path.is_file() else None
        assert main(["plan-cost", "--configfile", str(config_copy), "--gflops", "1", "--runtimes", str(path)]) == 2
        assert why in capsys.readouterr().err and (path.read_text() if path.is_file() else None) == before


def test_own_data_is_costed_by_its_declared_classes_and_its_features_width(tmp_path):
    """Audit: own-data sections declare `classes` (not num_classes) and identity features have no known
    width, so every study of the user's own data cost 0 FLOP and got no runtime limit."""
    import numpy as np

    path = tmp_path / "feats.npz"
    np.savez(path, train_x=np.zeros((30, 7), np.float32), train_y=np.zeros(30), test_x=np.zeros((5, 7), np.float32), test_y=np.zeros(5))
    config = {"datasets": {"mine": {"kind": "features", "path": str(path), "public_n_train": 200, "classes": ["a", "b", "c"]}},
              "extractors": {"given": {"kind": "identity"}}}
    assert cost.study_shape(config, "mine", "given") == (200, 7, 3)
    config["datasets"]["mine"]["path"] = str(tmp_path / "missing.npz")
    assert cost.study_shape(config, "mine", "given") == (200, None, 3)  # unknown, not a guess


LANGUAGE_TINY = TINY.parent / "language_tiny.yaml"


def test_language_rules_cost_six_p_l_per_example_and_count_the_dags_jobs(tmp_path):
    """The language rows (issue 32): a job per study x method x seed as in the DAG; examples = trial-steps x B;
    FLOP 6·P·L per example (DP-ZO: 4·P·L), P read off the pretrained LM's architecture."""
    from dphpo.studies import config as study_config
    from dphpo.studies import language_cost

    config = load_config([LANGUAGE_TINY])
    rules = {r.rule: r for r in language_cost.language_costs(config, tflops=1.0, overhead_s=0.0)}
    studies = study_config.language_studies(config)
    assert rules["language_method"].jobs == sum(len(s["methods"]) for s in studies.values()) * len(config["seeds"])
    assert rules["language_nonprivate"].jobs == sum(1 for s in studies.values() if s.get("nonprivate", True))
    out = snakemake("-n", "--configfile", str(LANGUAGE_TINY), "--replace-workflow-config", "-d", str(tmp_path), "results/tables/table17.md",
                    "results/tables/table20.md", "results/tables/table6.md", "results/tables/table9.md", "--quiet", "rules")
    assert re.search(r"^language_method\s+(\d+)$", out.stdout, re.M).group(1) == str(rules["language_method"].jobs)

    lm = studies["tiny_lm"]  # GPT-2 of 1 layer, 16 wide, vocab 300 (trained vocab may be smaller; the spec's is the bound)
    one = dict(config, language=dict(config["language"], studies=[lm]))
    (method, reference) = language_cost.language_costs(one, tflops=2.0, overhead_s=0.0)
    params = language_cost.model_parameters(config, lm)
    assert 16 * 300 * 2 < params < 40_000  # embeddings and the untied head dominate
    space = SearchSpace.from_config(study_config.language_config(config, lm, 40)["search_space"])
    assert reference.trial_steps == sum(t for _, t in space.grid())
    assert reference.examples == reference.trial_steps * lm["training"]["batch_size"]
    assert reference.flop == pytest.approx(6 * params * lm["model"]["max_len"] * reference.examples)
    assert method.seconds == pytest.approx(method.flop / 2e12)
    zo = dict(config, language=dict(config["language"], studies=[studies["tiny_zo"]]))
    (zo_method,) = language_cost.language_costs(zo, tflops=None, overhead_s=0.0)
    assert zo_method.seconds is None and zo_method.flop == pytest.approx(
        4 * language_cost.model_parameters(config, studies["tiny_zo"]) * 8 * zo_method.examples)


def test_a_language_model_of_unknown_size_is_counted_not_timed():
    from dphpo.studies import language_cost

    spec = {"name": "x", "task": "causal_lm", "model": {"name": "someone/new-model"}}
    assert language_cost.model_parameters({}, spec) is None
    assert language_cost.model_parameters({}, {"task": "classification", "model": {"name": "minilm", "train_layers": 1}}) == 1_774_464


def dry_run_jobs(log: str) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(rule, wildcards, resources) of every job of a dry run's log (Snakemake prints each job's block)."""
    jobs = []
    for block in log.split("\nrule ")[1:]:
        fields = dict(re.findall(r"^\s+(wildcards|resources): (.*)$", block, re.M))
        parse = lambda text: dict(item.split("=", 1) for item in text.split(", ") if "=" in item)  # noqa: E731
        jobs.append((block.split(":", 1)[0], parse(fields.get("wildcards", "")), parse(fields.get("resources", ""))))
    return jobs


def test_language_runtime_limits_are_per_study_and_the_rule_keeps_the_slowest(capsys):
    """The language rules are one generic rule for every study: each study gets its own slowest job's limit
    (by_study), and the rule's own runtime, the fallback, is the slowest study's."""
    from dphpo.studies import config as study_config
    from dphpo.studies import language_cost

    config = load_config([LANGUAGE_TINY])
    rules = language_cost.language_costs(config, tflops=1e-7, overhead_s=0.0)  # slow: limits above the floor
    limits = cost.runtime_limits(rules)
    for r in rules:
        for name, seconds in r.longest_by_study.items():  # each study's slowest job, as if it were the only study
            one = dict(config, language=dict(config["language"], studies=[study_config.language_study(config, name)]))
            (alone,) = [a for a in language_cost.language_costs(one, tflops=1e-7, overhead_s=0.0) if a.rule == r.rule]
            assert seconds == pytest.approx(alone.longest_job_seconds), (r.rule, name)
        by_study = {name: v["runtime"] for name, v in limits[r.rule]["by_study"].items()}
        assert by_study == {name: cost.runtime_limit(s) for name, s in r.longest_by_study.items()}
        assert limits[r.rule]["runtime"] == max(by_study.values()) == cost.runtime_limit(r.longest_job_seconds)
    method = limits["language_method"]["by_study"]
    assert method["tiny_cls"]["runtime"] > method["tiny_lm"]["runtime"] > cost.RUNTIME_FLOOR_MIN  # sizes differ
    assert "tiny_zo" not in method  # its trained head is not modelled: the rule's runtime applies
    assert not any("by_study" in v for name, v in cost.runtime_limits(cost.plan_cost(config, 0.001)).items())  # vision
    assert main(["plan-cost", "--configfile", str(LANGUAGE_TINY), "--gflops", "1", "--lm-tflops", "1e-7", "--overhead", "0",
                 "--json"]) == 0
    out = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    assert out["language_method"]["longest_by_study"] == pytest.approx(rules[0].longest_by_study)


def test_a_dry_run_gives_each_language_job_its_own_studys_runtime(tmp_path, capsys):
    runtimes = tmp_path / "runtimes.yaml"
    assert main(["plan-cost", "--configfile", str(LANGUAGE_TINY), "--gflops", "1", "--lm-tflops", "1e-7", "--overhead", "0",
                 "--runtimes", str(runtimes)]) == 0
    limits = load_config([LANGUAGE_TINY, runtimes])["resources"]
    proc = snakemake("-n", "--configfile", str(LANGUAGE_TINY), str(runtimes), "--replace-workflow-config", "-d", str(tmp_path),
                     "results/tables/table17.md", "results/tables/table20.md", "results/tables/table6.md", "results/tables/table9.md")
    seen = {}
    for rule, wildcards, resources in dry_run_jobs(proc.stdout):
        if rule in ("language_method", "language_nonprivate"):
            study = wildcards["study"]
            expected = limits[rule]["by_study"].get(study, {}).get("runtime", limits[rule]["runtime"])
            assert int(resources["runtime"]) == expected, (rule, wildcards, resources)
            seen.setdefault(rule, set()).add(study)
    assert seen["language_method"] == {"tiny_cls", "tiny_zo", "tiny_lm", "tiny_lm_lora"}  # tiny_zo: the fallback
    assert seen["language_nonprivate"] == {"tiny_cls", "tiny_lm"}
    assert len({limits["language_method"]["by_study"][s]["runtime"] for s in ("tiny_cls", "tiny_lm")}) == 2


def test_per_study_resources_name_a_language_study_of_a_rule_with_a_study_wildcard(tmp_path):
    from dphpo.errors import ConfigError

    for resources, key in [({"language_method": {"by_study": {"nope": {"runtime": 5}}}}, "resources.language_method.by_study.nope"),
                           ({"run_method": {"by_study": {"tiny_lm": {"runtime": 5}}}}, "resources.run_method.by_study.tiny_lm")]:
        extra = tmp_path / "extra.yaml"
        extra.write_text(json.dumps({"resources": resources}))
        with pytest.raises(ConfigError, match=re.escape(key)) as err:
            load_config([LANGUAGE_TINY, extra])
        assert ("tiny_cls" in str(err.value)) == (key.endswith("nope"))  # the known studies, for an unknown one
    extra.write_text(json.dumps({"resources": {"language_cache": {"by_study": {"tiny_cls": {"gpu": 1}}}}}))
    with pytest.raises(ConfigError, match="by_study"):  # gpu stays per rule (profiles/slurm's GPU handling)
        load_config([LANGUAGE_TINY, extra])
    extra.write_text(json.dumps({"resources": {"language_cache": {"by_study": {"tiny_cls": {"mem_mb": 3000}}}}}))
    assert load_config([LANGUAGE_TINY, extra])["resources"]["language_cache"]["by_study"]["tiny_cls"] == {"mem_mb": 3000}


def test_extraction_is_costed_by_the_published_sizes_and_the_extractors_forward_flop():
    config = {"studies": [], "extractors": {"lite0": {"kind": "efficientnet_lite0_packaged", "resolution": 224},
                                            "raw": {"kind": "raw"}}, "datasets": {"mnist": {"max_train": 1000}}}
    # EfficientNet-Lite0 at 224 px: 0.39 GMAC published (timm), about 0.78 GFLOP
    assert 0.7e9 < extraction_cost.forward_flop(config, "lite0") < 0.85e9
    assert extraction_cost.forward_flop(config, "raw") == 0.0
    assert extraction_cost.inputs_of(config, "mnist") == 1000 + 10000  # max_train caps the train split only
    assert extraction_cost.inputs_of(config, "digits") == 1438 + 359
    (rule,) = extraction_cost.extraction_costs([("mnist", "lite0", 11000, 0.78e9), ("digits", "raw", 1797, 0.0)], 10.0, 15.0)
    assert (rule.rule, rule.jobs, rule.examples) == ("extract_features", 2, 12797)
    assert rule.seconds == pytest.approx(2 * 15.0 + 11000 * 0.78e9 / 10e9)
    assert cost.runtime_limits([rule])["extract_features"]["runtime"] == cost.runtime_limit(15.0 + 11000 * 0.78e9 / 10e9)
    assert extraction_cost.measure_extract_gflops(batch=2, resolution=32) > 0


def test_the_rules_steps_follow_its_own_draws_and_decomposition():
    """Audit: every stage and final trial was costed at the grid's mean T (37 on config/config.yaml), but the
    safeguarded rule decomposes r into the most steps (T_max = 100 for every r above η_min·T_max) and samples a
    later stage above the previous pick: its stage-2 jobs ran 2.5x their estimate, most of the runtime limit's
    safety factor. E[T] now comes from the rule's own r draws and decomposition (public, a fixed seed)."""
    from dphpo.hpo.linear_scaling_plan import LinearScalingConfig

    config = load_config([REPO / "config" / "config.yaml"])
    means = {}
    for variant in ("default", "safeguarded"):
        cfg = study_config.variant_config(config, variant)
        space = SearchSpace.from_config(cfg["search_space"])
        lsc = LinearScalingConfig.from_config(cfg["linear_scaling"])
        means[variant] = first, later, final = cost.rule_mean_steps(lsc, space)
        assert min(space.steps) <= first <= later <= max(space.steps) and final == later  # a later stage samples above
        (stage1, stage2), finals = cost._linear_scaling_steps(cfg, lsc, space, 6)
        assert stage1 == pytest.approx(6 * lsc.n_trials * first) and stage2 == pytest.approx(6 * lsc.n_trials * later)
        assert finals == pytest.approx(6 * final)
    grid_mean = sum(space.steps) / len(space.steps)
    assert means["safeguarded"][1] > 0.9 * max(space.steps) > 2 * grid_mean  # max_steps: nearly always T_max
    assert means["default"][0] < grid_mean  # min_steps: the fewest steps


def test_a_limit_past_a_clusters_max_time_is_named():
    """Audit: --runtimes wrote 75,658 minutes (52 days) for OPT-13B's SQuAD study on one H100, silently; SLURM
    pends or refuses a job past its partition's MaxTime. Every such limit is named (the CLI warns)."""
    limits = {"language_method": {"runtime": 80_000, "by_study": {"sst2": {"runtime": 600}, "squad": {"runtime": 80_000}}},
              "run_method": {"runtime": 60}}
    assert cost.long_limits(limits) == [("resources.language_method.runtime", 80_000),
                                        ("resources.language_method.by_study.squad.runtime", 80_000)]


def test_a_baseline_that_samples_r_is_costed_at_the_t_its_draws_decompose_into():
    config = load_config([REPO / "config" / "config.yaml"])
    space = SearchSpace.from_config(config["search_space"])
    grid = cost.TRIAL_STEPS["random_search"]({"baselines": {"sampling": "grid"}}, space, 1)
    drawn = cost.TRIAL_STEPS["random_search"]({"baselines": {"sampling": "r"}}, space, 1)
    assert grid == pytest.approx(sum(space.steps) / len(space.steps))
    assert drawn == cost.mean_decomposed_t(space) != grid and min(space.steps) <= drawn <= max(space.steps)
