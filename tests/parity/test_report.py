"""The parity report itself, against the MuJoCo reference and deliberately perturbed copies of it.

MuJoCo compared with itself passes every tier with zero error; each perturbed
backend changes one thing, and the report must name that quantity (and, for
rollouts, the substep where it first leaves tolerance).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simbackend import parity
from simbackend.backends.mujoco import MuJoCoEngine
from simbackend.contract import SimBackend
from simbackend.errors import InvalidArgumentError, ModelLoadError
from simbackend.models import builtin_model_path, builtin_models
from simbackend.parity import ParityReport, ParityRow, run_parity
from simbackend.registry import register_backend, unregister_backend

#: the kicked backend jumps its elbow by KICK rad after this many substeps
KICK_STEP = 100
KICK = 0.05


class KickedElbow(MuJoCoEngine):
    """MuJoCo, but the 'elbow' joint jumps by KICK rad once KICK_STEP substeps have been taken."""

    name = "parity-kicked"

    def __init__(self, build):
        super().__init__(build)
        self._taken = 0
        self._elbow = int(self.info.joint_qposadr[self.info.joint_names.index("elbow")])

    def step(self, ctrl, nsteps, forces):
        failed = super().step(ctrl, nsteps, forces)
        before, self._taken = self._taken, self._taken + nsteps
        if before < KICK_STEP <= self._taken:
            self._qpos[:, self._elbow] += KICK
        return failed


class HeavyLowerLink(MuJoCoEngine):
    """MuJoCo with the double pendulum's lower link twice as heavy, in the engine and in model_fields."""

    name = "parity-heavy"

    def __init__(self, build):
        super().__init__(build)
        self._link = self.info.body_names.index("lower_link")
        self.batch.expand("body_mass")[:, self._link] *= 2.0

    def model_fields(self):
        fields = super().model_fields()
        fields["body_mass"][self._link] *= 2.0
        return fields


class ShiftedTip(MuJoCoEngine):
    """MuJoCo reporting site 'tip' 1 mm too high."""

    name = "parity-shifted"

    def site_pose(self, ids):
        pos, quat = super().site_pose(ids)
        pos = pos.copy()
        pos[:, ids == self.info.site_names.index("tip"), 2] += 1e-3
        return pos, quat


@pytest.fixture
def registered():
    names = []

    def register(cls):
        register_backend(cls.name, cls, replace=True)
        names.append(cls.name)
        return cls.name

    yield register
    for n in names:
        unregister_backend(n)


@pytest.mark.parametrize("model", builtin_models())
def test_mujoco_matches_itself_on_every_tier(model):
    """Every tier, asked for on every built-in model, passes with no error (or is skipped with a reason).

    Orientation angles come out at ~1e-16 rather than 0: they are measured after normalising.
    """
    report = run_parity("mujoco", model, tiers=parity.TIERS, num_envs=8)
    assert report.passed, report.summary()
    assert report.tiers == parity.TIERS
    assert {r.tier for r in report.rows} == {"load", *parity.TIERS}
    for r in report.rows:
        if r.skipped:
            assert r.max_error is None and r.detail.startswith("the model has no")
        elif r.max_error is not None:
            assert r.max_error <= 1e-12, r
    ran = {r.tier for r in report.rows if not r.skipped}
    assert set(parity.default_tiers(model)) <= ran


def test_kicked_joint_is_the_first_failure_at_its_step(registered):
    """A jump in one joint at substep 100 is reported as that joint's dof_pos, first out at step 100."""
    sim = registered(KickedElbow)
    report = run_parity(sim, "double_pendulum", num_envs=4)
    for tier in ("model", "kinematics", "jacobian"):
        assert report.tier_passed(tier), report.summary()
    assert not report.passed
    first = report.first_failure()
    assert (first.tier, first.quantity, first.first_step) == ("dynamics", "dof_pos[elbow]", KICK_STEP)
    assert first.max_error >= KICK - parity.DYN_POS_TOL
    assert "t = 0.1 s" in first.detail  # the double pendulum's substep is 1 ms
    shoulder = report.row("dynamics", "dof_pos[shoulder]")
    assert shoulder.first_step is None or shoulder.first_step > KICK_STEP
    assert report.first_failure("model") is None


def test_heavier_link_fails_mass_and_then_dynamics(registered):
    """A doubled mass shows in model_fields (named body) and makes the rollout leave tolerance later."""
    sim = registered(HeavyLowerLink)
    report = run_parity(sim, "double_pendulum", num_envs=4)
    mass = report.row("model", "body_mass")
    assert not mass.passed and mass.max_error == pytest.approx(1.0)  # relative error of 2 kg vs 1 kg
    assert "'lower_link'" in mass.detail and "2 vs reference 1" in mass.detail
    assert report.row("model", "body_inertia").passed and report.tier_passed("kinematics")
    first = report.first_failure("dynamics")
    assert first is not None and first.first_step > 1
    assert all(r.max_error > parity.DYN_POS_TOL for r in report.tier_rows("dynamics") if not r.passed)


def test_shifted_site_fails_site_position_only(registered):
    sim = registered(ShiftedTip)
    report = run_parity(sim, "pendulum", tiers=["kinematics", "jacobian"], num_envs=4)
    site = report.row("kinematics", "site_pos")
    assert not site.passed and site.max_error == pytest.approx(1e-3, rel=1e-3)
    assert "site 'tip'" in site.detail
    assert [r.quantity for r in report.failures] == ["site_pos"]


def test_backend_that_cannot_load_gives_a_failed_load_row():
    def rejecting(model, num_envs, **kwargs):
        raise ModelLoadError("tendon 'spine': tendons are not supported")

    register_backend("parity-rejecting", rejecting)
    try:
        report = run_parity("parity-rejecting", "pendulum")
    finally:
        unregister_backend("parity-rejecting")
    assert not report.passed
    assert [(r.tier, r.quantity, r.passed) for r in report.rows] == [("load", "build", False)]
    assert report.rows[0].detail == "ModelLoadError: tendon 'spine': tendons are not supported"


def test_a_model_the_reference_cannot_load_raises():
    with pytest.raises(ModelLoadError, match="closest known names: 'pendulum'"):
        run_parity("mujoco", "pendulm")


def test_arguments_are_validated():
    with pytest.raises(InvalidArgumentError, match="unknown tier.*'dynamic'.*known tiers: model"):
        run_parity("mujoco", "pendulum", tiers=["dynamic"])
    with pytest.raises(InvalidArgumentError, match="num_envs"):
        run_parity("mujoco", "pendulum", num_envs=0)


def test_default_tiers():
    assert parity.default_tiers("pendulum") == ("model", "kinematics", "jacobian", "dynamics", "randomized")
    assert parity.default_tiers("arm7")[-2:] == ("servo", "randomized")
    assert parity.default_tiers("box_drop")[-1] == "contact"
    assert parity.default_tiers(builtin_model_path("box_drop")) == parity.default_tiers("box_drop")
    assert parity.default_tiers("quadruped") == parity.STATIC_TIERS
    assert parity.default_tiers("/some/where/ant.xml") == parity.STATIC_TIERS


def test_report_is_strict_json_and_orders_failures():
    report = ParityReport(
        "x",
        "mujoco",
        "m",
        ("model", "dynamics"),
        1,
        0,
        rows=[
            ParityRow("load", "build", None, None, True),
            ParityRow("model", "body_mass", math.inf, 0.0, False, detail="shape (2,) vs reference (3,)"),
            ParityRow("dynamics", "dof_pos[a]", 0.5, 0.01, False, first_step=40),
            ParityRow("dynamics", "dof_pos[b]", 0.2, 0.01, False, first_step=12),
            ParityRow("dynamics", "dof_pos[c]", 0.0, 0.01, True),
        ],
    )
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["passed"] is False
    assert data["rows"][1]["max_error"] == "inf" and data["rows"][1]["status"] == "FAIL"
    assert data["rows"][2]["first_step"] == 40
    assert report.first_failure().quantity == "dof_pos[b]"  # earliest step wins over report order
    assert report.first_failure("model").quantity == "body_mass"
    assert report.first_failure("load") is None
    assert "dynamics/dof_pos[b]: max error 0.2 > 0.01 first at step 12" in report.summary()
    with pytest.raises(KeyError, match="servo"):
        report.tier_passed("servo")


def test_random_configurations_respect_ranges():
    with SimBackend(MuJoCoEngine, "arm7", 1) as sim:
        info = sim.info
    qpos = parity.random_configurations(info, 200, np.random.default_rng(3))
    lo, hi = info.joint_range[info.dof_joints].T
    dof = qpos[:, info.dof_qpos_index]
    assert (dof >= lo).all() and (dof <= hi).all()
    assert (dof.max(0) - dof.min(0) > 0.8 * (hi - lo)).all()  # they cover the ranges
    quat = qpos[:, info.quat_qpos_index[0] : info.quat_qpos_index[0] + 4]
    np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1.0)
    np.testing.assert_allclose(qpos[:, 7:10], np.broadcast_to(info.qpos0[7:10], (200, 3)))  # the cube stays put


def test_device_goes_to_the_backend_under_test_and_options_to_both():
    """run_parity(device=, options=): the options build both backends (the same model on each); the
    device only the backend under test, also when the reference is the same backend."""
    built = []

    def recording(model, num_envs, **kwargs):
        built.append(kwargs)
        return SimBackend(MuJoCoEngine, model, num_envs, **kwargs)

    register_backend("parity-recording", recording)
    try:
        report = run_parity(
            "parity-recording",
            "pendulum",
            reference="parity-recording",
            tiers=["model"],
            device="cpu",
            options={"timestep": 0.004, "mujoco": {"solver": "cg"}},
        )
    finally:
        unregister_backend("parity-recording")
    assert report.passed, report.summary()
    assert report.row("model", "timestep").detail == "identical (1 values)"
    assert len(built) == 4  # a probe and the model tier's pair, each for both
    assert sorted(str(k["device"]) for k in built) == ["None", "None", "cpu", "cpu"]
    assert all(k["timestep"] == 0.004 and k["mujoco"] == {"solver": "cg"} for k in built), built


def test_randomized_tier_sees_a_backend_that_randomizes_on_paper_only():
    """The randomized tier compares the randomized dynamics, not only the values each engine reports."""
    from broken_backends import RandomizedMassOnlyOnPaper
    from simbackend.registry import register_backend, unregister_backend

    register_backend(RandomizedMassOnlyOnPaper.name, RandomizedMassOnlyOnPaper, replace=True)
    try:
        report = run_parity(RandomizedMassOnlyOnPaper.name, "cartpole", tiers=["randomized"])
        honest = run_parity("mujoco", "cartpole", tiers=["randomized"])
    finally:
        unregister_backend(RandomizedMassOnlyOnPaper.name)
    rows = {r.quantity: r for r in report.rows if r.tier == "randomized"}
    assert rows["env_body_mass"].passed  # it reports the randomized masses...
    assert not all(r.passed for q, r in rows.items() if q.startswith("dof_pos"))  # ...but does not simulate them
    assert all(r.passed for r in honest.rows) and any(r.quantity == "dof_pos[hinge]" for r in honest.rows)
