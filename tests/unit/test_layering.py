"""Dependencies between the suite's packages point one way, and no module imports itself in a circle.

Layers, bottom to top: ``vocab`` (the shared vocabulary: records, errors, result file names, atomic
writes), ``workloads`` (what is sent), then ``systems`` (what is deployed) and ``figures`` (plotting, which
reads results only), then ``harness`` (the composition root, which may import all). A module may import its
own package and the packages below it, never one above or beside it; there are no exceptions. Imports inside
functions count as much as those at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RANKS = {"vocab": 0, "workloads": 1, "systems": 2, "figures": 2, "harness": 3}

Graph = dict[str, set[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the four packages, by dotted name."""
    return {module_name(p, root): p for pkg in RANKS for p in (root / pkg).rglob("*.py")}


def imports_of(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports, anywhere in the file (``from pkg import sub`` counts as the
    submodule ``pkg.sub`` when there is one, else as ``pkg``)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c.func`-style names: the module part
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path) -> Graph:
    modules = project_modules(root)
    return {name: imports_of(path, name, modules) for name, path in modules.items()}


def layer_violations(graph: Graph) -> list[str]:
    """Each import that points up or sideways between packages."""
    out = []
    for source, targets in sorted(graph.items()):
        src_pkg = source.split(".")[0]
        for target in sorted(targets):
            dst_pkg = target.split(".")[0]
            if dst_pkg != src_pkg and RANKS[dst_pkg] >= RANKS[src_pkg]:
                kind = "upward" if RANKS[dst_pkg] > RANKS[src_pkg] else "sideways"
                below = ", ".join(p for p, r in RANKS.items() if r < RANKS[src_pkg]) or "nothing of the suite"
                out.append(f"{source} -> {target}: {kind} ({src_pkg} may import {below})")
    return out


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(ROOT)


def test_the_graph_sees_the_suites_imports(graph):
    assert {"systems.contract", "harness.engines", "workloads.base"} <= set(graph)
    assert "systems.contract" in graph["harness.engines"]  # a top-level import
    assert "figures.render" in graph["harness.app"]  # an import inside a function


def test_no_import_points_up_or_sideways(graph):
    assert layer_violations(graph) == []


def test_no_import_cycle(graph):
    assert cycles(graph) == []


def test_the_checks_catch_what_they_forbid(tmp_path):
    for pkg in RANKS:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "workloads" / "a.py").write_text("from systems.b import thing\n")
    (tmp_path / "systems" / "b.py").write_text("import workloads.a\nfrom vocab.records import R\n")
    (tmp_path / "systems" / "c.py").write_text("def f():\n    from harness import app\n")
    (tmp_path / "figures" / "d.py").write_text("from systems.b import thing\n")
    (tmp_path / "vocab" / "records.py").write_text("from workloads import a\n")
    (tmp_path / "harness" / "app.py").write_text("from vocab.records import R\n")
    fake = import_graph(tmp_path)
    assert layer_violations(fake) == [
        "figures.d -> systems.b: sideways (figures may import vocab, workloads)",
        "systems.c -> harness.app: upward (systems may import vocab, workloads)",
        "vocab.records -> workloads.a: upward (vocab may import nothing of the suite)",
        "workloads.a -> systems.b: upward (workloads may import vocab)",
    ]
    assert cycles(fake) == [["systems.b", "vocab.records", "workloads.a"]]
