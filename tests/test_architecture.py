"""The layers hold: cli -> flows -> pipeline -> schemas; inside pipeline the stage folders, in data order, import
only what lies below them; no import cycle (imports inside functions and package ``__init__``s included); modules
stay short and shallow."""

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
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg; either way it
            # runs pkg's __init__ first, so a package that re-exports its modules is an edge too
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            names += [base] if base in modules and modules[base].name == "__init__.py" else []
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


# The parts of pipeline/ from the bottom up: a part may import its own rank or lower, never higher. Rank 0 is the
# shared seams (the root modules, checks/, llm/); the stage folders follow in data order, then the dataset writer,
# then what runs and reads it, then the CLI.
RANKS = {"checks": 0, "llm": 0, "s1_personas": 1, "s2_timeline": 2, "s3_text": 3, "s4_queries": 4,
         "s5_assembly": 5, "dataset": 6, "run": 7, "evaluation": 7, "reporting": 7, "cli": 8}
STAGES = ["s1_personas", "s2_timeline", "s3_text", "s4_queries", "s5_assembly"]
MAX_LINES = 400
MAX_DEPTH = 4
_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
           ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def rank(module: str) -> int | None:
    """The rank of a pipeline module (None outside pipeline/)."""
    parts = module.split(".")
    if parts[0] != "pipeline":
        return None
    return RANKS[parts[1]] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANKS) else 0


def arrows_back_up(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """Imports from a part of pipeline/ into a part ranked above it."""
    return sorted((a, b) for a, b in graph.edges
                  if rank(a) is not None and rank(b) is not None and rank(b) > rank(a))


def nesting(node: ast.AST, depth: int = 0) -> int:
    """How deep blocks (if, for, with, try, def, ...) nest inside ``node``; an ``elif`` is no deeper than its ``if``."""
    def inner(child: ast.AST) -> int:
        is_elif = isinstance(node, ast.If) and node.orelse == [child]
        return depth + (isinstance(child, _BLOCKS) and not is_elif)
    return max([depth, *(nesting(c, inner(c)) for c in ast.iter_child_nodes(node))])


def test_the_project_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_only_the_cli_imports_flows_and_schemas_import_nothing_above_them():
    assert layer_violations(import_graph()) == []


def test_no_stage_imports_a_later_stage_or_the_parts_above_it():
    assert arrows_back_up(import_graph()) == []


def test_ls_pipeline_lists_the_stages_in_data_order():
    folders = sorted(p.name for p in (REPO / "pipeline").iterdir() if (p / "__init__.py").is_file())
    assert [f for f in folders if f in STAGES] == STAGES
    assert set(folders) == set(RANKS), "a new part of pipeline/ needs its rank in RANKS"


def test_every_module_is_short_and_no_function_nests_deeply():
    long = {m: n for m, p in module_files().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    deep = [(m, f.name, d) for m, p in module_files().items() for f in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and (d := nesting(f)) > MAX_DEPTH]
    assert long == {} and deep == []


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


def test_the_walker_sees_a_cycle_through_a_package_init_and_an_arrow_back_up(tmp_path):
    """``from pipeline.pkg import sub`` inside pkg runs pkg's __init__, which re-exports a module that imports
    the first: a cycle, though no two modules import each other. A stage importing a later one is caught."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for folder in ("dataset", "s2_timeline", "s3_text"):
        (tmp_path / "pipeline" / folder).mkdir()
        (tmp_path / "pipeline" / folder / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "dataset" / "__init__.py").write_text("from pipeline.dataset.publishing import publish\n")
    (tmp_path / "pipeline" / "dataset" / "publishing.py").write_text("from pipeline.dataset.export import x\n")
    (tmp_path / "pipeline" / "dataset" / "export.py").write_text("from pipeline.dataset import fit\n")
    (tmp_path / "pipeline" / "dataset" / "fit.py").write_text("")
    (tmp_path / "pipeline" / "s2_timeline" / "sim.py").write_text("from pipeline.s3_text.beats import b\n")
    (tmp_path / "pipeline" / "s3_text" / "beats.py").write_text("")
    graph = import_graph(tmp_path)
    assert cycles(graph) == [{"pipeline.dataset", "pipeline.dataset.publishing", "pipeline.dataset.export"}]
    assert arrows_back_up(graph) == [("pipeline.s2_timeline.sim", "pipeline.s3_text.beats")]


def test_the_size_checks_measure_nesting_of_blocks():
    tree = ast.parse("def f():\n    for a in b:\n        if a:\n            with c:\n                try:\n"
                     "                    pass\n                except E:\n                    pass\n    x = 1\n")
    assert nesting(tree.body[0]) == 4
    chain = ast.parse("def g(a):\n    if a == 1:\n        pass\n    elif a == 2:\n        pass\n    elif a == 3:\n"
                      "        pass\n    else:\n        pass\n")
    assert nesting(chain.body[0]) == 1


def test_the_root_of_pipeline_holds_only_the_shared_modules():
    assert len(list((REPO / "pipeline").glob("*.py"))) <= 16
