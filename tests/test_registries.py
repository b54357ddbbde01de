"""Each vocabulary has one source (issue 28): trainer kinds, accountants and methods are their
registries' (dphpo.hpo.registry, dphpo.privacy.accountant), and every other list of them (the config
schema's enums, the command line's choices, the audit's) is equal to it; validation refuses a method
on a trainer or an accountant SUPPORTED does not list, before any job, naming the config key."""

import argparse
import ast
import copy
import importlib
import inspect
from functools import partial
from pathlib import Path

import pytest
import yaml

from dphpo.audit import NEIGHBOURS, THREAT_MODELS
from dphpo.audit.run import AuditSpec
from dphpo.cli import build_parser
from dphpo.data import files as data_files
from dphpo.data import registry as data_registry
from dphpo.errors import ConfigError
from dphpo.features.extractors import EXTRACTOR_KINDS
from dphpo.features.networks import ARCHS
from dphpo.features.pretrain import OPTIMIZERS as PRETRAIN_OPTIMIZERS
from dphpo.features.pretrain import SWITCHES
from dphpo.hpo import candidates, koskela, mehta, registry, space
from dphpo.hpo.selection import NONPRIVATE_RULES, PRIVATE_RULES
from dphpo.privacy.accountant import ACCOUNTANTS, ADJACENCIES
from dphpo.privacy.tuning import DISTRIBUTIONS, POISSON_DELTA_BOUNDS
from dphpo.studies import config as study_config
from dphpo.studies import trainers
from dphpo.studies.validate import check_language_study, check_supported_methods, validate_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def schema_node(path: str):
    node = yaml.safe_load(SCHEMA.read_text())
    for key in path.split("/"):
        node = node[key]
    return node


def enum(path: str) -> list:
    return schema_node(path)["enum"]


def cli_choices() -> dict[tuple[str, str], list]:
    """(subcommand path, option) -> its choices, for every option of `dphpo` that has choices."""
    found = {}

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())
            elif action.choices is not None:
                found[(path, action.option_strings[-1])] = list(action.choices)

    walk(build_parser(), "")
    return found


def tiny_config() -> dict:
    return yaml.safe_load(TINY.read_text())


# --------------------------------------------------------------------------------------------
# one registry per concept


def test_trainer_kinds_are_one_list():
    assert tuple(trainers.TRAINERS) == registry.TRAINERS  # the builders, in the registry's order
    assert set(trainers.TRAINER_SETTINGS) == set(registry.TRAINERS)
    halves = study_config.VISION_TRAINERS + study_config.LANGUAGE_TRAINERS
    assert sorted(halves) == sorted(registry.TRAINERS) and len(set(halves)) == len(halves)


def test_every_method_names_known_trainers_and_accountants():
    assert list(registry.SUPPORTED) == list(registry.METHODS)
    for method, supports in registry.SUPPORTED.items():
        assert supports.trainers and set(supports.trainers) <= set(registry.TRAINERS), method
        assert supports.accountants and set(supports.accountants) <= set(ACCOUNTANTS), method
    # the CNN baseline trains its own CNN off a linear-head trainer's raw-pixel cache (hpo/oso.py)
    assert registry.SUPPORTED["oso_dpsgd_cnn"].trainers == ("linear_head",)


def test_language_methods_are_those_supported_on_a_language_trainer():
    expected = [m for m in registry.METHODS
                if any(m in registry.methods_for(t, study_config.LANGUAGE_ACCOUNTANT) for t in study_config.LANGUAGE_TRAINERS)]
    assert list(study_config.LANGUAGE_METHODS) == expected
    assert list(study_config.LANGUAGE_METHODS) == ["linear_scaling", "linear_scaling_safeguarded", "random_search", "grid_oracle"]
    cfg = study_config.language_config({"privacy": {"accountant": "gdp", "target_eps": [1]}}, {"name": "s"})
    assert cfg["privacy"]["accountant"] == study_config.LANGUAGE_ACCOUNTANT


# --------------------------------------------------------------------------------------------
# the schema's enums, the command line's choices and the audit's are the registries'

SCHEMA_ENUMS = [
    ("properties/studies/items/properties/trainer", list(study_config.VISION_TRAINERS)),
    ("properties/language/properties/studies/items/properties/trainer", list(study_config.LANGUAGE_TRAINERS)),
    ("properties/language/properties/studies/items/properties/task", list(study_config.LANGUAGE_TASKS)),
    ("properties/language/properties/studies/items/properties/methods/items", list(study_config.LANGUAGE_METHODS)),
    ("properties/baselines/properties/methods/items", list(registry.FEATURE_BASELINES)),
    ("properties/privacy/properties/accountant", list(ACCOUNTANTS)),
    ("properties/privacy/properties/adjacency", list(ADJACENCIES)),
    ("properties/datasets/additionalProperties/properties/kind", list(data_files.KINDS)),
    ("properties/extractors/additionalProperties/properties/kind", list(EXTRACTOR_KINDS)),
    ("properties/pretraining/additionalProperties/properties/arch", list(ARCHS)),
    ("properties/pretraining/additionalProperties/properties/optimizer", list(PRETRAIN_OPTIMIZERS)),
    ("properties/pretraining/additionalProperties/properties/switch", list(SWITCHES)),
    ("properties/search_space/properties/r_sampling", list(space.R_SAMPLINGS)),
    ("properties/search_space/properties/decompose_policy", list(space.DECOMPOSE_POLICIES)),
    ("properties/selection/properties/rule", [*PRIVATE_RULES, *NONPRIVATE_RULES]),
    ("properties/baselines/properties/sampling", list(candidates.SAMPLINGS)),
    ("properties/baselines/properties/papernot_steinke/properties/distribution", list(DISTRIBUTIONS)),
    ("properties/baselines/properties/koskela/properties/distribution", list(DISTRIBUTIONS)),
    ("properties/baselines/properties/papernot_steinke/properties/poisson_delta", list(POISSON_DELTA_BOUNDS)),
    ("properties/baselines/properties/koskela/properties/poisson_delta", list(POISSON_DELTA_BOUNDS)),
    ("properties/baselines/properties/koskela/properties/transfer", list(koskela.TRANSFERS)),
    ("properties/baselines/properties/mehta/properties/optimizer", list(mehta.OPTIMIZERS)),
    ("properties/baselines/properties/mehta/properties/loss", list(mehta.LOSSES)),
    ("properties/audit/properties/threat_models/items", list(THREAT_MODELS)),
]


@pytest.mark.parametrize("path, expected", SCHEMA_ENUMS, ids=[p.split("/properties/", 1)[-1] for p, _ in SCHEMA_ENUMS])
def test_schema_enum_is_the_registry(path, expected):
    assert enum(path) == expected


def test_schema_defaults_are_the_registries():
    assert schema_node("properties/baselines/properties/methods")["default"] == list(registry.FEATURE_BASELINES)
    assert schema_node("properties/language/properties/studies/items/properties/trainer")["default"] == study_config.LANGUAGE_TRAINERS[0]
    # the audit's accountant: one of the accountants, or null (gdp for full batch, prv for DP-SGD)
    audit_accountants = enum("properties/audit/properties/accountant")
    assert sorted(audit_accountants[:-1]) == sorted(ACCOUNTANTS) and audit_accountants[-1] is None


def test_cli_choices_are_the_registries():
    choices = cli_choices()
    for command in ("privacy sigma", "privacy run-eps"):
        assert choices[(command, "--accountant")] == list(ACCOUNTANTS)
        assert choices[(command, "--adjacency")] == list(ADJACENCIES)
    for command in ("privacy select", "privacy select-mu"):
        assert choices[(command, "--distribution")] == list(DISTRIBUTIONS)
        # δ̂ of a Poisson-K trial: the baselines' own option, as the config spells it
        assert choices[(command, "--poisson-delta")] == list(POISSON_DELTA_BOUNDS)
    assert sorted(choices[("audit", "--accountant")]) == sorted(ACCOUNTANTS)
    assert choices[("audit", "--neighbours")] == list(NEIGHBOURS) == list(ADJACENCIES)
    assert choices[("audit", "--threat-model")] == [*THREAT_MODELS, "both"]


def test_audit_accepts_exactly_the_accountants():
    for name in ACCOUNTANTS:
        AuditSpec(eps=1.0, accountant=name, batch_size=None if name == "gdp" else 8)
    with pytest.raises(ConfigError, match="audit.accountant: expected one of gdp, rdp, prv"):
        AuditSpec(eps=1.0, accountant="pld")


# --------------------------------------------------------------------------------------------
# the dataset registry's loaders are imports the architecture test sees


def _loader_function(fn):
    while isinstance(fn, partial):
        fn = fn.func
    return fn


def test_every_registry_loader_is_a_function_of_a_module_the_registry_imports():
    tree = ast.parse(Path(inspect.getsourcefile(data_registry)).read_text())
    imported = {f"{node.module}.{a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names}
    assert "importlib" not in {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    for name, spec in data_registry.DATASETS.items():
        for fn in (spec.loader, spec.groups):
            if fn is None:
                continue
            fn = _loader_function(fn)
            assert fn.__module__ in imported, f"{name}: {fn.__module__} is not imported by the registry"
            assert getattr(importlib.import_module(fn.__module__), fn.__name__) is fn


def test_loaders_build_from_the_record_module_not_the_registry():
    for module in {_loader_function(s.loader).__module__ for s in data_registry.DATASETS.values()}:
        source = Path(inspect.getsourcefile(importlib.import_module(module))).read_text()
        assert "dphpo.data.registry" not in source, f"{module} imports the registry that imports it"


# --------------------------------------------------------------------------------------------
# validation refuses what SUPPORTED does not list, before any job, naming the key


def test_validation_refuses_a_baseline_on_a_trainer_it_does_not_declare(monkeypatch):
    monkeypatch.setitem(registry.SUPPORTED, "mehta", registry.Supports(("finetune",), ("gdp",)))
    with pytest.raises(ConfigError, match=r"^baselines.methods \(digits/raw\): method 'mehta' does not run on the "
                                          r"'linear_head' trainer; it accepts finetune"):
        validate_config(tiny_config(), SCHEMA, create_key=False)


def test_validation_refuses_a_baseline_on_an_accountant_it_does_not_declare():
    cfg = tiny_config()
    cfg["privacy"]["accountant"] = "rdp"
    cfg["baselines"]["methods"] = ["random_search", "koskela"]
    with pytest.raises(ConfigError, match=r"^baselines.methods \(digits/raw\): method 'koskela' does not plan with "
                                          r"privacy.accountant='rdp'; it accepts gdp"):
        validate_config(cfg, SCHEMA, create_key=False)
    cfg["baselines"]["methods"] = ["random_search", "grid_oracle"]  # single full-budget runs: any accountant
    cfg["baselines"]["oso_dpsgd_cnn"]["studies"] = []
    validate_config(cfg, SCHEMA, create_key=False)


def test_a_new_methods_unsupported_trainer_is_refused_at_validation(monkeypatch):
    """A method added to the registry (here a toy one) runs only where SUPPORTED says: its entry is the gate."""
    monkeypatch.setitem(registry.METHODS, "toy", registry.METHODS["random_search"])
    monkeypatch.setitem(registry.SUPPORTED, "toy", registry.Supports(("dpzo",), ACCOUNTANTS))
    monkeypatch.setattr(registry, "FEATURE_BASELINES", (*registry.FEATURE_BASELINES, "toy"))
    cfg = tiny_config()
    cfg["baselines"]["methods"] = ["random_search", "toy"]
    with pytest.raises(ConfigError, match=r"^baselines.methods \(digits/raw\): method 'toy' does not run on the 'linear_head' trainer"):
        check_supported_methods(cfg)
    spec = {"name": "s", "task": "classification", "trainer": "finetune", "methods": ["random_search", "toy"], "model": {}}
    with pytest.raises(ConfigError, match=r"^language.studies.s.methods: method 'toy' does not run on the 'finetune' trainer; "
                                          "it accepts dpzo"):
        check_language_study(tiny_config(), spec)


def test_the_cnn_baseline_and_the_rule_are_checked_on_their_studies(monkeypatch):
    monkeypatch.setitem(registry.SUPPORTED, "oso_dpsgd_cnn", registry.Supports(("finetune",), ("gdp",)))
    with pytest.raises(ConfigError, match=r"^baselines.oso_dpsgd_cnn.studies \(digits/raw\): method 'oso_dpsgd_cnn'"):
        check_supported_methods(tiny_config())
    monkeypatch.setitem(registry.SUPPORTED, "linear_scaling", registry.Supports(("linear_head",), ("gdp", "prv")))
    cfg = copy.deepcopy(tiny_config())
    cfg["variants"] = {"rdp_accounting": {"privacy": {"accountant": "rdp"}}}
    with pytest.raises(ConfigError, match=r"^variants.rdp_accounting studies\[0\] \(digits/raw\): method 'linear_scaling' "
                                          "does not plan with privacy.accountant='rdp'"):
        check_supported_methods(cfg)
