"""commlib's layers, measured on its import graph (issue 65): no import goes up a floor, no two packages import
each other, and profiling's stages run one way (read -> calls/groups/traces -> analyses -> replay -> report -> jobs).

Every import is counted, at module level and inside functions (ast, not the import system), absolute or relative.
The floors, lowest first (../shared/DESIGN.md, "commlib layout"):

    ground      _validate, columns (text tables, display width), cost (and its intervals), topology
    speech      ui.language and ui.wrap: what a learner reads, in the notebook's language; every floor speaks
                through them, so they stand below every floor that speaks and import the ground floor only
    cluster     the local process cluster: nothing else of commlib
    middle      algorithms, plan, precision, network, compression, parallel, overlap, bench
    profiling   read < calls, groups, traces < model, overlap, stragglers, checks, diagnosis < replay < report
                < jobs < the package itself
    exercises, then ui (its figures and widgets; shown.py records the checkers' answers), then commlib itself
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "commlib"

FLOORS = [  # (floor, module prefixes): a module takes the floor of its longest matching prefix
    (0, ["commlib._validate", "commlib.columns", "commlib.cost", "commlib.topology"]),
    (1, ["commlib.ui.language", "commlib.ui.wrap"]),
    (2, ["commlib.cluster"]),
    (3, ["commlib.algorithms", "commlib.plan", "commlib.precision", "commlib.network", "commlib.compression",
         "commlib.parallel", "commlib.overlap", "commlib.bench"]),
    (4.0, ["commlib.profiling.read"]),
    (4.1, ["commlib.profiling.calls", "commlib.profiling.groups", "commlib.profiling.traces"]),
    (4.2, ["commlib.profiling.model", "commlib.profiling.overlap", "commlib.profiling.stragglers",
           "commlib.profiling.checks", "commlib.profiling.diagnosis"]),
    (4.3, ["commlib.profiling.replay"]),
    (4.4, ["commlib.profiling.report"]),
    (4.5, ["commlib.profiling.jobs"]),
    (4.9, ["commlib.profiling"]),
    (5, ["commlib.exercises"]),
    (6, ["commlib.ui"]),
    (7, ["commlib", "commlib.__main__"]),
]

# imports that go up a floor on purpose, each with its reason; nothing else may
ALLOWED_UP = {
    ("commlib.profiling.traces", "commlib.profiling.jobs.recording"):
        "traces.record, the name chapters 9 and 10 and the README call, is jobs.recording.record",
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """commlib's modules by dotted name (a package by its own name) -> file."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known) -> list[tuple[str, int]]:
    """(module of commlib imported, line) for every import in the file, at any depth; `from pkg import x` counts
    pkg.x where x is a module, else pkg."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t.split(".")[0] == "commlib" and t != name and (t, node.lineno) not in out:
                out.append((t, node.lineno))
    return out


def graph(root: Path = ROOT) -> dict[str, list[tuple[str, int]]]:
    mods = modules(root)
    return {m: imports(m, p, mods) for m, p in mods.items()}


def floor(module: str) -> float:
    best = max((len(p), f) for f, prefixes in FLOORS for p in prefixes
               if module == p or module.startswith(p + "."))
    return best[1]


def unit(module: str) -> str:
    """The package a module counts in for cycles: commlib's top-level package or module, profiling's stage
    (its subpackage or module), ui.language and ui.wrap on their own."""
    parts = module.split(".")
    if parts[:3] in (["commlib", "ui", "language"], ["commlib", "ui", "wrap"]):
        return ".".join(parts[:3])
    return ".".join(parts[:3] if parts[1:2] == ["profiling"] else parts[:2])


def upward(g) -> list[str]:
    """'module:line imports target (floor a < floor b)' for every import from a higher floor."""
    return [f"{m}:{line} imports {t} (floor {floor(m)} < floor {floor(t)})"
            for m, ts in sorted(g.items()) for t, line in ts
            if floor(t) > floor(m) and (m, t) not in ALLOWED_UP]


def cycles(g) -> list[list[str]]:
    """The strongly connected groups of more than one unit in the graph of units (Tarjan), ALLOWED_UP's imports
    left out."""
    edges: dict[str, set[str]] = {}
    for m, ts in g.items():
        edges.setdefault(unit(m), set())
        for t, _ in ts:
            if unit(t) != unit(m) and (m, t) not in ALLOWED_UP:
                edges[unit(m)].add(unit(t))
                edges.setdefault(unit(t), set())
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def who_imports(g, group: list[str]) -> list[str]:
    return [f"{m}:{line} imports {t}" for m, ts in sorted(g.items()) for t, line in ts
            if unit(m) in group and unit(t) in group and unit(m) != unit(t)]


def test_the_graph_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "commlib"
    (pkg / "ui").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "columns.py").write_text("def f():\n    from commlib.ui.language import width\n")
    (pkg / "ui" / "__init__.py").write_text("")
    (pkg / "ui" / "language.py").write_text("from .. import columns\n")
    g = graph(pkg)
    assert g["commlib.columns"] == [("commlib.ui.language", 2)]
    assert g["commlib.ui.language"] == [("commlib.columns", 1)]
    assert upward(g) == ["commlib.columns:2 imports commlib.ui.language (floor 0 < floor 1)"]
    assert cycles(g) == [["commlib.columns", "commlib.ui.language"]]


def test_every_module_has_a_floor():
    for m in modules():
        floor(m)   # raises where no prefix matches


def test_no_import_goes_up_a_floor():
    bad = upward(graph())
    assert bad == [], "imports from a higher floor:\n" + "\n".join(bad)


def test_no_two_packages_import_each_other():
    g = graph()
    found = cycles(g)
    assert found == [], "packages in a circle:\n" + "\n".join(
        " <-> ".join(c) + ":\n  " + "\n  ".join(who_imports(g, c)) for c in found)


def test_the_allowed_upward_imports_are_still_there():
    g = graph()
    for m, t in ALLOWED_UP:
        assert t in [x for x, _ in g[m]], f"{m} no longer imports {t}: drop it from ALLOWED_UP"
