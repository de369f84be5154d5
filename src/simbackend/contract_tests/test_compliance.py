"""Conformance: contact compliance (the ``geom_compliance`` randomization term) — how deep a body rests and
how high it bounces, per env, from the contact's time constant and damping ratio.

The term's meaning is MuJoCo's standard ``solref`` (docs/randomization.md): a contact acts as a
mass-normalized spring-damper of time constant ``timeconst`` (s) and damping ratio ``dampratio``, blended
with a rigid constraint by the impedance ``d`` of the geoms' ``solimp``. For one contact row whose
inverse mass the solver knows exactly (a sphere on a plane, frictionless: condim 1) the penetration ``p``
obeys

    p'' = g - f/m,   f/m = d(p) * max(0, g + B p' + K d(p) p),
    K = 1 / (dmax * timeconst * dampratio)^2,   B = 2 / (dmax * timeconst)

(MuJoCo's ``aref = -B vel - K d pos`` and ``R = (1 - d)/d * A``; ``f >= 0``: a contact only pushes).
At rest ``p = (1 - d)/d^2 * g * (dmax * timeconst * dampratio)^2``, the same for any mass; a drop from
``h`` rebounds to the apex the same equation gives (:func:`rebound_apex`, integrated here; with
``d = dmax`` its damping ratio is ``dampratio`` exactly, so ``e = exp(-pi z / sqrt(1 - z^2))`` up to
the release of the no-tension contact). The companion term ``geom_impedance`` sets ``solimp``'s
(dmin, dmax, width): with ``dmin = dmax = d`` the impedance is ``d`` at every depth, so the rest depth is
``(1 - d) * g * (timeconst * dampratio)^2``. A backend that does not declare a term refuses a plan that
holds it, by name; the clauses check that instead, then skip.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import env_params, to_np
from simbackend.errors import UnsupportedFeatureError, ValueRangeError
from simbackend.randomization import Distribution, RandomizationPlan, Term

G = 9.81
TIMESTEP = 0.002
RADIUS = 0.1
#: MuJoCo's default solimp (dmin, dmax, width, midpoint, power), written out so the answer does not
#: depend on an engine's default
SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)

COMPLIANCE_MJCF = f"""
<mujoco model="compliance_drop">
  <option timestep="{TIMESTEP}" gravity="0 0 -{G}"/>
  <default><geom condim="1" solimp="{" ".join(map(str, SOLIMP))}"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="ball" pos="0 0 {RADIUS}">
      <freejoint name="ball_free"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.004 0.004 0.004"/>
      <geom name="ball_geom" type="sphere" size="{RADIUS}"/>
    </body>
  </worldbody>
</mujoco>
"""
GEOMS = ("floor", "ball_geom")  # both sides of the contact hold the value: the mix of the two is that value


@pytest.fixture
def drop_model(tmp_path: Path) -> Path:
    path = tmp_path / "compliance_drop.xml"
    path.write_text(COMPLIANCE_MJCF)
    return path


def impedance(depth: float, solimp: tuple[float, ...] = SOLIMP) -> float:
    """MuJoCo's impedance ``d`` at penetration ``depth`` for ``solimp`` (constant where dmin = dmax)."""
    dmin, dmax, width, mid, power = solimp
    if dmin == dmax:
        return dmin
    x = min(abs(depth) / width, 1.0)
    y = x**power / mid ** (power - 1) if x <= mid else 1 - (1 - x) ** power / (1 - mid) ** (power - 1)
    return dmin + y * (dmax - dmin)


def rest_depth(timeconst: float, dampratio: float, solimp: tuple[float, ...] = SOLIMP) -> float:
    """The resting penetration of one contact row: ``p = (1 - d(p))/d(p)^2 g (dmax timeconst dampratio)^2``,
    solved for ``p`` (``d`` depends on it) by fixed-point iteration."""
    p = 0.0
    for _ in range(200):
        d = impedance(p, solimp)
        p = (1 - d) / d**2 * G * (solimp[1] * timeconst * dampratio) ** 2
    return p


def rebound_apex(timeconst: float, dampratio: float, height: float, dt: float = 1e-5) -> float:
    """Height above the surface the body reaches after its first impact, dropped from ``height``: the
    module's equation integrated from first contact (semi-implicit Euler, ``dt`` far below the contact's
    time scale) until the contact releases (``f = 0`` while rising) or the body is out; 0 where it stays
    in contact for 20 time constants (settled: no rebound)."""
    dmax = SOLIMP[1]
    k, b = 1 / (dmax * timeconst * dampratio) ** 2, 2 / (dmax * timeconst)
    p, v = 0.0, math.sqrt(2 * G * height)
    for _ in range(int(20 * timeconst / dt)):
        d = impedance(p)
        push = G + b * v + k * d * p
        v += (G - d * max(push, 0.0)) * dt
        p += v * dt
        if p < 0:
            return v * v / (2 * G)
        if push <= 0 and v < 0:
            return v * v / (2 * G) - p
    return 0.0


def _plan(timeconst: float, dampratio: float, phase: str) -> RandomizationPlan:
    term = Term(
        "geom_compliance",
        Distribution.fixed([timeconst, dampratio]),
        phase=phase,
        operation="set",
        targets=GEOMS,
        components=("timeconst", "dampratio"),
    )
    return RandomizationPlan((term,))


def _impedance_plan(d: float, phase: str) -> RandomizationPlan:
    """``geom_impedance`` with ``dmin = dmax = d`` on both geoms of the contact (solimp's width stays)."""
    term = Term(
        "geom_impedance",
        Distribution.fixed([d, d]),
        phase=phase,
        operation="set",
        targets=GEOMS,
        components=("dmin", "dmax"),
    )
    return RandomizationPlan((term,))


def _declared_or_refused(sim: Any, phase: str, kind: str = "geom_compliance") -> None:
    """Return where the backend declares ``kind`` (``geom_compliance``, ``geom_impedance``) in ``phase``;
    otherwise check that a plan holding it is refused by name, changing nothing, and skip."""
    if phase in sim.get_dr_capabilities().get(kind, frozenset()):
        return
    plan = _plan if kind == "geom_compliance" else lambda _tc, _dr, ph: _impedance_plan(0.5, ph)
    declared = bool(sim.get_dr_capabilities().get(kind))  # in another phase: its getter reads it
    held = getattr(sim, f"get_env_{kind}")().clone() if declared else None
    before = {k: v.copy() for k, v in env_params(sim).items()}
    qpos = sim.get_qpos().clone()
    with pytest.raises(UnsupportedFeatureError, match=kind):
        sim.apply_init_randomization(plan(0.02, 1.0, "init"))
    with pytest.raises(UnsupportedFeatureError, match=kind):
        sim.set_state([0], qpos[:1], torch.zeros_like(sim.get_qvel()[:1]), randomization=plan(0.02, 1.0, "reset"))
    assert torch.equal(sim.get_qpos(), qpos)
    if held is not None:
        assert torch.equal(getattr(sim, f"get_env_{kind}")(), held)
    for k, v in env_params(sim).items():
        np.testing.assert_array_equal(v, before[k], err_msg=f"parameter {k} changed by a refused plan")
    pytest.skip(f"backend {sim.name!r} declares no {kind} in phase {phase!r} (and refuses it by name)")


def _drop(sim: Any, cases: tuple[tuple[float, float], ...], height: float) -> None:
    """Env ``i`` gets compliance ``cases[i]`` with its reset, the ball ``height`` above the floor, at rest."""
    qpos = sim.get_qpos().clone()
    qpos[:, 2] = RADIUS + height
    for i, (tc, dr) in enumerate(cases):
        sim.set_state([i], qpos[i : i + 1], torch.zeros_like(sim.get_qvel()[:1]), randomization=_plan(tc, dr, "reset"))
    held = to_np(sim.get_env_geom_compliance())[:, [sim.info.geom_names.index(g) for g in GEOMS]]
    np.testing.assert_allclose(held, np.array(cases)[:, None, :].repeat(2, 1), rtol=1e-6)


def test_softer_contact_rests_deeper(make_sim: Any, drop_model: Path) -> None:
    """Clause: a body resting on a geom_compliance contact sinks to the depth of its spring: per env,
    (1 - d)/d^2 * g * (dmax * timeconst * dampratio)^2 with d MuJoCo's impedance at that depth (within 5 %:
    the exact static balance of one contact row; float32 engines included), independent of the mass."""
    sim = make_sim(drop_model, 2)
    _declared_or_refused(sim, "reset")
    cases = ((0.01, 1.0), (0.04, 1.0))
    _drop(sim, cases, 0.0)
    for _ in range(10):  # 1 s: settled (the slower contact's time constant is 0.04 s)
        sim.step(torch.zeros(2, sim.info.nu), nsteps=50)
    depth = RADIUS - to_np(sim.get_qpos())[:, 2]
    expected = np.array([rest_depth(tc, dr) for tc, dr in cases])
    assert depth[1] > 3 * depth[0], (
        f"the softer contact (timeconst 0.04 s) rests at {depth[1]:.3g} m, the stiffer at {depth[0]:.3g} m"
    )
    np.testing.assert_allclose(depth, expected, rtol=0.05, err_msg="resting depth (m) against the spring's")


def test_lower_dampratio_bounces_higher(make_sim: Any, drop_model: Path) -> None:
    """Clause: a body dropped on a geom_compliance contact rebounds as the spring-damper does: the lower the
    dampratio, the higher the apex after the first impact, each within 5 % (+ 1 mm) of the apex of the
    contact's equation integrated finely (the engine's 2 ms step resolves the contact: omega * dt <= 0.2)."""
    cases = ((0.05, 1.0), (0.05, 0.3), (0.05, 0.1))
    height = 0.2
    sim = make_sim(drop_model, len(cases))
    _declared_or_refused(sim, "reset")
    _drop(sim, cases, height)
    z = []
    for _ in range(200):  # 0.8 s: the fall (0.2 s), the contact, the rebound's apex
        sim.step(torch.zeros(len(cases), sim.info.nu), nsteps=2)
        z.append(to_np(sim.get_qpos())[:, 2] - RADIUS)
    heights = np.array(z)
    apex = np.empty(len(cases))
    for i in range(len(cases)):
        h = heights[:, i]
        landed = int(np.argmax(h < 0))
        assert landed > 0, f"env {i}: the ball never touched the floor"
        apex[i] = max(float(h[landed:].max()), 0.0)
    expected = np.array([rebound_apex(tc, dr, height) for tc, dr in cases])
    assert apex[2] > apex[1] > apex[0], f"apex by dampratio 1, 0.3, 0.1: {apex.round(4).tolist()} m"
    assert np.all(np.abs(apex - expected) <= 0.05 * expected + 1e-3), (
        f"rebound apex {apex.round(4).tolist()} m, the spring-damper's {expected.round(4).tolist()} m"
    )


def test_compliance_below_the_timestep_floor_is_refused(make_sim: Any, drop_model: Path) -> None:
    """Clause: a geom_compliance plan whose timeconst is below two physics timesteps (where MuJoCo would
    silently act with two timesteps) or whose dampratio is not positive is refused, naming the term and the
    floor, and nothing changes."""
    sim = make_sim(drop_model, 2)
    _declared_or_refused(sim, "init")
    before = sim.get_env_geom_compliance().clone()
    floor = 2 * sim.physics_dt
    with pytest.raises(ValueRangeError, match=rf"geom_compliance.*timeconst >= {floor:g}"):
        sim.apply_init_randomization(_plan(0.9 * floor, 1.0, "init"))
    with pytest.raises(ValueRangeError, match="geom_compliance.*dampratio > 0"):
        sim.apply_init_randomization(_plan(0.02, 0.0, "init"))
    assert torch.equal(sim.get_env_geom_compliance(), before)
    sim.apply_init_randomization(_plan(floor, 1.0, "init"))  # the floor itself is what acts: taken
    assert to_np(sim.get_env_geom_compliance())[:, 0, 0] == pytest.approx(floor)


def test_lower_impedance_rests_deeper(make_sim: Any, drop_model: Path) -> None:
    """Clause: with the contact's time constant fixed (the model's solref), a geom_impedance of
    dmin = dmax = d sets how much of the spring-damper acts: a body rests at (1 - d)/d^2 * g * (d *
    timeconst * dampratio)^2 = (1 - d) * g * (timeconst * dampratio)^2, deeper for a lower d (within 5 %,
    as the compliance clause)."""
    sim = make_sim(drop_model, 2)
    _declared_or_refused(sim, "reset", "geom_impedance")
    cases = (0.9, 0.5)
    qpos = sim.get_qpos().clone()
    for i, d in enumerate(cases):
        sim.set_state(
            [i], qpos[i : i + 1], torch.zeros_like(sim.get_qvel()[:1]), randomization=_impedance_plan(d, "reset")
        )
    held = to_np(sim.get_env_geom_impedance())[:, [sim.info.geom_names.index(g) for g in GEOMS]]
    np.testing.assert_allclose(held[..., :2], np.repeat(np.array(cases)[:, None, None], 2, 1).repeat(2, 2), rtol=1e-6)
    np.testing.assert_allclose(held[..., 2], SOLIMP[2], rtol=1e-6)  # the width stays the model's
    for _ in range(10):  # 1 s: settled (the contact's time scale is 0.02 s)
        sim.step(torch.zeros(2, sim.info.nu), nsteps=50)
    depth = RADIUS - to_np(sim.get_qpos())[:, 2]
    timeconst, dampratio = sim.info.geom_compliance[sim.info.geom_names.index("floor")]
    expected = np.array([rest_depth(timeconst, dampratio, (d, d, *SOLIMP[2:])) for d in cases])
    assert depth[1] > 3 * depth[0], f"impedance 0.5 rests at {depth[1]:.3g} m, 0.9 at {depth[0]:.3g} m"
    np.testing.assert_allclose(depth, expected, rtol=0.05, err_msg="resting depth (m) against the spring's")


def test_impedance_outside_mujocos_range_is_refused(make_sim: Any, drop_model: Path) -> None:
    """Clause: a geom_impedance plan whose dmin exceeds its dmax, or whose dmin or dmax leaves [0.0001,
    0.9999] (where MuJoCo would clamp it silently), is refused naming the term and the geom, and nothing
    changes."""
    sim = make_sim(drop_model, 2)
    _declared_or_refused(sim, "init", "geom_impedance")
    before = sim.get_env_geom_impedance().clone()
    dmax_only = Term("geom_impedance", Distribution.fixed(0.8), targets=("floor",), components=("dmax",), name="low")
    with pytest.raises(
        ValueRangeError, match=r"'low' \(geom_impedance\): contact impedance of geom 'floor'.*dmin <= dmax"
    ):
        sim.apply_init_randomization(RandomizationPlan((dmax_only,)))
    with pytest.raises(ValueRangeError, match=r"geom_impedance.*0\.0001 <= dmin, dmax <= 0\.9999"):
        sim.apply_init_randomization(_impedance_plan(1.0, "init"))
    assert torch.equal(sim.get_env_geom_impedance(), before)
    sim.apply_init_randomization(_impedance_plan(0.9999, "init"))  # the range's end is what acts: taken
    assert to_np(sim.get_env_geom_impedance())[:, 0, :2] == pytest.approx(0.9999)
