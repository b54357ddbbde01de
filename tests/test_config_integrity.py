"""Bad input a new user would try (issue 10): each stops before any job with a message naming the
key or file, or reruns what changed. Parse-time cases are dry-runs in an empty directory."""

import copy
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dphpo import layout
from dphpo.data import load_dataset
from dphpo.errors import ConfigError, DatasetError, DPHPOError, FeatureCacheError
from dphpo.features import build_feature_cache
from dphpo.io import read_json, write_json
from dphpo.resume import OWNER, _start_time, record_lock_owner, release_stale_lock
from dphpo.studies import config as study_config
from dphpo.studies import trainers
from dphpo.studies.trainers import trainer_settings
from dphpo.studies.validate import validate_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def tiny_config(**overrides) -> dict:
    cfg = yaml.safe_load(TINY.read_text())
    cfg.update(overrides)
    return cfg


def snakemake(workdir, *args, config=None):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    if config is not None:
        path = Path(workdir) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        cmd += ["--configfile", str(path), "--replace-workflow-config"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _variant(**sections):
    return {"variants": {"v1": sections}}


# (name, edit of the tiny config, what the message must contain)
BAD_CONFIGS = [
    ("duplicate seeds", {"seeds": [0, 0]}, ["seeds:", "listed twice"]),
    ("duplicate budgets", {"privacy": {"target_eps": [1, 1.0]}}, ["privacy.target_eps:", "listed twice"]),
    ("budgets sharing a results path", {"privacy": {"target_eps": [0.1, 0.1000001]}}, ["privacy.target_eps:", "'0.1'"]),
    # an own-target final run takes its ε from the path label: it ran at 0.123457 (or failed to find its stages)
    ("a budget its path label misreads", {"privacy": {"target_eps": [0.1234567]}}, ["privacy.target_eps: 0.1234567 is written '0.123457'"]),
    ("empty steps", {"search_space": {"eta": {"min": 0.01, "max": 2.0}, "steps": []}}, ["search_space.steps:", "non-empty"]),
    ("zero steps", {"search_space": {"eta": {"min": 0.01, "max": 2.0}, "steps": [0, 10]}}, ["search_space.steps:", "minimum of 1"]),
    ("typo inside a variant", _variant(training={"clip_nrom": 0.01}), ["variants.v1", "clip_nrom"]),
    ("bad value inside a variant", _variant(privacy={"delta": 5.0}), ["variants.v1", "privacy.delta: 5.0"]),
    ("variant overriding shared data", _variant(datasets={"digits": {"max_train": 100}}), ["variants.v1: datasets"]),
    ("typo in an extractor", {"extractors": {"raw": {"kind": "raw", "resolutoin": 8}}}, ["extractors.raw:", "resolutoin"]),
    ("unknown dataset under datasets", {"datasets": {"digts": {"max_train": 100}}}, ["datasets.digts", "unknown dataset"]),
    # issue 16: accepted and wrong before, each refused before any job now
    ("NaN clip norm", {"training": {"clip_norm": float("nan")}}, ["training.clip_norm: expected a finite number"]),
    ("infinite eta", {"search_space": {"eta": {"min": 0.01, "max": float("inf")}, "steps": [5]}},
     ["search_space.eta.max: expected a finite number"]),
    ("NaN delta", {"privacy": {"target_eps": [1], "delta": float("nan")}}, ["privacy.delta: expected a finite number"]),
    ("huge target eps", {"privacy": {"target_eps": [float("inf")]}}, ["privacy.target_eps[0]: expected a finite number"]),
    ("YAML 1.1 exponent", {"privacy": {"target_eps": [1], "delta": "1e-6"}}, ["privacy.delta", "write it with a dot"]),
    ("one stage budget twice", {"linear_scaling": {"stage_eps": [0.1, 0.1]}}, ["linear_scaling.stage_eps:", "repeats a budget"]),
    ("a variant named default", {"variants": {"default": {"training": {"clip_norm": 2.0}}}}, ["variants.default"]),
    ("a hyphen in a variant name", {"variants": {"my-variant": {}}}, ["variants.my-variant: names may hold"]),
    ("top-level methods (ignored before)", {"methods": ["linear_scaling"]}, ["methods"]),
    ("nonprivate.enabled (ignored before)", {"nonprivate": {"enabled": False}}, ["nonprivate"]),
    ("public_validation selection", {"selection": {"rule": "public_validation"}}, ["selection.rule: public_validation needs"]),
    ("runaway step grid", {"search_space": {"eta": {"min": 0.01, "max": 1}, "steps": {"min": 5, "max": 5000000}}},
     ["search_space.steps: the grid has"]),
    ("max_train below the class count", {"datasets": {"digits": {"max_train": 5}}}, ["datasets.digits.max_train: 5"]),
    ("text dataset, image extractor", {"studies": [{"dataset": "tweets", "extractor": "raw"}]},
     ["studies[0]: dataset 'tweets' is text but extractor 'raw'"]),
    # audit: the user's files under a registry name took the registry's published size as their public N
    ("own files under a registry name", {"datasets": {"digits": {"kind": "features", "path": "f.npz", "classes": ["a", "b"]}}},
     ["datasets.digits: 'digits' is a dataset of dphpo's registry", "my_digits"]),
    ("NaN stage budget", {"linear_scaling": {"stage_eps": [float("nan"), 0.2]}}, ["linear_scaling.stage_eps"]),
    ("a settings source of no method", {"settings_sources": {"mehtaa": "Mehta et al."}}, ["settings_sources.mehtaa: not a method"]),
]


@pytest.mark.parametrize("edit,expected", [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_refused_naming_the_key(edit, expected):
    # the function the workflow runs at parse time (common.smk), before any job
    with pytest.raises(ConfigError) as err:
        validate_config(tiny_config(**edit), SCHEMA)
    for text in expected:
        assert text in str(err.value)


def test_workflow_stops_before_any_job_naming_the_key(tmp_path):
    # the workflow runs study.validate_config at parse time: one case shows the wiring
    edit, expected = next(c[1:] for c in BAD_CONFIGS if c[0] == "typo inside a variant")
    rc, out = snakemake(tmp_path, "--cores", "1", config=tiny_config(**edit))
    assert rc != 0
    assert "invalid config: " + expected[0] in out, out[-3000:]
    assert "AttributeError" not in out and "Traceback" not in out
    assert not (tmp_path / "results").exists()


def test_cuda_without_a_gpu_is_refused_where_the_jobs_run_here():
    cfg = tiny_config(training={"device": "cuda"})
    with pytest.raises(ConfigError, match="training.device: 'cuda' but no CUDA device"):
        validate_config(cfg, SCHEMA, cuda_available=False)
    validate_config(tiny_config(training={"device": "cuda"}), SCHEMA, cuda_available=None)  # cluster, dry run


def test_a_key_written_twice_in_the_config_file_stops_the_workflow(tmp_path):
    text = TINY.read_text() + "\nseeds: [0]\nseeds: [1]\n"
    (tmp_path / "config.yaml").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n",
         "--configfile", str(tmp_path / "config.yaml"), "--replace-workflow-config"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "key 'seeds' is written twice" in out and "config.yaml: line" in out, out[-2000:]


def test_command_line_lists_are_accepted_as_the_readme_says(tmp_path):
    rc, out = snakemake(tmp_path, "-n", "--config", "seeds=[0,1]", config=tiny_config())
    assert rc == 0, out[-2000:]
    assert "seed1" in out


def test_valid_variant_and_steps_range_still_pass():
    cfg = tiny_config(search_space={"eta": {"min": 0.01, "max": 2.0}, "steps": {"min": 5, "max": 40}},
                      **_variant(training={"clip_norm": 0.5}))
    validate_config(cfg, SCHEMA)
    assert study_config.search_space(study_config.variant_config(cfg, "v1")).steps == tuple(range(5, 41))
    assert trainer_settings(study_config.variant_config(cfg, "v1")).clip_norm == 0.5


def test_download_false_is_passed_to_the_loader(tmp_path):
    # an empty data folder: with downloads off, MNIST must not be fetched (before: it was)
    config = {"data_dir": str(tmp_path / "data"), "extractors": {"raw": {"kind": "raw"}},
              "datasets": {"mnist": {"download": False}}}
    with pytest.raises(DatasetError, match=r"datasets\.mnist\.download is false"):
        build_feature_cache("mnist", "raw", config, tmp_path / "f.h5", progress=False)
    assert not (tmp_path / "data" / "mnist" / "raw").exists()


def test_dataset_options_enter_the_run_settings_hash():
    cfg = tiny_config()
    before = study_config.run_settings_hash(cfg, "default", "raw", "digits", "linear_scaling")
    changed = tiny_config(datasets={"digits": {"max_train": 500}})
    assert study_config.run_settings_hash(changed, "default", "raw", "digits", "linear_scaling") != before
    # another dataset's options do not concern this study
    other = tiny_config(datasets={"mnist": {"max_train": 500}})
    assert study_config.run_settings_hash(other, "default", "raw", "digits", "linear_scaling") == before


def test_load_features_refuses_a_cache_of_other_dataset_options(tmp_path):
    built = tiny_config(data_dir=str(tmp_path / "data"), datasets={"digits": {"max_train": 300}})
    path = tmp_path / "digits_raw.h5"
    build_feature_cache("digits", "raw", built, path, progress=False)
    features = trainers.load_features(built, path, "digits", "raw")
    # a per-record subset of about 300; the trainer divides by the public 300, never the realized count
    assert abs(features.n_train - 300) < 60 and features.n_public == 300
    now = tiny_config(data_dir=str(tmp_path / "data"), datasets={"digits": {"max_train": 200}})
    with pytest.raises(FeatureCacheError, match=r"'max_train' expected 200, found 300"):
        trainers.load_features(now, path, "digits", "raw")
    edited = tiny_config(data_dir=str(tmp_path / "data"), datasets=built["datasets"],
                         extractors={"raw": {"kind": "raw", "batch_size": 64}})
    with pytest.raises(FeatureCacheError, match="'extractor_spec'"):
        trainers.load_features(edited, path, "digits", "raw")


@pytest.mark.slow
def test_changed_dataset_subset_reruns_extraction_and_training(tmp_path):
    target = "results/runs/digits/raw/nonprivate/result.json"
    cfg = tiny_config(datasets={"digits": {"max_train": 400}},
                      search_space={"eta": {"min": 0.1, "max": 1.0, "num": 2}, "steps": [10, 40]})
    rc, out = snakemake(tmp_path, "--cores", "2", target, config=cfg)
    assert rc == 0, out[-3000:]
    rc, out = snakemake(tmp_path, "-n", target, config=cfg)
    assert rc == 0 and "Nothing to be done" in out
    cfg["datasets"]["digits"]["max_train"] = 300
    rc, out = snakemake(tmp_path, "-n", target, config=cfg)
    assert rc == 0, out[-3000:]
    assert "extract_features" in out and "nonprivate_reference" in out and "Nothing to be done" not in out


def test_truncated_mnist_gz_names_the_file(tmp_path):
    raw = tmp_path / "mnist" / "raw"
    raw.mkdir(parents=True)
    import gzip

    whole = gzip.compress(b"\x00\x00\x08\x03" + bytes(1000))
    (raw / "train-images-idx3-ubyte.gz").write_bytes(whole[: len(whole) // 2])  # a killed download
    with pytest.raises(DatasetError, match=r"train-images-idx3-ubyte\.gz is not a complete gzip file"):
        load_dataset("mnist", tmp_path, download=False)


def test_variant_config_refuses_overrides_of_shared_keys():
    cfg = tiny_config(variants={"a": {"seeds": [3]}, "b": {"privacy": {"target_eps": [2]}}, "c": []})
    with pytest.raises(ConfigError, match="variants.a: seeds"):
        study_config.variant_config(cfg, "a")
    with pytest.raises(ConfigError, match=r"variants.b.privacy.target_eps: \[2\] not in privacy.target_eps"):
        study_config.variant_config(cfg, "b")
    with pytest.raises(ConfigError, match="variants.c must be a mapping"):
        study_config.variant_config(cfg, "c")
    # keys the workflow reads from the base config only: in a variant they validated and did nothing
    for key, value in (("threads", {"train": 2}), ("resources", {"run_method": {"runtime": 5}}), ("audit", {})):
        ignored = tiny_config(variants={"d": {key: value}})
        with pytest.raises(ConfigError, match=f"variants.d: {key} cannot be overridden .*read from the base config only"):
            study_config.variant_config(ignored, "d")


def test_a_variant_may_run_a_subset_of_the_targets():
    # Panda et al. Fig. 2: one search at absolute stage budgets, shared by the targets it can pay for
    shared = {"linear_scaling": {"budget_mode": "absolute"}, "privacy": {"target_eps": [8]}}
    cfg = tiny_config(variants={"shared": shared, "same": {"privacy": {"target_eps": [1, 8.0]}}})
    assert study_config.target_eps(cfg) == [1.0, 8.0]
    assert study_config.target_eps(study_config.variant_config(cfg, "shared")) == [8.0]
    assert study_config.own_target_variants(cfg) == ["shared"]  # "same" lists the study's own targets
    assert study_config.variant_targets(cfg, "shared") == [8] and study_config.variant_targets(cfg, "default") is None
    shared["linear_scaling"]["safeguard"] = True  # a variant `all` runs: its results at its targets only
    results = [layout.parse(layout.RESULT, f) for f in study_config.study_results(cfg)]
    assert sorted({r["eps"] for r in results if r["variant"] == "shared"}) == ["8"]
    assert sorted({r["eps"] for r in results if r["variant"] == "default"}) == ["1", "8"]
    with pytest.raises(ConfigError, match=r"variants.d.privacy.target_eps: .* listed twice"):
        study_config.variant_config(tiny_config(variants={"d": {"privacy": {"target_eps": [8, 8.0]}}}), "d")
    with pytest.raises(ConfigError, match=r"variants.e.privacy.target_eps: expected a non-empty list"):
        study_config.variant_config(tiny_config(variants={"e": {"privacy": {"target_eps": []}}}), "e")


def test_a_shared_search_a_target_cannot_pay_for_is_refused_naming_the_variant():
    # stages at ε = 0.1 and 0.2 (absolute) cost more than a target of 0.2: refused before any job
    cfg = tiny_config(variants={"shared": {"linear_scaling": {"budget_mode": "absolute"}}})
    cfg["privacy"] = dict(cfg["privacy"], target_eps=[0.2, 1, 8])
    with pytest.raises(DPHPOError, match=r"variants.shared: .*0.2"):
        validate_config(copy.deepcopy(cfg), str(SCHEMA))
    cfg["variants"]["shared"]["privacy"] = {"target_eps": [1, 8]}
    validate_config(cfg, str(SCHEMA))


# --- resuming after kill -9: the lock of a killed run ------------------------------------------


def _lock(workdir: Path, pid: int, start, name: str = "0.output.lock", claimed: float | None = None) -> Path:
    """A lock file `name` claimed by process `pid` (as record_lock_owner writes it)."""
    (workdir / ".snakemake" / "locks").mkdir(parents=True, exist_ok=True)
    path = workdir / ".snakemake" / "locks" / name
    path.write_text("results/x\n")
    owners = read_json(workdir / OWNER)["locks"] if (workdir / OWNER).exists() else {}
    owners[name] = {"host": socket.gethostname(), "pid": pid, "start": start, "claimed": claimed or time.time() + 1}
    write_json(workdir / OWNER, {"locks": owners})
    return path


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_stale_lock_is_released_only_when_its_process_is_gone(tmp_path):
    holder = _sleeper()
    try:
        lock = _lock(tmp_path, holder.pid, _start_time(holder.pid))
        assert release_stale_lock(tmp_path) is None  # still running: keep the lock
        assert lock.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    message = release_stale_lock(tmp_path)
    assert message and str(holder.pid) in message
    assert not list((tmp_path / ".snakemake" / "locks").iterdir()) and read_json(tmp_path / OWNER) == {"locks": {}}


def test_lock_newer_than_its_claim_is_kept(tmp_path):
    # the claim of an earlier run; the lock file of that name is a later run's, not claimed yet
    lock = _lock(tmp_path, 2**22 + 12345, None, claimed=time.time() - 60)  # a PID that does not exist
    assert release_stale_lock(tmp_path) is None
    assert lock.exists()


def test_a_live_run_keeps_its_locks_when_another_run_that_claimed_later_is_gone(tmp_path):
    # run A holds 0.*; run B (outputs that do not overlap) claimed 1.* later and was killed: only B's go
    alive, gone = _sleeper(), _sleeper()
    try:
        a = _lock(tmp_path, alive.pid, _start_time(alive.pid), "0.output.lock")
        b = _lock(tmp_path, gone.pid, _start_time(gone.pid), "1.output.lock")
        unclaimed = tmp_path / ".snakemake" / "locks" / "2.output.lock"
        unclaimed.write_text("results/y\n")
        gone.send_signal(signal.SIGKILL)
        gone.wait()
        message = release_stale_lock(tmp_path)
        assert message and str(gone.pid) in message and str(alive.pid) not in message
        assert a.exists() and not b.exists() and unclaimed.exists()  # no claim: left to --unlock
        assert set(read_json(tmp_path / OWNER)["locks"]) == {"0.output.lock"}
    finally:
        alive.send_signal(signal.SIGKILL)
        alive.wait()


def test_a_run_claims_only_the_lock_files_no_one_claimed(tmp_path, monkeypatch):
    other = _sleeper()
    try:
        _lock(tmp_path, other.pid, _start_time(other.pid), "0.output.lock")
        (tmp_path / ".snakemake" / "locks" / "1.output.lock").write_text("results/y\n")
        record_lock_owner(tmp_path)
        owners = read_json(tmp_path / OWNER)["locks"]
        assert owners["0.output.lock"]["pid"] == other.pid and owners["1.output.lock"]["pid"] == os.getpid()
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()


@pytest.mark.slow
def test_same_command_resumes_after_kill_9(tmp_path):
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config()))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--configfile", str(cfg_path), "--replace-workflow-config", "--cores", "1"]
    first = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.time() + 120
        while not (tmp_path / OWNER).exists() and time.time() < deadline and first.poll() is None:
            time.sleep(0.5)
        assert (tmp_path / OWNER).exists() and first.poll() is None
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the run and its jobs, no cleanup
        first.wait()
    assert list((tmp_path / ".snakemake" / "locks").glob("*.lock"))
    proc = subprocess.run([*cmd, "results/features/digits/raw.h5"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "released the lock" in out and "LockException" not in out


def test_moving_the_data_changes_no_settings_hash():
    # issue 16: data_dir was in every settings hash, so the same data in another folder re-extracted everything
    cfg, moved = tiny_config(), tiny_config(data_dir="/elsewhere/data")
    validate_config(cfg, SCHEMA)
    validate_config(moved, SCHEMA)
    assert study_config.run_settings_hash(cfg, "default", "raw", "digits", "linear_scaling") == study_config.run_settings_hash(moved, "default", "raw", "digits", "linear_scaling")


def test_the_device_changes_no_settings_hash_so_a_gpu_run_draws_the_cpu_runs_noise():
    # measured on an H100: with training.device hashed, a GPU run drew other noise than the CPU run with the same key
    hashes = set()
    for device in ("auto", "cpu", "cuda", "cuda:1"):
        cfg = tiny_config(training={"device": device})
        validate_config(cfg, SCHEMA, cuda_available=True)
        hashes.add(study_config.run_settings_hash(cfg, "default", "raw", "digits", "linear_scaling"))
        assert cfg["training"]["device"] == device  # the config itself keeps what it says
    assert len(hashes) == 1
    changed = tiny_config(training={"clip_norm": 2.0})
    validate_config(changed, SCHEMA, cuda_available=True)
    assert study_config.run_settings_hash(changed, "default", "raw", "digits", "linear_scaling") not in hashes
    blind = study_config.device_blind({"training": {"device": "cuda", "finetune": {"device": "cuda:0", "lr": 1}}, "devices": [{"device": "cpu"}]})
    assert blind == {"training": {"device": "auto", "finetune": {"device": "auto", "lr": 1}}, "devices": [{"device": "auto"}]}


def test_paper_dp_continual_is_a_key_the_schema_takes():
    """Audit: config/README.md documents `paper.dp_continual` (the DP continual pre-training table's studies) and
    dphpo.report.plan reads it, but the schema closed `paper` without it, so every config using it was refused."""
    from dphpo.report.plan import Paper

    cfg = tiny_config(paper={"dp_continual": [{"dataset": "digits", "extractor": "raw"}]})
    validate_config(cfg, SCHEMA)
    assert Paper(cfg).studies_of("dp_continual") == [("digits", "raw")]
