"""The second architecture, checked: no import cycles, engines behind their declared interface, no private reach.

* Imports form no cycle among simbackend's modules (every import counts: module
  level, inside functions, relative; imports under ``if TYPE_CHECKING:`` never
  run and are left out).
* The core (everything but the engine backends) reaches no private member of
  another object (``other._x``): services talk to engines, and the front end to
  its services, through public members only. ``self._x`` is a module's own.
* Every engine shipped (and the Motrix plugin) defines no public member beyond
  the declared engine interface (:data:`simbackend.engine.ENGINE_MEMBERS`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from test_dependency_rule import SRC, _Imports, _module_name

REPO = Path(__file__).resolve().parents[1]
PACKAGE = SRC / "simbackend"


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the simbackend modules it imports (a name that is an attribute of a module counts as the module)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        targets = set()
        for _line, target in visitor.found:
            while target and target not in modules:  # "pkg.module.Name" -> "pkg.module"
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# the checks can fail: a planted cycle and a planted private reach are found
def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    """No cycle among simbackend's modules (the package's lazy ``__getattr__`` imports by computed name are not edges)."""
    modules = _modules()
    assert "simbackend.contract" in modules and "simbackend.cli.main" in modules
    found = cycles(import_graph(modules))
    assert not found, "import cycles:\n  " + "\n  ".join(" <-> ".join(c) for c in found)


def private_reaches(source: str) -> list[tuple[int, str]]:
    """``(line, "expr._name")`` for every attribute ``_name`` (not a dunder) read from anything but ``self``,
    ``cls`` or ``super()``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
            continue
        out.append((node.lineno, f"{ast.unparse(base)}.{node.attr}"))
    return sorted(out)


def test_private_reach_finder_sees_planted_reaches() -> None:
    src = "def f(sim, engine):\n    sim._check_open()\n    x = engine.batch._state\n    self._ok = super()._fine\n"
    assert private_reaches(src) == [(2, "sim._check_open"), (3, "engine.batch._state")]


#: reads of another object's private member the core keeps, each with its reason
ALLOWED_PRIVATE = {
    "_version": "torch.Tensor._version: torch's in-place write counter, the only way to see a tensor changed",
}


def test_the_core_reaches_no_private_member_of_another_object() -> None:
    """Services reach engines, and the front end its services, through public members only."""
    offenders = []
    for name, path in sorted(_modules().items()):
        if name.startswith("simbackend.backends"):
            continue  # an engine's own modules may share their internals
        for line, what in private_reaches(path.read_text()):
            if what.rpartition(".")[2] not in ALLOWED_PRIVATE:
                offenders.append(f"{path.relative_to(REPO)}:{line} reads {what}")
    assert not offenders, "private members read across objects:\n  " + "\n  ".join(offenders)


def _engine_classes() -> list[type]:
    from simbackend.engine import Engine

    classes = []
    for module in (
        "simbackend.backends.mujoco",
        "simbackend.backends.sapien",
        "simbackend_motrix",
        "simbackend.sharding.engine",
        "simbackend.mixing",
    ):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        classes += [c for _, c in inspect.getmembers(mod, inspect.isclass) if issubclass(c, Engine) and c is not Engine]
    return classes


@pytest.mark.parametrize("engine", _engine_classes(), ids=lambda c: c.__name__)
def test_engines_define_only_the_declared_interface(engine: type) -> None:
    """An engine's public members are the engine interface's (its own data lives in instance attributes and
    private helpers): what the front end may call is exactly what simbackend.engine declares."""
    from simbackend.engine import ENGINE_MEMBERS

    public = {k for k, v in vars(engine).items() if not k.startswith("_") and (callable(v) or isinstance(v, property))}
    assert public <= set(ENGINE_MEMBERS), (
        f"{engine.__name__} adds public members {sorted(public - set(ENGINE_MEMBERS))}"
    )
    assert engine.name != "abstract" and engine.name == engine.name.lower()


def test_writing_a_backend_lists_exactly_the_engine_interface() -> None:
    """docs/writing-a-backend.md documents one section per engine member, in the declared order, and no other;
    the members without a default are the abstract ones."""
    import re

    from simbackend.engine import ENGINE_MEMBERS, OPTIONAL_MEMBERS, Engine

    page = (REPO / "docs" / "writing-a-backend.md").read_text()
    documented = re.findall(r"^### `([^`]+)`$", page, flags=re.M)
    assert documented == list(ENGINE_MEMBERS)
    abstract = set(Engine.__abstractmethods__) | {"__init__", "name"}
    assert abstract == set(ENGINE_MEMBERS) - set(OPTIONAL_MEMBERS)
    for member in ENGINE_MEMBERS:  # every member exists on the interface
        assert member in vars(Engine), member
