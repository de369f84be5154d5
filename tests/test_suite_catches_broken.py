"""The conformance suite can fail: it reports every deliberately broken backend.

Each backend in ``broken_backends.py`` breaks one clause of the contract. The
suite's tests written for that clause run against it, unchanged, in a
subprocess (the way ``pytest contract_tests/FILE::TEST --sim NAME`` runs): they
must fail. A control file of the suite (names, ids, model info) runs too and
must pass but for at most two tests: the backend is broken in one place, not
everywhere. The reference backend passing the same suite is the other half of
the proof (``make test`` runs it). Running the clause's tests, not the whole
suite (nor their whole files: the other tests of a file assert nothing here),
for each of the broken backends keeps this test short.
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
#: the suite's file run against every broken backend besides its clause's files: its tests (names, ids,
#: model info) hold for a backend broken in one clause, so their passing shows the backend is not broken
#: everywhere (a crash that failed every test would prove nothing)
CONTROL = "test_model_and_names.py"
#: at most this many of the control file's tests may fail (those reading what the one fault breaks)
MAX_CONTROL_FAILURES = 2


def run_suite(sim: str, tmp_path: Path, targets: list[str]) -> tuple[set[str], int, str, int]:
    """Run the conformance suite's ``targets`` (``FILE`` or ``FILE::TEST``) against ``sim``; return (failed test
    ids, exit code, output, number of the control file's tests run)."""
    report = tmp_path / "report.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *(str(SUITE / t) for t in targets),
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
    failed, ran = set(), 0
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        if case.find("skipped") is None and f"{module}.py" == CONTROL:
            ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(f"{module}.py::{case.get('name')}")
    return failed, proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:], ran


def clause_tests(broken: type) -> list[str]:
    """The suite's tests that must catch ``broken`` (``FILE::TEST``, every parametrization), and the control
    file."""
    return sorted({*broken.CAUGHT_BY, CONTROL})


@pytest.fixture(scope="module")
def suite_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[set[str], int, str, int]]:
    """The clause's tests of the suite against every broken backend, two runs at a time (one process each)."""
    from concurrent.futures import ThreadPoolExecutor

    # the folders first, in this thread: TempPathFactory is not thread-safe (two threads making the session's
    # first folder at once make two base folders, and mktemp then refuses its own path)
    folders = {cls.name: tmp_path_factory.mktemp(cls.name) for cls in broken_backends.BROKEN}

    def one(cls: type) -> tuple[set[str], int, str, int]:
        return run_suite(cls.name, folders[cls.name], clause_tests(cls))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((c.name for c in broken_backends.BROKEN), pool.map(one, broken_backends.BROKEN)))


@pytest.mark.parametrize("broken", broken_backends.BROKEN, ids=lambda c: c.name)
def test_suite_reports_broken_backend(broken: type, suite_runs: dict) -> None:
    """Every broken backend fails the suite, and the tests of the clause it breaks are among the failures."""
    failed, code, output, ran = suite_runs[broken.name]
    assert code == 1, f"the suite should fail against {broken.name} (exit {code}):\n{output}"
    # the backend works except for its one fault: the control file's tests pass, but for the odd one that
    # reads what the fault breaks (a base orientation, for a quaternion fault)
    control = sorted(f for f in failed if f.startswith(CONTROL))
    assert ran >= 10 and len(control) <= MAX_CONTROL_FAILURES, (
        f"{broken.name} fails the control file {CONTROL} ({control}): it is broken everywhere, not in one"
        f" clause:\n{output}"
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
