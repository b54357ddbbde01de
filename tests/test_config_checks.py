"""The config checks of issue 16, one per careless config, each naming the key or file."""

import math

import pytest

from dphpo.errors import ConfigError
from dphpo.studies import checks


def test_a_key_written_twice_is_refused_with_both_lines(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("training:\n  clip_norm: 2.0\nseeds: [0]\ntraining:\n  momentum: 0.5\n")
    with pytest.raises(ConfigError, match=r"config.yaml: line 4: key 'training' is written twice \(first on line 1\)"):
        checks.load_config_file(path)
    nested = tmp_path / "nested.yaml"
    nested.write_text("privacy:\n  delta: 1.0e-5\n  delta: 1.0e-6\n")
    with pytest.raises(ConfigError, match="line 3: key 'delta'"):
        checks.check_config_files([nested])


def test_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {clip_norm: 1.0, momentum: 0.9}\ntraining:\n  <<: *b\n  clip_norm: 2.0\n")
    assert checks.load_config_file(path)["training"] == {"clip_norm": 2.0, "momentum": 0.9}


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("seeds: [0, 1\ntraining: {}\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: line \d+, column \d+: invalid YAML"):
        checks.load_config_file(path)


def test_a_clean_file_loads_as_yaml_would(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("seeds: [0, 1]\nprivacy: {delta: 1.0e-5}\n")
    assert checks.load_config_file(path) == {"seeds": [0, 1], "privacy": {"delta": 1.0e-5}}


@pytest.mark.parametrize("key", ["clip_norm", "feature_norm", "momentum", "init_std"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"training.{key}: expected a finite number"):
        checks.check_finite({"training": {key: value}})
    with pytest.raises(ConfigError, match=r"search_space.eta.max"):
        checks.check_finite({"search_space": {"eta": {"min": 0.1, "max": math.inf}}})
    with pytest.raises(ConfigError, match=r"privacy.target_eps\[1\]"):
        checks.check_finite({"privacy": {"target_eps": [1.0, math.nan]}})


def test_yaml_1_1_number_strings_get_the_hint():
    assert "1.0e-6" in checks.yaml_number_hint("1e-6")
    assert checks.yaml_number_hint("gdp") == "" and checks.yaml_number_hint(1e-6) == ""


def test_command_line_lists_are_parsed_where_the_schema_wants_a_list():
    schema = {"properties": {"seeds": {"type": "array"}, "data_dir": {"type": "string"}}}
    config = {"seeds": "[0,1]", "data_dir": "[not, a, list]"}
    checks.coerce_command_line_lists(config, schema)
    assert config == {"seeds": [0, 1], "data_dir": "[not, a, list]"}
    schema["properties"]["seeds"]["items"] = {"type": "integer"}
    config = {"seeds": ["0", "1"]}  # what Snakemake makes of --config seeds=[0,1]
    checks.coerce_command_line_lists(config, schema)
    assert config == {"seeds": [0, 1]}


def test_variant_names_must_be_path_safe_and_not_default():
    with pytest.raises(ConfigError, match="variants.my-variant: names may hold"):
        checks.check_names({"variants": {"my-variant": {}}})
    with pytest.raises(ConfigError, match="variants.default"):
        checks.check_names({"variants": {"default": {}}})
    checks.check_names({"variants": {"linear3": {}}, "extractors": {"raw": {}}})


def test_stage_budgets_must_differ():
    from dphpo.hpo.linear_scaling_plan import LinearScalingConfig

    with pytest.raises(ConfigError, match="linear_scaling.stage_eps: .*repeats a budget"):
        LinearScalingConfig.from_config({"stage_eps": [0.1, 0.1]})  # the library as the workflow: refused
    LinearScalingConfig.from_config({"stage_eps": [0.1, 0.2]})


def test_a_runaway_grid_is_refused_without_expanding_it():
    huge = {"eta": {"min": 0.01, "max": 1, "num": 8}, "steps": {"min": 5, "max": 5_000_000}}
    with pytest.raises(ConfigError, match="search_space.steps: the grid has 39,999,968 configurations"):
        checks.check_grid_size(huge)
    assert checks.grid_size({"eta": {"min": 0.01, "max": 1, "num": 8}, "steps": [5, 10, 20, 50, 100]}) == (40, 1480)
    assert checks.grid_size({"eta": {"num": 2}, "steps": {"min": 5, "max": 15, "step": 5}}) == (6, 60)


def test_public_validation_is_refused_before_any_job():
    with pytest.raises(ConfigError, match="selection.rule: public_validation needs a public validation split"):
        checks.check_selection({"rule": "public_validation"})


def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(ConfigError, match="training.device: 'cuda'"):
        checks.check_device({"device": "cuda"}, cuda_available=False)
    checks.check_device({"device": "cuda:0"}, cuda_available=True)
    checks.check_device({"device": "auto"}, cuda_available=False)


def test_a_text_dataset_with_an_image_extractor_is_refused():
    modality = {"tweets": "text", "digits": "image"}.__getitem__
    kinds = {"raw": "image", "minilm": "text"}.__getitem__
    extractors = {"raw": {"kind": "raw"}, "minilm_l6": {"kind": "minilm"}}
    with pytest.raises(ConfigError, match="studies\\[1\\]: dataset 'tweets' is text but extractor 'raw'"):
        checks.check_modalities(
            [{"dataset": "digits", "extractor": "raw"}, {"dataset": "tweets", "extractor": "raw"}], extractors, modality, kinds
        )
