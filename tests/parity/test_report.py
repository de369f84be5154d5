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


# ----------------------------------------------------------------------
# known differences: what an engine declares it cannot hold as compiled
# ----------------------------------------------------------------------
#: an arm whose last link carries two massless bodies, as real arms do (i2rt YAM's `camera_frame`): a frame
#: holding only a site, and an explicit zero inertial; MuJoCo compiles both to mass 0 and inertia 0
MASSLESS_ARM = """<mujoco model="massless_arm">
  <compiler angle="radian"/>
  <option timestep="0.002"/>
  <worldbody>
    <body name="base" pos="0 0 0.1">
      <geom type="cylinder" size="0.05 0.05" mass="2"/>
      <body name="link1" pos="0 0 0.1">
        <joint name="j1" type="hinge" axis="0 0 1" range="-2 2" damping="0.5"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.3" size="0.03" mass="1"/>
        <body name="link2" pos="0 0 0.3">
          <joint name="j2" type="hinge" axis="0 1 0" range="-2 2" damping="0.5"/>
          <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025" mass="0.5"/>
          <site name="ee" pos="0.25 0 0"/>
          <body name="camera_frame" pos="0.2 0 0.05" quat="0.7071068 0 0.7071068 0">
            <site name="camera"/>
          </body>
          <body name="flange" pos="0.25 0 0">
            <inertial pos="0 0 0" mass="0" diaginertia="0 0 0"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m1" joint="j1" ctrlrange="-1 1"/>
    <motor name="m2" joint="j2" ctrlrange="-1 1"/>
  </actuator>
</mujoco>"""
MASSLESS = ("camera_frame", "flange")
#: what PhysX gives a massless body (the sapien backend's plan.MIN_MASS, MIN_INERTIA)
SUBSTITUTE_MASS, SUBSTITUTE_INERTIA = 1e-6, 1e-9


@pytest.fixture
def massless_arm(tmp_path):
    path = tmp_path / "massless_arm.xml"
    path.write_text(MASSLESS_ARM)
    return str(path)


def _massless_engine(name, held, declared=MASSLESS, declared_ids=None):
    """MuJoCo holding the body masses ``held`` (with a 1e-9 kg m^2 inertia where it raises a massless one) and
    declaring the substitute mass and inertia of the bodies ``declared`` as known differences."""

    class Engine(MuJoCoEngine):
        def model_fields(self):
            fields = super().model_fields()
            for body, mass in held.items():
                b = self.info.body_names.index(body)
                if fields["body_mass"][b] == 0:
                    fields["body_inertia"][b] = SUBSTITUTE_INERTIA * np.eye(3)
                fields["body_mass"][b] = mass
            return fields

        @property
        def capabilities(self):
            from dataclasses import replace

            from simbackend.capabilities import KnownDifference

            ids = declared_ids or tuple(self.info.body_names.index(b) for b in declared)
            eye = tuple(tuple(SUBSTITUTE_INERTIA * float(i == j) for j in range(3)) for i in range(3))
            known = (
                KnownDifference("body_mass", ids, declared, (SUBSTITUTE_MASS,) * len(ids), "massless in MuJoCo"),
                KnownDifference("body_inertia", ids, declared, (eye,) * len(ids), "no inertia in MuJoCo"),
            )
            return replace(super().capabilities, known_differences=known)

    Engine.name = name
    return Engine


def test_a_declared_difference_is_known_not_failed(registered, massless_arm):
    """An engine that holds 1e-6 kg for MuJoCo's massless bodies and declares it: the two model rows say KNOWN
    (passed, naming the bodies and the declaration), every other row passes, and the report and its JSON say
    what was declared; the same engine without the declaration fails those rows, as before."""
    held = dict.fromkeys(MASSLESS, SUBSTITUTE_MASS)
    report = run_parity(registered(_massless_engine("parity-declared", held)), massless_arm, tiers=["model"])
    assert report.passed, report.summary()
    assert [(r.quantity, r.status) for r in report.known_rows] == [("body_mass", "KNOWN"), ("body_inertia", "KNOWN")]
    mass = report.row("model", "body_mass")
    assert mass.known == "body_mass of 'camera_frame', 'flange': massless in MuJoCo"
    assert mass.max_error == 0 and mass.known_error == pytest.approx(1e-3)  # 1e-6 kg against the 1 g floor
    assert "bodies 'camera_frame', 'flange'" in mass.detail and "declared 1e-06" in mass.detail
    assert "'link2'" not in mass.detail + mass.known
    assert all(r.status == "pass" for r in report.rows if r.quantity not in ("body_mass", "body_inertia"))
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["passed"] is True
    assert [d["names"] for d in data["known_differences"]] == [list(MASSLESS)] * 2
    assert data["known_differences"][0]["values"] == [SUBSTITUTE_MASS] * 2
    assert {r["quantity"] for r in data["rows"] if r["status"] == "KNOWN"} == {"body_mass", "body_inertia"}
    assert "2 row(s) KNOWN (model/body_mass, model/body_inertia)" in report.summary()

    class Undeclared(_massless_engine("parity-undeclared", held)):
        @property
        def capabilities(self):
            return MuJoCoEngine.capabilities.fget(self)

    plain = run_parity(registered(Undeclared), massless_arm, tiers=["model"])
    assert [(r.quantity, r.status) for r in plain.failures] == [("body_mass", "FAIL"), ("body_inertia", "FAIL")]


@pytest.mark.parametrize(
    ("held", "declared", "failing", "named"),
    [
        # a real mass difference on another body of the same row
        (
            {"camera_frame": 1e-6, "flange": 1e-6, "link2": 0.75},
            MASSLESS,
            ["body_mass"],
            "'link2': 0.75 vs reference 0.5",
        ),
        # the massless body holds more than the declared substitute
        (
            {"camera_frame": 3e-6, "flange": 1e-6},
            MASSLESS,
            ["body_mass"],
            "'camera_frame': 3e-06 vs reference 0, declared 1e-06",
        ),
        # a body the engine did not declare
        ({"camera_frame": 1e-6, "flange": 1e-6}, ("flange",), ["body_mass", "body_inertia"], "'camera_frame'"),
    ],
    ids=["another-body", "beyond-the-declared-value", "undeclared-body"],
)
def test_a_known_difference_excuses_only_its_elements_within_its_values(
    registered, massless_arm, held, declared, failing, named
):
    """Exactly the declared elements, within the declared values, are excused: a real difference on another
    body, a massless body off its declared substitute, or an undeclared body still FAIL, naming the body."""
    report = run_parity(registered(_massless_engine("parity-partly", held, declared)), massless_arm, tiers=["model"])
    assert [r.quantity for r in report.failures] == failing, report.summary()
    assert named in report.row("model", failing[0]).detail
    if "body_inertia" not in failing:  # only the mass is off: the inertia row is still a known difference
        assert report.row("model", "body_inertia").status == "KNOWN"


def test_a_declaration_the_reference_contradicts_fails(registered, massless_arm):
    """A declaration naming an element under another element's id excuses nothing and is itself a failed row."""
    sim = registered(_massless_engine("parity-misdeclared", {"camera_frame": 1e-6}, ("link2",), declared_ids=(4,)))
    report = run_parity(sim, massless_arm, tiers=["model"])
    bad = report.row("model", "known_differences")
    assert (
        bad.status == "FAIL" and "body 'link2' declared as id 4, the reference has 'camera_frame' there" in bad.detail
    )
    assert report.row("model", "body_mass").status == "FAIL" and not report.known_rows


def _sapien():
    """Skip where the sapien backend is not installed."""
    pytest.importorskip("sapien")
    from simbackend.backends.sapien.backend import SapienEngine

    return SapienEngine


def test_sapien_declares_massless_bodies_and_parity_reports_them_known(massless_arm):
    """PhysX needs mass: the sapien backend gives MuJoCo's massless bodies 1e-6 kg and 1e-9 kg m^2, declares
    exactly those bodies (capabilities.known_differences, lines of notes), and parity reports the two model
    rows KNOWN, for them only, and nothing failed. The 2e-6 kg added to the last link moves nothing measurable:
    kinematics and Jacobians do not depend on mass, and the 1 s rollouts agree within 5e-6 rad (mass matrix
    1.3e-5 relative to MuJoCo's)."""
    _sapien()
    from simbackend.registry import make_backend

    with make_backend("sapien", massless_arm, 1) as sim:
        known = sim.capabilities.known_differences
        notes = sim.notes
    assert [(d.quantity, d.names, d.ids) for d in known] == [
        ("body_mass", MASSLESS, (4, 5)),
        ("body_inertia", MASSLESS, (4, 5)),
    ]
    assert known[0].values == (SUBSTITUTE_MASS, SUBSTITUTE_MASS)
    assert any("'camera_frame', 'flange'" in n and "1e-06 kg in PhysX" in n for n in notes), notes
    report = run_parity("sapien", massless_arm, tiers=[*parity.STATIC_TIERS, "dynamics"], num_envs=16)
    assert report.passed, report.summary()
    assert [(r.quantity, r.status) for r in report.known_rows] == [("body_mass", "KNOWN"), ("body_inertia", "KNOWN")]
    for row in report.known_rows:
        assert row.known == known[0 if row.quantity == "body_mass" else 1].text
        assert "'link" not in row.known and "'base'" not in row.known
        assert row.known_error == pytest.approx(1e-3, rel=1e-6) and row.max_error <= row.tolerance
    assert all(r.status == "pass" for r in report.rows if r.tier != "model" or r not in report.known_rows)
    assert max(r.max_error for r in report.tier_rows("dynamics")) < 1e-5


@pytest.mark.parametrize(
    ("body", "mass", "named"),
    [("link2", 0.75, "body 'link2': 0.75 vs reference 0.5"), ("camera_frame", 3e-6, "declared 1e-06")],
    ids=["real-difference", "beyond-the-substitute"],
)
def test_sapien_real_mass_difference_still_fails(registered, massless_arm, body, mass, named):
    """On PhysX too the declaration excuses nothing else: a link whose mass PhysX reports otherwise, or a massless
    body holding more than the declared 1e-6 kg, fails the mass row, naming it (the inertia row stays KNOWN)."""

    class Heavier(_sapien()):
        name = f"parity-sapien-{body}"

        def model_fields(self):
            fields = super().model_fields()
            fields["body_mass"][self.info.body_names.index(body)] = mass
            return fields

    report = run_parity(registered(Heavier), massless_arm, tiers=["model"])
    assert [(r.quantity, r.status) for r in report.failures] == [("body_mass", "FAIL")], report.summary()
    assert named in report.row("model", "body_mass").detail
    assert report.row("model", "body_inertia").status == "KNOWN"


def test_cli_parity_shows_the_known_difference_and_exits_0(massless_arm):
    """`simbackend parity --sim sapien --model FILE` prints the two rows KNOWN with the declaration naming the
    massless bodies, says PASSED, and exits 0 (it exited 1 on these rows before)."""
    _sapien()
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    result = CliRunner().invoke(
        app, ["parity", "--sim", "sapien", "--model", massless_arm, "-n", "8"], env={"COLUMNS": "250"}
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert out.count("KNOWN") >= 3 and "FAIL" not in out  # two rows, and the note under the table
    assert "2 row(s) KNOWN (model/body_mass, model/body_inertia)" in out
    assert "body_mass of 'camera_frame', 'flange': massless in MuJoCo" in out
    assert "PASSED" in out and "2 of them KNOWN" in out
