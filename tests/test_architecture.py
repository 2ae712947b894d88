"""The layers hold: cli -> flows -> pipeline -> schemas, and no import cycle, imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "schemas", "flows")


def module_files(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` names or lies inside."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module `module` imports anywhere in its file (top level, functions, TYPE_CHECKING)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found |= {owner for name in names if (owner := _owner(name, modules))}
    found.discard(module)
    return found


def import_graph(root: Path = REPO) -> nx.DiGraph:
    modules = module_files(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        graph.add_edges_from((module, dep) for dep in imported(module, path, modules))
    return graph


def cycles(graph: nx.DiGraph) -> list[set[str]]:
    return [c for c in nx.strongly_connected_components(graph) if len(c) > 1]


def layer_violations(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """Imports against cli -> flows -> pipeline -> schemas."""
    def layer(module: str) -> int:
        if module == "pipeline.cli" or module.startswith("pipeline.cli."):
            return 3
        return {"flows": 2, "pipeline": 1, "schemas": 0}[module.split(".")[0]]
    return sorted((a, b) for a, b in graph.edges if layer(b) > layer(a))


def test_the_project_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_only_the_cli_imports_flows_and_schemas_import_nothing_above_them():
    assert layer_violations(import_graph()) == []


def test_the_walker_sees_lazy_imports_cycles_and_layer_inversions(tmp_path):
    """A cycle hidden in a function-level import, and a stage importing flows, are both caught."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "a.py").write_text("from pipeline.b import thing\n")
    (tmp_path / "pipeline" / "b.py").write_text("def thing():\n    from pipeline import a\n    from flows.f import g\n")
    (tmp_path / "flows" / "f.py").write_text("from . import g\nfrom ..schemas import x\n")
    (tmp_path / "schemas" / "x.py").write_text("import os\n")
    graph = import_graph(tmp_path)
    assert cycles(graph) == [{"pipeline.a", "pipeline.b"}]
    assert layer_violations(graph) == [("pipeline.b", "flows.f")]


def test_the_root_of_pipeline_holds_the_stages_and_the_seams_in_subpackages():
    assert len(list((REPO / "pipeline").glob("*.py"))) <= 32
    packages = [p.name for p in (REPO / "pipeline").iterdir() if (p / "__init__.py").is_file()]
    assert {"llm", "queries", "cli", "evaluation", "reporting", "run"} <= set(packages)
