"""The conformance suite can fail: it reports every deliberately broken backend.

Each backend in ``broken_backends.py`` breaks one clause of the contract. The
whole conformance suite runs against it, unchanged, in a subprocess (the way
``pytest contract_tests --sim NAME`` runs), and the tests written for that
clause must be among the failures. The reference backend passing the same
suite is the other half of the proof (``make test`` runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import broken_backends
from simbackend.backends.mujoco import MuJoCoEngine
from simbackend.engine import ENGINE_MEMBERS

SUITE = Path(__file__).resolve().parents[1] / "src" / "simbackend" / "contract_tests"
TESTS = Path(__file__).resolve().parent
#: at most this many of the suite's ~260 tests may fail against a backend that breaks one clause
MAX_COLLATERAL = 40


def run_suite(sim: str, tmp_path: Path) -> tuple[set[str], int, str]:
    """Run the whole conformance suite against ``sim``; return (failed test ids, exit code, output)."""
    report = tmp_path / "report.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(SUITE),
            "--sim",
            sim,
            "-p",
            "broken_backends",
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=no",
            f"--junitxml={report}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    failed = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").rsplit(".", 1)[-1]
            failed.add(f"{module}.py::{case.get('name')}")
    return failed, proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def suite_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[set[str], int, str]]:
    """The whole suite against every broken backend, two runs at a time (each run is one process)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(cls: type) -> tuple[set[str], int, str]:
        return run_suite(cls.name, tmp_path_factory.mktemp(cls.name))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((c.name for c in broken_backends.BROKEN), pool.map(one, broken_backends.BROKEN)))


@pytest.mark.parametrize("broken", broken_backends.BROKEN, ids=lambda c: c.name)
def test_suite_reports_broken_backend(broken: type, suite_runs: dict) -> None:
    """Every broken backend fails the suite, and the tests of the clause it breaks are among the failures."""
    failed, code, output = suite_runs[broken.name]
    assert code == 1, f"the suite should fail against {broken.name} (exit {code}):\n{output}"
    # the backend works except for its one fault: a crash that fails everything would prove nothing
    assert len(failed) <= MAX_COLLATERAL, (
        f"{len(failed)} tests failed against {broken.name}: it is broken everywhere, not in one clause:\n{output}"
    )
    for expected in broken.CAUGHT_BY:
        assert any(f == expected or f.startswith(expected + "[") for f in failed), (
            f"{broken.name} ({broken.__doc__.strip()}) was not reported by {expected}; failures: {sorted(failed)}"
        )


def test_broken_backends_break_one_thing_each() -> None:
    """Each broken engine changes one behaviour, under its own name, by overriding one or two members of the
    declared engine interface (simbackend.engine) and nothing else."""
    names = [c.name for c in broken_backends.BROKEN]
    assert len(set(names)) == len(names) and "mujoco" not in names
    for cls in broken_backends.BROKEN:
        assert issubclass(cls, MuJoCoEngine) and cls.CAUGHT_BY
        overridden = {k for k, v in vars(cls).items() if callable(v) or isinstance(v, property)}
        assert 1 <= len(overridden) <= 2, f"{cls.name} overrides {overridden}"
        assert overridden <= set(ENGINE_MEMBERS), (
            f"{cls.name} overrides {overridden - set(ENGINE_MEMBERS)}, not in the engine interface"
        )
