"""docs/architecture.md, "One change, one layer": every claim "a new X is a change in Y" names files
that exist, names registries and functions those files define, and cites a worked example (a test
that makes such a change) — so the claims are checked against the code, not only read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
# where a path named in the docs may live (docs name package files relative to src/dphpo)
BASES = (ROOT, ROOT / "src" / "dphpo", ROOT / "workflow")
PATH = re.compile(r"^[\w./-]+\.(py|smk|rst|yaml)$|^[\w-]+/$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\(.*\))?$")
EXAMPLE = re.compile(r"tests/test_\w+\.py")


def claims() -> dict[str, str]:
    """Each bullet of the section, by its bold title."""
    text = DOC.read_text().split("## One change, one layer", 1)[1].split("\n## ", 1)[0]
    bullets = re.split(r"\n- \*\*", "\n" + text.strip())
    return {b.split("**", 1)[0]: b for b in bullets if b.strip()}


def resolve(path: str) -> Path | None:
    return next((base / path for base in BASES if (base / path).exists()), None)


def defined_names(path: Path) -> set[str]:
    """Top-level and class-level names a Python file defines (and the rule names of a .smk file)."""
    if path.suffix == ".smk":
        found = re.findall(r"^(?:rule|checkpoint) (\w+)|^(\w+) = ", path.read_text(), re.M)
        return {name for pair in found for name in pair if name}
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_section_has_the_claims_a_newcomer_needs():
    assert {"A new table of the paper", "A new trainer", "A new accountant", "A new results path"} <= set(claims())


@pytest.mark.parametrize("title", list(claims()))
def test_each_claim_names_real_files_and_names_they_define_and_a_worked_example(title):
    bullet = claims()[title]
    quoted = re.findall(r"`([^`]+)`", bullet)
    paths = [q for q in quoted if PATH.match(q)]
    missing = [p for p in paths if resolve(p) is None]
    assert not missing, f"{title}: docs name files that do not exist: {missing}"
    files = [resolve(p) for p in paths]
    sources = [f for f in files if f.is_file() and f.suffix in (".py", ".smk")]
    sources += [g for f in files if f.is_dir() for g in f.glob("*.py")]
    known = set().union(*(defined_names(f) for f in sources)) if sources else set()
    names = {q.split("(")[0] for q in quoted if NAME.match(q) and not PATH.match(q)}
    # a registry, class or function named in backquotes must be defined in a file the claim names
    # (config keys, rule names and argument names are written in backquotes too: only CamelCase,
    # UPPER_CASE and called names are checked)
    checked = {n for n in names if n.isupper() or n[0].isupper() or f"{n}(" in bullet}
    undefined = sorted(checked - known)
    assert not undefined, f"{title}: names not defined in {', '.join(map(str, paths))}: {undefined}"
    examples = EXAMPLE.findall(bullet)
    assert examples, f"{title}: cites no worked example (a tests/test_*.py that makes such a change)"
    assert all((ROOT / e).is_file() for e in examples), f"{title}: cited examples missing: {examples}"
