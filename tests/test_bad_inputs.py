"""Issue 27: bad inputs that used to get through get a clear error naming the key or file."""

from pathlib import Path

import pytest
import yaml

from dphpo.errors import DPHPOError
from dphpo.studies.validate import load_config

TINY = Path(__file__).parent / "configs" / "tiny.yaml"


def _config_files(tmp_path, **overrides) -> list[Path]:
    extra = tmp_path / "override.yaml"
    extra.write_text(yaml.safe_dump(overrides))
    return [TINY, extra]


def test_delta_of_at_least_one_over_n_is_refused_unless_acknowledged(tmp_path):
    """digits has 1,438 declared training records: δ = 0.01 would let a mechanism publish ~14 records."""
    with pytest.raises(DPHPOError, match=r"privacy\.delta: 0\.01 is at least 1/N .*digits: N = 1438.*delta_acknowledged"):
        load_config(_config_files(tmp_path, privacy={"delta": 0.01, "target_eps": [1]}))
    config = load_config(_config_files(tmp_path, privacy={"delta": 0.01, "target_eps": [1], "delta_acknowledged": True}))
    assert config["privacy"]["delta"] == 0.01


def test_an_astronomical_target_eps_is_refused_naming_the_key(tmp_path):
    with pytest.raises(DPHPOError, match=r"privacy\.target_eps\.0"):
        load_config(_config_files(tmp_path, privacy={"target_eps": [1.0e300]}))


def test_a_diverged_model_is_a_recorded_failure_and_named_in_the_tables(digits_features, tmp_path):
    """search_space.eta near 1e100 trains to non-finite weights: the release says `failed` (post-processing,
    free) and the tables name the runs, instead of a valid-looking DP result at chance."""
    from dphpo.hpo import registry
    from dphpo.hpo.common import LinearHeadTrainer
    from dphpo.io import read_json
    from dphpo.report import comparison
    from dphpo.studies.writer import write_result

    from conftest import noise_scope
    from test_baselines import CONFIG

    cfg = CONFIG | {"search_space": {"eta": {"min": 1.0e100, "max": 1.0e200, "num": 2}, "steps": [5, 10]}}
    trainer = LinearHeadTrainer.from_config(digits_features, cfg)
    paths = []
    for r in registry.run_method("random_search", trainer, cfg, noise_scope(0)):
        d = tmp_path / f"eps{r.target_eps:g}"
        write_result(r, d / "result.json", d / "model.npz", {"dataset": "digits", "extractor": "raw", "seed": 0}, d / "internal.json")
        paths.append(d / "result.json")
    records = [read_json(p) for p in paths]
    assert all(r["failed"].startswith("diverged: the released model has non-finite weights") for r in records)
    table = comparison.build_table(comparison.summarize(records), {}, records)
    assert any(n.startswith("FAILED: random_search on digits at target ε = 1 diverged for seed(s) 0") for n in table.notes)


def test_a_diverged_trial_scores_nan_and_is_never_picked(digits_features):
    """Audit: a head with non-finite weights predicted class 0 everywhere (argmax of NaN logits), so a diverged
    stage trial scored the count of class 0 and could be a stage's pick; it now scores NaN (post-processing of
    its weights), which `best_released` never picks while another trial has a number."""
    import numpy as np
    import torch

    from dphpo.hpo.common import LinearHeadTrainer
    from dphpo.hpo.selection import best_released

    from test_baselines import CONFIG

    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    weights = torch.zeros(3, digits_features.num_classes, digits_features.x_train.shape[1])
    weights[0, 0, 0] = float("nan")
    weights[2, 1, 1] = float("inf")
    out = trainer.outcome(weights)
    assert np.isnan(out.train_score_sums[[0, 2]]).all() and np.isnan(out.test_metric[[0, 2]]).all()
    assert out.train_score_sums[1] == (digits_features.y_train == 0).sum()  # zero weights: every logit ties at class 0
    assert best_released(out.train_score_sums) == 1
    finite = trainer.outcome(weights[1:2])
    assert finite.train_score_sums.dtype.kind == "i"  # no divergence: the integer counts, as before


def _table(tmp_path, text: str, **keys):
    from dphpo.data.files import FileDataset

    path = tmp_path / "t.csv"
    path.write_bytes(text.encode("utf-8"))
    return FileDataset.from_config("t", {"kind": "text_table", "path": str(path), "text_field": "text", "label_field": "label", **keys})


TEXTS = "".join(f"text number {i},{'ab'[i % 2]}\n" for i in range(40))


@pytest.mark.parametrize(
    "text, message",
    [
        ("text,label\nfine,a\n,b\n", r"row 2: empty text"),
        ("text,label\n" + TEXTS + "no label here,\n", r"label_field: t.csv row 41: empty label"),
        ("text,label\n" + TEXTS + "one,a,extra\n", r"t.csv line 42: the row's cells do not match the header's 2 columns"),
        ("text,label\n" + TEXTS + "only one cell\n", r"t.csv line 42: the row's cells do not match"),
        ("text,label\n" + TEXTS + '"never closed,a\n', r"t.csv line \d+: .*unterminated quote"),
    ],
)
def test_csv_errors_name_the_row(tmp_path, text, message):
    from dphpo.errors import DatasetError

    with pytest.raises(DatasetError, match=message):
        _table(tmp_path, text).load()


def test_a_csv_with_a_byte_order_mark_loads(tmp_path):
    ds = _table(tmp_path, "\ufefftext,label\n" + TEXTS).load()
    assert len(ds.train_labels) + len(ds.test_labels) == 40 and ds.num_classes == 2


def test_a_table_saved_in_latin1_is_refused_saying_to_save_it_as_utf8(tmp_path):
    from dphpo.errors import DatasetError

    spec = _table(tmp_path, "text,label\n" + TEXTS)
    spec.path.write_bytes(("text,label\n" + TEXTS + "caf\xe9 au lait,a\n").encode("latin-1"))
    with pytest.raises(DatasetError, match=r"datasets\.t\.path: cannot read .*t\.csv \(not UTF-8: byte 0xe9 at offset \d+; save the table as UTF-8\)"):
        spec.load()
    spec.path.write_bytes("t\xe9xt,label\n".encode("latin-1") + TEXTS.encode())
    with pytest.raises(DatasetError, match=r"datasets\.t\.path: cannot read the header .*\(not UTF-8: byte 0xe9 at offset 1;"):
        spec.load()


def test_one_class_or_an_empty_test_split_is_refused(tmp_path):
    import numpy as np

    from dphpo.data.files import FileDataset
    from dphpo.errors import DatasetError

    one_class = "text,label\n" + "".join(f"text {i},a\n" for i in range(40))
    with pytest.raises(DatasetError, match=r"training split holds 1 class\(es\)"):
        _table(tmp_path, one_class).load()
    path = tmp_path / "f.npz"
    np.savez(path, train_x=np.eye(6, 3), train_y=np.arange(6) % 2, test_x=np.zeros((0, 3)), test_y=np.zeros(0, int))
    with pytest.raises(DatasetError, match="the test split is empty"):
        FileDataset.from_config("f", {"kind": "features", "path": str(path)}).load()


def test_features_beyond_float32_are_refused_naming_the_file(tmp_path):
    import numpy as np

    from dphpo.data.files import FileDataset
    from dphpo.errors import DatasetError

    path = tmp_path / "f.npz"
    np.savez(path, train_x=np.full((4, 3), 1e300), train_y=np.arange(4) % 2, test_x=np.eye(4, 3), test_y=np.arange(4) % 2)
    with pytest.raises(DatasetError, match=r"f\.npz train_x holds values beyond float32's range"):
        FileDataset.from_config("f", {"kind": "features", "path": str(path)}).load()
    path.write_bytes(b"garbage, not a zip")
    with pytest.raises(DatasetError, match=r"cannot read .* as \.npz \(not a NumPy \.npz archive"):
        FileDataset.from_config("f", {"kind": "features", "path": str(path)}).load()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-train", "0"], "--max-train: must be an integer >= 1, got '0'"),
        (["--runs", "1000000000000"], "--runs: at most 1,000,000 runs per budget"),
        (["--runs", "1"], "--runs: must be an integer >= 8"),  # dphpo.audit.MIN_RUNS
    ],
)
def test_audit_arguments_are_bounded_before_the_first_run(capsys, args, message):
    from dphpo.cli import main

    assert main(["audit", "--eps", "1", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_config_implying_a_million_results_is_refused_with_the_estimate(tmp_path):
    with pytest.raises(DPHPOError, match=r"implies 1,000,000 result files \(10 searches .* × 1,000 seeds × 100 target_eps\)"):
        load_config(_config_files(tmp_path, seeds=list(range(1000)), privacy={"target_eps": [0.01 * (i + 1) for i in range(100)]}))


def test_check_config_names_file_and_line_where_snakemake_says_only_invalid_yaml(tmp_path, capsys):
    """An unclosed YAML list: `snakemake --configfile` parses the file before the workflow runs and says
    "not valid JSON or YAML"; `dphpo check-config` (and the Makefile's paper target) names file and line."""
    from dphpo.cli import main as dphpo

    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [0, 1\nprivacy:\n  target_eps: [1]\n")
    assert dphpo(["check-config", str(bad)]) == 2
    assert f"config file {bad}: line 2, column 8: invalid YAML" in capsys.readouterr().err
    twice = tmp_path / "twice.yaml"
    twice.write_text("seeds: [0]\nseeds: [1]\n")
    assert dphpo(["check-config", str(TINY), str(twice)]) == 2
    assert "twice.yaml" in capsys.readouterr().err
    override = _config_files(tmp_path, seeds=[3])[1]
    assert dphpo(["check-config", str(TINY), str(override)]) == 0
    out = capsys.readouterr().out
    assert "1 linear-head study on frozen features: " in out and "; 20 linear-head result files)" in out  # 10 searches × 1 seed × 2 targets
    assert f"snakemake --cores all --configfile {TINY} {override}" in out
    # a file that is not UTF-8, a folder, a configured key file that is lost: named, never "valid"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfeseeds: [0]\n")
    for extra, why in ((binary, f"config file {binary}: not UTF-8 text"), (tmp_path, f"config file {tmp_path} is a folder")):
        assert dphpo(["check-config", str(TINY), str(extra)]) == 2
        assert why in capsys.readouterr().err
    lost = tmp_path / "lost.yaml"
    lost.write_text(f"privacy: {{noise_key_file: {tmp_path / 'keys' / 'lost.key'}}}\n")
    assert dphpo(["check-config", str(TINY), str(lost)]) == 2
    captured = capsys.readouterr()
    assert "privacy.noise_key_file: the noise key file" in captured.err and "valid" not in captured.out
    assert not (tmp_path / "keys").exists()  # nothing created
