"""The dependency rule of docs/architecture.md, and namespaced import names.

Only ``backends/`` imports an engine to simulate. The model compiler
(``simbackend/models/``) may use MuJoCo's compiler. Everything else that ships in
the package (the core, the conformance suite, the CLI) talks only to the
contract: it never imports ``mujoco`` or ``sapien``, nor a backend package
(``simbackend.backends.*``). The project's own ``tests/`` and ``benchmarks/``
hold engine tests and are not covered.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the src layout: every folder under src/ is its import name
SRC = REPO / "src"

ENGINES = ("mujoco", "sapien", "motrixsim")

#: folders (relative to src/) that must talk only to the contract: everything the package ships but
#: the engine backends
CHECKED = ("simbackend",)
EXCLUDED = ("simbackend/backends/",)

#: the model compiler may import mujoco (MuJoCo's compiler reads every asset), and the playback
#: renderer (MuJoCo's renderer draws the compiled model that every backend shares)
ENGINE_ALLOWED = ("simbackend/models/", "simbackend/playback/render/")
#: of those, the modules that import nothing but mujoco
MUJOCO_ONLY = ("simbackend/playback/render/",)


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC)
    parts = list(rel.parts[:-1])
    if path.stem != "__init__":
        parts.append(path.stem)
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Absolute names of every module a file imports at run time, with line numbers.

    Covers ``import``/``from`` statements anywhere (functions, classes, try
    blocks), relative imports, and ``importlib.import_module("...")`` /
    ``__import__("...")`` with a literal name. Imports under ``if
    TYPE_CHECKING:`` never run and are skipped.
    """

    def __init__(self, module: str, is_package: bool):
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[int, str]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((node.lineno, alias.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        self.found.append((node.lineno, target))
        for alias in node.names:  # `from simbackend import backends` imports a module too
            self.found.append((node.lineno, f"{target}.{alias.name}"))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self.found.append((node.lineno, arg.value))
        self.generic_visit(node)


def imports_of(path: Path) -> list[tuple[int, str]]:
    visitor = _Imports(_module_name(path), path.name == "__init__.py")
    visitor.visit(ast.parse(path.read_text(), filename=str(path)))
    return visitor.found


def _forbidden(module: str, rel: str) -> bool:
    top = module.split(".")[0]
    if top in ENGINES:
        return not rel.startswith(ENGINE_ALLOWED) or (rel.startswith(MUJOCO_ONLY) and top != "mujoco")
    return module == "simbackend.backends" or module.startswith("simbackend.backends.")


def checked_files() -> list[Path]:
    return sorted(
        p
        for folder in CHECKED
        for p in (SRC / folder).rglob("*.py")
        if "__pycache__" not in p.parts and not p.relative_to(SRC).as_posix().startswith(EXCLUDED)
    )


# ----------------------------------------------------------------------
# the scanner itself
# ----------------------------------------------------------------------
def test_scanner_finds_every_import_form() -> None:
    source = textwrap.dedent(
        """\
        from __future__ import annotations
        import os
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import sapien
        else:
            import mujoco.viewer
        def f():
            import mujoco
            from mujoco import batch
        class C:
            def g(self):
                try:
                    from .backends.mujoco import MuJoCoBackend
                except ImportError:
                    pass
        importlib.import_module("sapien.core")
        __import__("mujoco")
        from . import backends
        """
    )
    visitor = _Imports("simbackend.probe", is_package=False)  # as if simbackend/probe.py
    visitor.visit(ast.parse(source))
    bad = sorted({(line, name) for line, name in visitor.found if _forbidden(name, "simbackend/probe.py")})
    assert bad == [
        (7, "mujoco.viewer"),
        (9, "mujoco"),
        (10, "mujoco"),
        (10, "mujoco.batch"),
        (14, "simbackend.backends.mujoco"),
        (14, "simbackend.backends.mujoco.MuJoCoBackend"),
        (17, "sapien.core"),
        (18, "mujoco"),
        (19, "simbackend.backends"),
    ]
    # the model compiler may use mujoco, but not a backend
    assert not _forbidden("mujoco", "simbackend/models/__init__.py")
    assert _forbidden("simbackend.backends.mujoco", "simbackend/models/__init__.py")
    assert not _forbidden("simbackend.backends_helpers", "simbackend/probe.py")
    assert not _forbidden("mujoco_menagerie_paths", "simbackend/probe.py")  # a name, not the package


def test_scan_covers_the_checked_folders() -> None:
    rels = {p.relative_to(SRC).as_posix() for p in checked_files()}
    for expected in (
        "simbackend/contract.py",
        "simbackend/registry.py",
        "simbackend/contract_tests/plugin.py",
        "simbackend/cli/main.py",
    ):
        assert expected in rels
    assert not any(r.startswith("simbackend/backends/") for r in rels)


#: the code the engine swap exists for: tasks, controllers, the vectorized-env adapters, training
#: and its CLI; each must talk only to the contract
ENGINE_FREE_LAYERS = (
    "simbackend/tasks",
    "simbackend/controllers",
    "simbackend/envs",
    "simbackend/training",
    "simbackend/cli/train.py",
)


@pytest.mark.parametrize("layer", ENGINE_FREE_LAYERS)
def test_tasks_controllers_adapters_and_training_import_no_engine(layer: str) -> None:
    files = [p for p in checked_files() if p.relative_to(SRC).as_posix().startswith(layer)]
    assert files, f"{layer}: no module found; the scan would be empty"
    offenders = [
        f"{p.relative_to(SRC).as_posix()}:{line} imports {module}"
        for p in files
        for line, module in imports_of(p)
        if module.split(".")[0] in ENGINES or module.startswith("simbackend.backends")
    ]
    assert not offenders, f"{layer} must talk only to the contract:\n  " + "\n  ".join(offenders)


# ----------------------------------------------------------------------
# the rule
# ----------------------------------------------------------------------
def test_no_engine_import_outside_backends() -> None:
    offenders = []
    for path in checked_files():
        rel = path.relative_to(SRC).as_posix()
        for line, module in imports_of(path):
            if _forbidden(module, rel):
                offenders.append(f"{rel}:{line} imports {module}")
    assert not offenders, (
        "dependency rule (docs/architecture.md): only simbackend/backends/ imports an engine or a backend; the model"
        " compiler simbackend/models/ may import mujoco. Offenders:\n  " + "\n  ".join(sorted(set(offenders)))
    )


#: the layers above the model compiler: it may be used by them, never use them (not even for a type)
ABOVE_THE_MODELS = (
    "simbackend.robots",
    "simbackend.tasks",
    "simbackend.controllers",
    "simbackend.envs",
    "simbackend.training",
    "simbackend.cli",
)


def every_import(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """Like :func:`imports_of`, imports under ``if TYPE_CHECKING:`` included (a type is a dependency too)."""
    visitor = _Imports(module, is_package)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            getattr(visitor, f"visit_{type(node).__name__}")(node)
    return visitor.found


def test_every_import_sees_type_checking_imports() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..robots import X\n"
    assert (3, "simbackend.robots") in every_import(source, "simbackend.models.probe")
    visitor = _Imports("simbackend.models.probe", False)
    visitor.visit(ast.parse(source))
    assert not [m for _, m in visitor.found if m.startswith("simbackend")]  # the run-time scan leaves it out


def test_the_model_layer_stays_below_the_robots() -> None:
    """docs/architecture.md: ``models/`` compiles and composes models from plain values; the robots, tasks and
    the rest build on it. An import the other way (a robot description's type in a scene builder) is a circle."""
    files = sorted((SRC / "simbackend" / "models").rglob("*.py"))
    assert files
    offenders = [
        f"{p.relative_to(SRC).as_posix()}:{line} imports {module}"
        for p in files
        for line, module in every_import(p.read_text(), _module_name(p), p.name == "__init__.py")
        if module.startswith(tuple(f"{m}." for m in ABOVE_THE_MODELS)) or module in ABOVE_THE_MODELS
    ]
    assert not offenders, "the model layer imports a layer above it:\n  " + "\n  ".join(offenders)


def test_contract_side_modules_load_no_engine() -> None:
    """Importing every module of the core, the suite and the CLI loads no engine.

    Backends, the model compiler and the playback renderer are left out; a
    test module that skips itself at import (``pytest.importorskip``) is fine.
    So is the torchrl adapter: ``import torchrl.envs`` itself loads mujoco (for
    torchrl's MuJoCo Playground wrapper); the static rule above still covers its source.
    """
    code = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import simbackend, _pytest.outcomes
        names = []
        skip = ("simbackend.backends", "simbackend.models", "simbackend.playback.render", "simbackend.envs.torchrl")
        def walk(name, path):  # pkgutil.walk_packages would import the skipped packages to walk them
            names.append(name)
            for info in pkgutil.iter_modules(path, name + "."):
                if info.name.startswith(skip):
                    continue
                if info.ispkg:
                    walk(info.name, [str(Path(path[0]) / info.name.rsplit(".", 1)[1])])
                else:
                    names.append(info.name)
        from pathlib import Path
        walk("simbackend", list(simbackend.__path__))
        names = sorted(set(names))
        errors, culprits = [], []
        def engines():
            return sorted(m for m in sys.modules if m.split(".")[0] in ("mujoco", "sapien") and "." not in m)
        for name in names:
            before = engines()
            try:
                importlib.import_module(name)
            except _pytest.outcomes.Skipped:
                pass
            except BaseException as e:
                errors.append(f"{name}: {type(e).__name__}: {e}")
            if engines() != before:
                culprits.append(f"{name} -> {engines()}")
        print("CULPRITS", culprits)
        print("MODULES", len(names), names)
        print("ERRORS", errors)
        print("ENGINES", sorted(m for m in sys.modules if m.split(".")[0] in ("mujoco", "sapien")))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(
        line.split(" ", 1)
        for line in proc.stdout.splitlines()
        if line.startswith(("MODULES", "ERRORS", "ENGINES", "CULPRITS"))
    )
    _count, listed = lines["MODULES"].split(" ", 1)
    for expected in (
        "simbackend.contract",
        "simbackend.registry",
        "simbackend.contract_tests.plugin",
        "simbackend.contract_tests.helpers",
        "simbackend.cli.main",
    ):
        assert repr(expected) in listed, f"{expected} not imported by the check: {listed}"
    assert lines["ERRORS"] == "[]", lines["ERRORS"]
    assert lines["ENGINES"] == "[]", (
        f"importing the contract side loaded an engine; first import that did: {lines['CULPRITS']}"
    )


# ----------------------------------------------------------------------
# namespaced import names
# ----------------------------------------------------------------------
def test_installed_import_names_are_namespaced(tmp_path: Path) -> None:
    # -I: neither the repo (cwd, PYTHONPATH) nor user site is on sys.path, only site-packages
    code = textwrap.dedent(
        """
        import importlib.util
        for name in ("cli", "backends", "contract_tests", "simbackend.cli", "simbackend.backends.mujoco",
                     "simbackend.contract_tests", "simbackend.contract_tests.plugin", "simbackend.cli.main"):
            print(name, importlib.util.find_spec(name) is not None)
        """
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = dict(line.split() for line in proc.stdout.splitlines())
    for top in ("cli", "backends", "contract_tests"):
        assert found[top] == "False", f"a top-level {top!r} package is importable from site-packages"
    for name in (
        "simbackend.cli",
        "simbackend.backends.mujoco",
        "simbackend.contract_tests",
        "simbackend.contract_tests.plugin",
        "simbackend.cli.main",
    ):
        assert found[name] == "True", f"{name} is not importable from the installed package"


def test_pyproject_uses_the_src_layout() -> None:
    """A wheel built from pyproject.toml holds one top-level package, ``simbackend``: src/ holds
    nothing else, setuptools finds the packages there, and every entry point names a module in it."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools_cfg = config["tool"]["setuptools"]
    assert setuptools_cfg["packages"]["find"]["where"] == ["src"]
    assert "package-dir" not in setuptools_cfg, "folder = import name: no mapping of folders into packages"
    tops = sorted(p.name for p in SRC.iterdir() if not p.name.startswith(".") and not p.name.endswith(".egg-info"))
    assert tops == ["simbackend"], f"src/ holds more than the simbackend package: {tops}"
    assert config["project"]["scripts"]["simbackend"].startswith("simbackend.cli.")
    assert config["project"]["entry-points"]["pytest11"]["simbackend"].startswith("simbackend.contract_tests.")
    for target in config["project"]["entry-points"]["simbackend.backends"].values():
        assert target.startswith("simbackend.backends.")


def test_every_package_folder_is_a_package() -> None:
    """Every folder of Python modules under src/simbackend has an ``__init__.py`` (a wheel ships
    regular packages; a folder of modules without one would import only from the source tree)."""
    missing = [
        d.relative_to(SRC).as_posix()
        for d in (SRC / "simbackend").rglob("*")
        if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py")) and not (d / "__init__.py").is_file()
    ]
    assert not missing, f"folders of modules without __init__.py: {missing}"


PLUGIN = REPO / "plugins" / "motrix"


def test_main_package_does_not_know_the_plugin() -> None:
    """The MotrixSim plugin is a third party: nothing the main distribution ships names it, and it
    reaches the core only through simbackend's public modules (never another backend's package)."""
    for path in (SRC / "simbackend").rglob("*.py"):
        text = path.read_text().lower()
        assert "motrix" not in text, f"{path.relative_to(REPO)} names the motrix plugin"
    main = (REPO / "pyproject.toml").read_text().lower()
    assert "motrix" not in main, "the main pyproject names the motrix plugin"
    for path in (PLUGIN / "src" / "simbackend_motrix").rglob("*.py"):
        tree = ast.parse(path.read_text())
        visitor = _Imports("simbackend_motrix." + path.stem, path.stem == "__init__")
        visitor.visit(tree)
        for line, module in visitor.found:
            top = module.split(".")[0]
            assert top in (
                "simbackend",
                "simbackend_motrix",
                "motrixsim",
                "numpy",
                "torch",
                "__future__",
                "typing",
                "copy",
                "os",
                "re",
                "tempfile",
                "xml",
                "pathlib",
                "collections",
            ), f"{path.name}:{line} imports {module}"
            assert not module.startswith(("simbackend.backends", "simbackend.cli", "simbackend.contract_tests")), (
                f"{path.name}:{line} imports {module}: a plugin talks to the public API only"
            )
