"""The built-in MJCF models: structure, stability, and agreement with the
hand-written analytic kinematics in :mod:`simbackend.models.analytic`.

This file talks to MuJoCo directly (it checks the assets themselves, not a
backend).
"""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

from simbackend.models import analytic as an

ASSETS = Path(an.__file__).resolve().parent / "assets"
MODELS = ("pendulum", "double_pendulum", "cartpole", "arm7", "quadruped", "box_drop")

#: The warnings that mean the integration went bad.
BAD_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQACC,
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
)

#: Names each model must define, by object type.
EXPECTED_NAMES = {
    "pendulum": {
        "body": ["pendulum"],
        "joint": ["hinge"],
        "site": ["tip"],
        "actuator": ["hinge_motor"],
        "sensor": ["hinge_pos", "hinge_vel", "tip_pos"],
    },
    "double_pendulum": {
        "body": ["upper_link", "lower_link"],
        "joint": ["shoulder", "elbow"],
        "site": ["elbow", "tip"],
        "actuator": ["shoulder_motor", "elbow_motor"],
        "sensor": ["shoulder_pos", "elbow_pos", "shoulder_vel", "elbow_vel", "tip_pos"],
    },
    "cartpole": {
        "body": ["cart", "pole"],
        "joint": ["slider", "hinge"],
        "site": ["tip"],
        "actuator": ["slide_motor"],
        "sensor": ["slider_pos", "hinge_pos", "tip_pos"],
    },
    "arm7": {
        "body": ["base"] + [f"link{k}" for k in range(1, 8)] + ["cube"],
        "joint": [f"joint{k}" for k in range(1, 8)] + ["cube_free"],
        "site": ["ee_site"],
        "actuator": [f"act{k}" for k in range(1, 8)],
        "sensor": ["joint1_pos", "ee_pos", "ee_quat", "ee_linvel", "ee_angvel", "ee_gyro"],
        "geom": ["floor", "table_top", "cube_geom"],
        "key": ["home"],
    },
    "quadruped": {
        "body": ["torso"] + [f"{leg}_{p}_link" for leg in an.QUADRUPED_LEGS for p in ("hip", "thigh", "calf")],
        "joint": ["root"] + [f"{leg}_{p}" for leg in an.QUADRUPED_LEGS for p in ("hip", "thigh", "calf")],
        "site": ["imu"] + [f"{leg}_foot_site" for leg in an.QUADRUPED_LEGS],
        "actuator": [f"{leg}_{p}_motor" for leg in an.QUADRUPED_LEGS for p in ("hip", "thigh", "calf")],
        "sensor": ["imu_quat", "imu_gyro", "imu_vel", "imu_pos"],
        "geom": ["floor"] + [f"{leg}_foot" for leg in an.QUADRUPED_LEGS],
        "key": ["stand"],
    },
    "box_drop": {
        "body": ["box"],
        "joint": ["box_free"],
        "site": ["box_site"],
        "sensor": ["box_pos"],
        "geom": ["floor", "box_geom"],
    },
}

_OBJ = {
    "body": mujoco.mjtObj.mjOBJ_BODY,
    "joint": mujoco.mjtObj.mjOBJ_JOINT,
    "site": mujoco.mjtObj.mjOBJ_SITE,
    "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
    "sensor": mujoco.mjtObj.mjOBJ_SENSOR,
    "geom": mujoco.mjtObj.mjOBJ_GEOM,
    "key": mujoco.mjtObj.mjOBJ_KEY,
}

_ALLOWED_GEOMS = {
    mujoco.mjtGeom.mjGEOM_PLANE,
    mujoco.mjtGeom.mjGEOM_BOX,
    mujoco.mjtGeom.mjGEOM_SPHERE,
    mujoco.mjtGeom.mjGEOM_CAPSULE,
    mujoco.mjtGeom.mjGEOM_CYLINDER,
}
_ALLOWED_JOINTS = {mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE, mujoco.mjtJoint.mjJNT_FREE}
_ALLOWED_SENSORS = {
    mujoco.mjtSensor.mjSENS_JOINTPOS,
    mujoco.mjtSensor.mjSENS_JOINTVEL,
    mujoco.mjtSensor.mjSENS_FRAMEPOS,
    mujoco.mjtSensor.mjSENS_FRAMEQUAT,
    mujoco.mjtSensor.mjSENS_FRAMELINVEL,
    mujoco.mjtSensor.mjSENS_FRAMEANGVEL,
    mujoco.mjtSensor.mjSENS_GYRO,
    mujoco.mjtSensor.mjSENS_VELOCIMETER,
}

_CACHE: dict[str, mujoco.MjModel] = {}


def load(name: str) -> mujoco.MjModel:
    if name not in _CACHE:
        _CACHE[name] = mujoco.MjModel.from_xml_path(str(ASSETS / f"{name}.xml"))
    return _CACHE[name]


def fresh(name: str) -> mujoco.MjModel:
    """An uncached copy, for tests that change options."""
    return mujoco.MjModel.from_xml_path(str(ASSETS / f"{name}.xml"))


def assert_no_bad_warnings(d: mujoco.MjData) -> None:
    for w in BAD_WARNINGS:
        assert d.warning[w].number == 0, f"MuJoCo warning {w.name}"


def random_qpos(m: mujoco.MjModel, rng: np.random.Generator) -> np.ndarray:
    """qpos with every hinge/slide uniform in its range ([-pi, pi] if unlimited);
    free joints keep qpos0's position and get a random unit quaternion."""
    q = m.qpos0.copy()
    for j in range(m.njnt):
        adr = m.jnt_qposadr[j]
        t = m.jnt_type[j]
        if t == mujoco.mjtJoint.mjJNT_FREE:
            quat = rng.normal(size=4)
            q[adr + 3 : adr + 7] = quat / np.linalg.norm(quat)
        elif m.jnt_limited[j]:
            q[adr] = rng.uniform(*m.jnt_range[j])
        else:
            q[adr] = rng.uniform(-math.pi, math.pi)
    return q


def same_quat(a, b, tol: float) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return min(np.abs(a - b).max(), np.abs(a + b).max()) < tol


# --------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_compiles_and_names_exist(name):
    m = load(name)
    for kind, names in EXPECTED_NAMES[name].items():
        for n in names:
            assert mujoco.mj_name2id(m, _OBJ[kind], n) >= 0, f"{name}: missing {kind} {n!r}"


@pytest.mark.parametrize("name", MODELS)
def test_portable_subset(name):
    """Only what a second engine can build: primitive geoms, hinge/slide/free
    joints, joint-transmission motor/position/velocity actuators with limits,
    a small sensor set, and explicit gravity."""
    m = load(name)
    assert set(int(t) for t in m.geom_type) <= set(int(t) for t in _ALLOWED_GEOMS)
    assert set(int(t) for t in m.jnt_type) <= set(int(t) for t in _ALLOWED_JOINTS)
    assert set(int(t) for t in m.sensor_type) <= set(int(t) for t in _ALLOWED_SENSORS)
    np.testing.assert_allclose(m.opt.gravity, [0.0, 0.0, -an.GRAVITY])
    assert m.nmesh == 0 and m.nhfield == 0 and m.ntendon == 0 and m.neq == 0
    for a in range(m.nu):
        assert m.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
        assert m.actuator_ctrllimited[a]
        assert m.actuator_dyntype[a] == mujoco.mjtDyn.mjDYN_NONE
    # every named object type has unique, non-empty names
    for kind, count in (
        ("body", m.nbody),
        ("joint", m.njnt),
        ("site", m.nsite),
        ("actuator", m.nu),
        ("sensor", m.nsensor),
    ):
        start = 1 if kind == "body" else 0  # the world body is unnamed
        names = [mujoco.mj_id2name(m, _OBJ[kind], i) for i in range(start, count)]
        assert all(names), f"{name}: unnamed {kind}"
        assert len(set(names)) == len(names), f"{name}: duplicate {kind} names"
    # masses are well defined (explicit inertials)
    assert np.all(m.body_mass[1:] > 0)


def test_base_bodies():
    """The first kinematic tree's root: arm7 -> fixed "base", quadruped -> floating "torso"."""
    arm = load("arm7")
    first = [b for b in range(1, arm.nbody) if arm.body_parentid[b] == 0][0]
    assert arm.body(first).name == "base"
    assert arm.body_jntnum[first] == 0
    quad = load("quadruped")
    first = [b for b in range(1, quad.nbody) if quad.body_parentid[b] == 0][0]
    assert quad.body(first).name == "torso"
    assert quad.jnt_type[quad.body_jntadr[first]] == mujoco.mjtJoint.mjJNT_FREE


# --------------------------------------------------------------------------
# Stability
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("control", ["zero", "random"])
def test_simulates_5s(name, control):
    m = load(name)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(1234)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    for i in range(int(round(5.0 / m.opt.timestep))):
        if control == "random" and i % 25 == 0:
            d.ctrl[:] = rng.uniform(lo, hi)
        mujoco.mj_step(m, d)
    assert np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()
    assert_no_bad_warnings(d)
    # ... and no other warning either (contact/constraint buffers, inertia, ...)
    counts = {mujoco.mjtWarning(i).name: int(d.warning[i].number) for i in range(len(d.warning))}
    assert not any(counts.values()), counts


@pytest.mark.parametrize("name", ["arm7", "quadruped"])
def test_keyframe_simulates(name):
    m = load(name)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_step(m, d, int(round(5.0 / m.opt.timestep)))
    assert np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()
    assert_no_bad_warnings(d)


# --------------------------------------------------------------------------
# Analytic kinematics
# --------------------------------------------------------------------------

N_RANDOM = 20
TOL = 1e-9


def _kinematics(m, q):
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    return d


def test_pendulum_fk():
    m = load("pendulum")
    tip = m.site("tip").id
    rng = np.random.default_rng(0)
    for _ in range(N_RANDOM):
        q = random_qpos(m, rng)
        d = _kinematics(m, q)
        np.testing.assert_allclose(d.site_xpos[tip], an.pendulum_tip(q[0]), atol=TOL, rtol=0)
    # constants agree with the model
    assert m.body_mass[m.body("pendulum").id] == pytest.approx(an.PENDULUM_MASS)
    np.testing.assert_allclose(m.body_pos[m.body("pendulum").id], an.PENDULUM_PIVOT)
    np.testing.assert_allclose(m.body_ipos[m.body("pendulum").id], [0, 0, -an.PENDULUM_LENGTH])


def test_double_pendulum_fk():
    m = load("double_pendulum")
    tip, elbow = m.site("tip").id, m.site("elbow").id
    rng = np.random.default_rng(1)
    for _ in range(N_RANDOM):
        q = random_qpos(m, rng)
        d = _kinematics(m, q)
        np.testing.assert_allclose(d.site_xpos[elbow], an.double_pendulum_elbow(q[0]), atol=TOL, rtol=0)
        np.testing.assert_allclose(d.site_xpos[tip], an.double_pendulum_tip(q[0], q[1]), atol=TOL, rtol=0)


def test_cartpole_fk():
    m = load("cartpole")
    tip = m.site("tip").id
    rng = np.random.default_rng(2)
    for _ in range(N_RANDOM):
        q = random_qpos(m, rng)
        d = _kinematics(m, q)
        np.testing.assert_allclose(d.site_xpos[tip], an.cartpole_tip(q[0], q[1]), atol=TOL, rtol=0)
    np.testing.assert_allclose(m.jnt_range[m.joint("slider").id], an.CARTPOLE_SLIDER_RANGE)
    assert m.actuator_gear[0, 0] == pytest.approx(an.CARTPOLE_GEAR)


def test_arm7_fk():
    m = load("arm7")
    ee = m.site("ee_site").id
    links = [m.body(f"link{k}").id for k in range(1, 8)]
    rng = np.random.default_rng(3)
    for _ in range(N_RANDOM):
        q = random_qpos(m, rng)
        d = _kinematics(m, q)
        pos, quat = an.arm7_ee_pose(q[:7])
        np.testing.assert_allclose(d.site_xpos[ee], pos, atol=TOL, rtol=0)
        np.testing.assert_allclose(d.site_xmat[ee].reshape(3, 3), an.quat_to_matrix(quat), atol=TOL, rtol=0)
        np.testing.assert_allclose(an.arm7_ee_transform(q[:7])[:3, :3], an.quat_to_matrix(quat), atol=TOL, rtol=0)
        mj_quat = np.zeros(4)
        mujoco.mju_mat2Quat(mj_quat, d.site_xmat[ee])
        assert same_quat(mj_quat, quat, 1e-8)
        assert same_quat(an.matrix_to_quat(d.site_xmat[ee].reshape(3, 3)), quat, 1e-8)
        for k, b in enumerate(links, start=1):
            bpos, bquat = an.arm7_body_pose(q[:7], k)
            np.testing.assert_allclose(d.xpos[b], bpos, atol=TOL, rtol=0)
            assert same_quat(d.xquat[b], bquat, TOL)
        np.testing.assert_allclose(d.xpos[m.body("base").id], an.arm7_body_origin(q[:7], 0), atol=TOL, rtol=0)


def test_arm7_jacobian():
    """The analytic Jacobian matches MuJoCo's, and the site's differs from link7's origin's."""
    m = load("arm7")
    ee, link7 = m.site("ee_site").id, m.body("link7").id
    rng = np.random.default_rng(4)
    for _ in range(5):
        q = random_qpos(m, rng)
        d = _kinematics(m, q)
        mujoco.mj_comPos(m, d)
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jacp, jacr, ee)
        J = an.arm7_jacobian(q[:7])
        np.testing.assert_allclose(jacp[:, :7], J[:3], atol=TOL, rtol=0)
        np.testing.assert_allclose(jacr[:, :7], J[3:], atol=TOL, rtol=0)
        assert np.all(jacp[:, 7:] == 0) and np.all(jacr[:, 7:] == 0)
        bjacp = np.zeros((3, m.nv))
        mujoco.mj_jacBody(m, d, bjacp, None, link7)
        Jb = an.arm7_jacobian(q[:7], point=an.arm7_body_origin(q[:7], 7))
        np.testing.assert_allclose(bjacp[:, :7], Jb[:3], atol=TOL, rtol=0)
        assert np.abs(bjacp - jacp).max() > 1e-2


def test_arm7_constants_match_model():
    m = load("arm7")
    key = m.key("home")
    np.testing.assert_allclose(key.qpos[:7], an.ARM7_HOME)
    np.testing.assert_allclose(key.ctrl, an.ARM7_HOME)
    np.testing.assert_allclose(key.qpos[7:10], an.ARM7_CUBE_POS)
    np.testing.assert_allclose(m.qpos0[7:10], an.ARM7_CUBE_POS)
    for k in range(7):
        j = m.joint(f"joint{k + 1}").id
        a = m.actuator(f"act{k + 1}").id
        np.testing.assert_allclose(m.jnt_range[j], an.ARM7_JOINT_RANGES[k])
        np.testing.assert_allclose(m.actuator_ctrlrange[a], an.ARM7_JOINT_RANGES[k])
        assert m.actuator_gainprm[a, 0] == pytest.approx(an.ARM7_KP[k])
        assert m.actuator_forcelimited[a]
    cube = m.body("cube").id
    assert m.body_mass[cube] == pytest.approx(an.ARM7_CUBE_MASS)
    np.testing.assert_allclose(m.geom_size[m.geom("cube_geom").id], [an.ARM7_CUBE_HALF_SIZE] * 3)
    top = m.geom("table_top").id
    assert m.geom_pos[top][2] + m.geom_size[top][2] == pytest.approx(an.ARM7_TABLE_HEIGHT)
    assert an.ARM7_CUBE_POS[2] == pytest.approx(an.ARM7_TABLE_HEIGHT + an.ARM7_CUBE_HALF_SIZE)


def test_quadruped_fk():
    m = load("quadruped")
    rng = np.random.default_rng(5)
    for _ in range(N_RANDOM):
        q = random_qpos(m, rng)
        q[:3] = rng.uniform(-1, 1, size=3)
        d = _kinematics(m, q)
        for leg in an.QUADRUPED_LEGS:
            np.testing.assert_allclose(
                d.site_xpos[m.site(f"{leg}_foot_site").id], an.quadruped_foot_pos(q, leg), atol=TOL, rtol=0
            )
    np.testing.assert_allclose(m.key("stand").qpos, an.QUADRUPED_STAND_QPOS)


# --------------------------------------------------------------------------
# Dynamics
# --------------------------------------------------------------------------


def test_pendulum_small_angle_period():
    m = fresh("pendulum")
    m.opt.timestep = 2e-4
    d = mujoco.MjData(m)
    d.qpos[0] = 0.01
    mujoco.mj_forward(m, d)
    T0 = an.pendulum_small_angle_period(an.GRAVITY)
    crossings = []
    prev_t, prev_q = d.time, d.qpos[0]
    while len(crossings) < 7 and d.time < 5 * T0:
        mujoco.mj_step(m, d)
        t, q = d.time, d.qpos[0]
        if prev_q > 0 >= q or prev_q < 0 <= q:
            crossings.append(prev_t + (t - prev_t) * prev_q / (prev_q - q))  # linear interpolation
        prev_t, prev_q = t, q
    assert len(crossings) == 7
    period = (crossings[-1] - crossings[0]) / 3.0  # 7 zero crossings = 3 full periods
    assert abs(period - T0) / T0 < 5e-3, (period, T0)
    # amplitude is conserved (no damping)
    assert abs(d.qpos[0]) <= 0.0101


def test_pendulum_tip_sensor():
    m = load("pendulum")
    d = mujoco.MjData(m)
    d.qpos[0] = 0.3
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.sensor("tip_pos").data, an.pendulum_tip(0.3), atol=TOL)
    assert d.sensor("hinge_pos").data[0] == pytest.approx(0.3)


def test_arm7_holds_home_and_cube_rests():
    m = load("arm7")
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    np.testing.assert_allclose(d.ctrl, an.ARM7_HOME)
    cube_adr = m.jnt_qposadr[m.joint("cube_free").id]
    cube0 = d.qpos[cube_adr : cube_adr + 3].copy()
    mujoco.mj_forward(m, d)
    # at home only the cube touches the table (no arm self- or arm-table contact)
    cube_geom, top = m.geom("cube_geom").id, m.geom("table_top").id
    assert d.ncon > 0
    for c in d.contact[: d.ncon]:
        assert {c.geom1, c.geom2} == {cube_geom, top}
    n1 = int(round(1.0 / m.opt.timestep))
    mujoco.mj_step(m, d, n1)
    cube1 = d.qpos[cube_adr : cube_adr + 3]
    assert abs(cube1[2] - cube0[2]) < 1e-3
    assert np.abs(cube1[:2] - cube0[:2]).max() < 1e-3
    mujoco.mj_step(m, d, n1)
    assert np.abs(d.qpos[:7] - an.ARM7_HOME).max() < 2e-3
    assert np.abs(d.qvel[:7]).max() < 1e-3
    assert_no_bad_warnings(d)
    # ee sensors agree with the analytic pose
    mujoco.mj_forward(m, d)
    pos, quat = an.arm7_ee_pose(d.qpos[:7])
    np.testing.assert_allclose(d.sensor("ee_pos").data, pos, atol=1e-9)
    assert same_quat(d.sensor("ee_quat").data, quat, 1e-8)


def test_arm7_zero_config_contacts():
    """At qpos0 (arm upright) the only contacts are the cube's on the table."""
    m = load("arm7")
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    cube_geom, top = m.geom("cube_geom").id, m.geom("table_top").id
    for c in d.contact[: d.ncon]:
        assert {c.geom1, c.geom2} == {cube_geom, top}


def test_quadruped_stays_on_floor():
    m = load("quadruped")
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("stand").id)
    mujoco.mj_forward(m, d)
    # keyframe: feet just above the floor
    feet_z = [d.site_xpos[m.site(f"{leg}_foot_site").id][2] for leg in an.QUADRUPED_LEGS]
    assert all(an.QUADRUPED_FOOT_RADIUS < z < an.QUADRUPED_FOOT_RADIUS + 0.01 for z in feet_z)
    for _ in range(int(round(5.0 / m.opt.timestep))):
        mujoco.mj_step(m, d)
        assert d.qpos[2] > 0.0  # the torso never goes through the floor
    assert np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()
    assert_no_bad_warnings(d)
    assert d.qpos[2] < 0.5 and np.abs(d.qvel).max() < 1.0  # collapsed and at rest on the floor


def test_box_drop_lands_and_rests_on_the_plane():
    """The box falls 5 cm, stops, and rests flat with MuJoCo's small default penetration (< 1 mm)."""
    m = load("box_drop")
    d = mujoco.MjData(m)
    assert d.qpos[2] == pytest.approx(0.15)
    assert m.body_mass[m.body("box").id] == pytest.approx(1.0)
    mujoco.mj_step(m, d, int(round(1.0 / m.opt.timestep)))
    assert np.abs(d.qvel).max() < 1e-6
    assert 0.099 < d.qpos[2] < 0.1  # half size 0.1, slightly into the plane
    assert same_quat(d.qpos[3:7], [1, 0, 0, 0], 1e-6)
