"""Every engine compared with the MuJoCo reference on every built-in and gymnasium MJCF model.

Every model gets the tiers :func:`simbackend.parity.default_tiers` names
(model, kinematics, jacobian everywhere; dynamics on the contact-free
built-ins, servo on arm7, contact on box_drop) at the tolerances of
:mod:`simbackend.parity`, for each engine of :data:`ENGINES`. Rows listed in
``known_gaps.KNOWN_GAPS[engine]`` are held to their measured bound instead;
rows the report passes as KNOWN (a difference the engine declares) must be
those of ``known_gaps.KNOWN_ROWS[engine]``, naming those elements;
models in ``known_gaps.LOAD_REJECTIONS[engine]`` must be rejected with an
error that names the element.

Always against "mujoco": an engine is skipped, with the reason, where it is
not registered or cannot be imported (its extra is not installed).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from parity.known_gaps import KNOWN_GAPS, KNOWN_ROWS, LOAD_REJECTIONS
from simbackend.contract_tests.helpers import parity_models
from simbackend.errors import SimBackendError
from simbackend.parity import ParityReport, default_tiers, run_parity
from simbackend.registry import available_backends, get_backend_factory

#: the engines under test (each against the reference)
ENGINES = ("sapien", "mjwarp")
REFERENCE = "mujoco"
#: random configurations per model in the kinematics and jacobian tiers
NUM_ENVS = 64


def _skip_reason(sim: str) -> str | None:
    if sim not in available_backends():
        return (
            f"backend {sim!r} is not registered (registered: {', '.join(available_backends())});"
            f" install the package with its {sim} extra to run its parity suite"
        )
    try:
        get_backend_factory(sim)
    except SimBackendError as e:
        return f"backend {sim!r} is registered but cannot be imported: {e}"
    return None


SKIPS = {sim: _skip_reason(sim) for sim in ENGINES}


def _skip_unavailable(sim: str) -> None:
    if SKIPS[sim] is not None:
        pytest.skip(SKIPS[sim] or "")


CASES = parity_models()
_REPORTS: dict[tuple[str, str], ParityReport] = {}


def report_for(sim: str, label: str) -> ParityReport:
    """The parity report of one engine on one model (run once per session, all its default tiers)."""
    _skip_unavailable(sim)
    if (sim, label) not in _REPORTS:
        _REPORTS[sim, label] = run_parity(sim, CASES[label], reference=REFERENCE, num_envs=NUM_ENVS, seed=0)
    return _REPORTS[sim, label]


LOAD_CASES = [(sim, label) for sim in ENGINES for label in CASES]


@pytest.mark.parametrize(("sim", "label"), LOAD_CASES, ids=[f"{s}-{m}" for s, m in LOAD_CASES])
def test_load(sim: str, label: str) -> None:
    """The backend builds the model, or rejects it naming the element it cannot represent."""
    row = report_for(sim, label).row("load", "build")
    rejection = LOAD_REJECTIONS[sim].get(label)
    if rejection is not None:
        assert not row.passed, f"{sim} now loads {label}: remove it from known_gaps.LOAD_REJECTIONS[{sim!r}]"
        assert row.detail.startswith(("ModelLoadError:", "UnsupportedFeatureError:")), row.detail
        assert rejection in row.detail, row.detail
    else:
        assert row.passed, row.detail


TIER_CASES = [
    (sim, label, tier) for sim in ENGINES for label, source in CASES.items() for tier in default_tiers(source)
]


@pytest.mark.parametrize(("sim", "label", "tier"), TIER_CASES, ids=[f"{s}-{m}-{t}" for s, m, t in TIER_CASES])
def test_tier(sim: str, label: str, tier: str) -> None:
    """Every row of the tier within tolerance, or within its measured bound where it is a known gap; the rows
    passed as KNOWN (differences the engine declares) exactly those of KNOWN_ROWS, naming their elements."""
    _skip_unavailable(sim)
    if label in LOAD_REJECTIONS[sim]:
        pytest.skip(f"{label}: rejected by {sim} at load (test_load checks the message)")
    report = report_for(sim, label)
    rows = report.tier_rows(tier)
    assert rows, f"tier {tier} produced no rows"
    problems = []
    for row in rows:
        gap = KNOWN_GAPS[sim].get((label, tier, row.quantity))
        if gap is not None:
            bound, _reason = gap
            if row.max_error is None or not row.max_error <= bound:
                problems.append(f"{row.quantity}: {row.max_error} exceeds the known gap's bound {bound}; {row.detail}")
        elif not row.passed:
            step = f", first at step {row.first_step}" if row.first_step is not None else ""
            problems.append(f"{row.quantity}: {row.max_error} > {row.tolerance}{step}; {row.detail}")
        expected = KNOWN_ROWS[sim].get((label, tier, row.quantity))
        if (row.status == "KNOWN") != (expected is not None):
            problems.append(
                f"{row.quantity}: status {row.status}, known_gaps.KNOWN_ROWS expects {expected}; {row.detail}"
            )
        elif expected is not None:
            named = re.findall(r"'([^']*)'", row.known.split(":")[0])
            if named != list(expected):
                problems.append(f"{row.quantity}: KNOWN for {named}, known_gaps.KNOWN_ROWS expects {list(expected)}")
    assert not problems, f"{sim} vs {REFERENCE} on {label}, tier {tier}:\n" + "\n".join(problems)


@pytest.mark.parametrize("sim", ENGINES)
def test_known_gaps_are_current(sim: str) -> None:
    """Every known gap names a measured row that still fails its tolerance (else it must leave the list)."""
    assert set(KNOWN_GAPS) == set(LOAD_REJECTIONS) == set(KNOWN_ROWS) == set(ENGINES)
    stale = []
    for (label, tier, quantity), (bound, reason) in KNOWN_GAPS[sim].items():
        assert label in CASES, f"known gap for unknown model {label!r}"
        assert tier in default_tiers(CASES[label]), f"known gap for {label}: tier {tier!r} does not run there"
        assert reason and bound > 0
        row = report_for(sim, label).row(tier, quantity)
        if row.passed:
            stale.append(f"{label} {tier}/{quantity} now passes ({row.max_error:.3g} <= {row.tolerance:.3g})")
    where = f"known_gaps.KNOWN_GAPS[{sim!r}] (and docs/parity.md's gap list)"
    assert not stale, f"remove from {where}:\n" + "\n".join(stale)


COUPLED = """<mujoco><worldbody>
  <body name="a" pos="0 0 1"><joint name="h1" type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
    <body name="b" pos="0.3 0 0"><joint name="h2" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/></body></body>
  </worldbody>
  <equality><joint name="couple" joint1="h1" joint2="h2" polycoef="0 1 0 0 0"/></equality>
  <actuator><motor name="m1" joint="h1" ctrlrange="-1 1"/></actuator></mujoco>"""


def test_rows_that_depend_on_delegated_forces_are_marked(tmp_path: Any) -> None:
    """A parity figure over an element whose force MuJoCo computes for PhysX partly compares MuJoCo with
    itself: the report names the delegated elements and marks the rows of the tiers that step the physics
    (not the static ones), in its JSON and its summary; MuJoCo against itself marks nothing."""
    path = tmp_path / "coupled.xml"
    path.write_text(COUPLED)
    _skip_unavailable("sapien")
    report = run_parity("sapien", str(path), reference=REFERENCE, tiers=("kinematics", "dynamics"), num_envs=4)
    assert report.delegated == ("equality 'couple': MuJoCo's constraint force",)
    marked = {r.tier for r in report.rows if r.delegated}
    assert marked == {"dynamics"}, marked
    data = report.to_dict()
    assert data["delegated"] == list(report.delegated)
    assert all(row["delegated"] == (row["tier"] == "dynamics") for row in data["rows"])
    assert "partly compare MuJoCo with itself" in report.summary()
    own = run_parity(REFERENCE, str(path), reference=REFERENCE, tiers=("dynamics",), num_envs=4)
    assert own.delegated == () and not any(r.delegated for r in own.rows)
    assert "MuJoCo with itself" not in own.summary()
