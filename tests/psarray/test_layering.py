"""The data plane never imports the layers above it (DESIGN.md: imports only point down)."""

from __future__ import annotations

import ast
import pathlib

PSARRAY = pathlib.Path(__file__).parents[2] / "daskangel" / "psarray"
ABOVE = ("ops", "train", "models", "data", "context", "scheduler")


def test_psarray_imports_nothing_above_it():
    bad = []
    for path in PSARRAY.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level >= 2 and mod.split(".")[0] in ABOVE:
                    bad.append(f"{path.name}: from {'.' * node.level}{mod}")
                if node.level == 0 and mod.startswith(tuple(f"daskangel.{a}" for a in ABOVE)):
                    bad.append(f"{path.name}: from {mod}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(tuple(f"daskangel.{a}" for a in ABOVE)):
                        bad.append(f"{path.name}: import {alias.name}")
    assert bad == []
