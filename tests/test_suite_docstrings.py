"""Every conformance test names the contract clause it checks, at the start of its docstring."""

from __future__ import annotations

import ast
from pathlib import Path

SUITE = Path(__file__).resolve().parents[1] / "src" / "simbackend" / "contract_tests"


def _tests(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            yield node
        if isinstance(node, ast.ClassDef):  # state machines: their rules and invariants are the tests
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", "") in ("rule", "invariant")
                    for d in item.decorator_list
                ):
                    yield item


def test_every_conformance_test_names_its_clause():
    missing = []
    count = 0
    for path in sorted(SUITE.glob("test_*.py")):
        for fn in _tests(ast.parse(path.read_text())):
            count += 1
            doc = ast.get_docstring(fn) or ""
            if not doc.startswith("Clause:"):
                missing.append(f"{path.name}::{fn.name}")
    assert count > 50, f"found only {count} tests: is the suite where this test looks?"
    assert not missing, "tests without a 'Clause: ...' docstring: " + ", ".join(missing)
