"""The package's imports point one way: no circles inside a folder, families apart.

DESIGN.md: imports only point down (``models → train/data/ops → context →
psarray, scheduler``).  Inside a folder, two modules that import each other
(even only for type checking) cannot be read, tested or split one at a time;
each model family is a subpackage that imports the shared ``models/_core`` and
never another family, so one person can own it.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).parents[1] / "daskangel"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mods: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """``{module: modules it imports}`` (module level, functions and TYPE_CHECKING alike)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m.split(".") if p.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{name}.{a.name}"
                    target = full if full in mods else name
                    if target in mods and target != m:
                        edges[m].add(target)
            elif isinstance(node, ast.Import):
                edges[m].update(a.name for a in node.names if a.name in mods)
    return edges


def _cycles(edges: dict[str, set[str]], mods: dict[str, pathlib.Path]) -> list[list[str]]:
    """Strongly connected sets of two or more modules (package ``__init__``s left out:
    they re-export, and every submodule import runs them)."""
    inits = {m for m, p in mods.items() if p.name == "__init__.py"}
    graph = {m: sorted(t for t in e if t not in inits) for m, e in edges.items() if m not in inits}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles() -> None:
    mods = _modules()
    assert _cycles(_imports(mods), mods) == [
        # the worker agent and the handle: being broken under issue 14's row-path work
        [
            "daskangel.psarray._agent",
            "daskangel.psarray._array",
            "daskangel.psarray._dask",
            "daskangel.psarray._pusher",
        ],
    ]


def test_model_families_import_only_the_shared_core() -> None:
    mods = _modules()
    edges = _imports(mods)
    families = {p.parent.name for p in (ROOT / "models").glob("*/__init__.py")} - {"_core"}
    bad = []
    for m, targets in edges.items():
        parts = m.split(".")
        if len(parts) < 3 or parts[1] != "models":
            continue
        own = parts[2] if len(parts) > 3 or mods[m].name == "__init__.py" else None
        for t in targets:
            tp = t.split(".")
            if len(tp) < 3 or tp[1] != "models" or tp[2] not in families:
                continue
            if own == "_core" or (own in families and tp[2] != own):
                bad.append(f"{m} -> {t}")
    assert bad == []
    assert "linear" in families
