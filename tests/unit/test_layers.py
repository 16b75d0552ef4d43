"""The import graph of the project's own modules: no cycles, and no lower layer importing a higher one.

Every import statement counts, at module level or inside a function (also under
TYPE_CHECKING); importing a sub-module does not count as importing its parent
package's __init__ (Python runs it, but it is not a dependency the code chose).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topos", "controllers", "traffic", "testbed")

# Lowest first. A module may import modules of its own layer or below; a few layers
# share a level but stay independent of each other (controllers and traffic, experiment and labs).
LAYERS = [
    ("topos",),
    ("controllers", "traffic", "testbed.campaign"),  # the campaign's failure model and costs are pure
    ("testbed.system",),
    ("testbed.qos",),
    ("testbed.cluster",),  # a server agent shapes its share of the ports with testbed.qos
    ("testbed.net",),
    ("testbed.schema",),  # what a run writes (results.json), typed: the runner writes it, the labs read it
    ("testbed.experiment", "testbed.labs"),
    ("testbed.web",),  # the browser front end, beside the CLI that starts it
    ("testbed.cli",),
    ("testbed",),  # the public API (testbed/__init__.py)
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules `name` imports (resolved: `from .x import y` is x.y when y is a module, else x)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known}
    out.discard(name)
    return out


def graph() -> nx.DiGraph:
    mods = project_modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        g.add_edges_from((name, t) for t in imports_of(name, path, set(mods)))
    return g


def layer_of(module: str) -> tuple[int, str]:
    best = None
    for level, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (level, p)
    assert best is not None, f"{module} is in no layer"
    return best


def test_the_walker_sees_function_level_and_relative_imports():
    g = graph()
    assert ("testbed.cli.up", "testbed.net") in g.edges  # inside serve()
    assert ("testbed.net.network", "testbed.net.checks") in g.edges  # from . import checks
    assert ("controllers.app", "controllers.ofmsgs") in g.edges


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(graph()))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])


def test_no_layer_imports_a_higher_one_or_a_sibling():
    bad = []
    for a, b in graph().edges:
        (la, pa), (lb, pb) = layer_of(a), layer_of(b)
        if lb > la or (lb == la and pa != pb):
            bad.append(f"{a} ({pa}) imports {b} ({pb})")
    assert bad == []


@pytest.mark.parametrize("pure", ["topos", "controllers.routing", "controllers.precise", "controllers.state",
                                  "controllers.ruleset", "traffic.collectives", "traffic.workload",
                                  "testbed.qos.spec", "testbed.qos.ports", "testbed.qos.mmu", "testbed.experiment.spec",
                                  "testbed.experiment.jobs", "testbed.net.static_routes",
                                  "testbed.web.elements", "testbed.cluster.spec", "testbed.cluster.placement",
                                  "controllers.deadlock", "testbed.experiment.deadlocks", "traffic.roce.frames",
                                  "traffic.roce.gbn", "traffic.roce.dcqcn", "traffic.roce.qp"])
def test_pure_modules_reach_no_mininet(pure):
    """Pure code (topology, routing, placement, schedules, QoS numbers) imports no Mininet, even indirectly."""
    g = graph()
    reach = {pure} | nx.descendants(g, pure)
    for m in reach:
        source = project_modules()[m].read_text()
        assert "import mininet" not in source and "from mininet" not in source, f"{pure} reaches {m}"
