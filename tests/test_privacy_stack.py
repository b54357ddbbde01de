"""Import direction of the privacy stack and of the HPO methods (AST scan, function-local imports too).

privacy: math (gdp, rdp, calibrate, prv) ← events ← composition (one file per accountant that reads events)
← ledger ← planning, tuning ← accountant; randomness apart.
hpo: methods plan through the accountant, never with the GDP/RDP/PRV math directly.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dphpo"
#: Each privacy module, and the privacy modules it may import (everything strictly below it).
PRIVACY_ORDER = ["gdp", "rdp", "calibrate", "prv", "events", "composition", "ledger", "planning", "tuning", "accountant"]
ALLOWED = {m: set(PRIVACY_ORDER[:i]) for i, m in enumerate(PRIVACY_ORDER)} | {"randomness": set()}
#: Math the HPO methods reach only through the accountant (and P&S tuning through privacy.tuning).
HPO_FORBIDDEN = {"dphpo.privacy.gdp", "dphpo.privacy.rdp", "dphpo.privacy.prv"}


def dphpo_imports(path: Path) -> set[str]:
    """Every dphpo module a file imports, anywhere in it (module level or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("dphpo")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dphpo"):
            out.add(node.module)
            # `from dphpo.privacy import gdp` imports the module gdp
            out |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if SRC.parent.joinpath(*f"{node.module}.{a.name}".split(".")).with_suffix(".py").exists()
            }
    return out


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_privacy_imports_only_downwards(module):
    path = SRC / "privacy" / f"{module}.py"
    path = path if path.exists() else SRC / "privacy" / module / "__init__.py"  # a package: its registry
    imported = {m.split(".")[2] for m in dphpo_imports(path) if m.startswith("dphpo.privacy.")} - {module}
    assert imported <= ALLOWED[module], f"privacy.{module} imports {sorted(imported - ALLOWED[module])} (not below it)"


def test_every_privacy_module_has_its_place():
    modules = {p.stem for p in (SRC / "privacy").glob("*.py")} - {"__init__"}
    assert modules | {"composition"} == set(ALLOWED)


@pytest.mark.parametrize("path", sorted((SRC / "privacy" / "composition").glob("*.py")), ids=lambda p: p.name)
def test_the_accountants_that_read_events_import_only_math_events_and_each_other(path):
    imported = {m.split(".")[2] for m in dphpo_imports(path) if m.startswith("dphpo.privacy.")}
    assert imported <= ALLOWED["composition"] | {"composition"}, f"{path.name} imports {sorted(imported)}"


def test_privacy_never_imports_hpo():
    for path in (SRC / "privacy").glob("*.py"):
        assert not {m for m in dphpo_imports(path) if m.startswith("dphpo.hpo")}, path.name


@pytest.mark.parametrize("path", sorted((SRC / "hpo").glob("*.py")), ids=lambda p: p.name)
def test_hpo_methods_do_not_import_privacy_math(path):
    assert not dphpo_imports(path) & HPO_FORBIDDEN


def test_no_code_asks_an_accountant_for_its_name_to_plan():
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        assert 'name == "gdp"' not in text and 'name != "gdp"' not in text, path


def test_baselines_share_candidates_not_random_search():
    for path in (SRC / "hpo").glob("*.py"):
        assert "dphpo.hpo.random_search" not in dphpo_imports(path), path.name
