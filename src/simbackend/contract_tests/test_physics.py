"""Conformance: the physics behind ``step`` — gravity, oscillation, actuators,
ctrl timing and clamping, body forces, divergence reporting and the step info.

Talks only to the contract (and to the numpy-only ground truth of the built-in
models in ``simbackend.models.analytic``). Every expected value is derived from
Newton's laws and the model's published parameters, not from an engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import random_unit_quat, to_np
from simbackend.models import analytic

# ----------------------------------------------------------------------------
# helpers (contract only)
# ----------------------------------------------------------------------------

#: where a free body is put for free-flight tests: far from the arm and table, high above the floor
FLIGHT_POS = np.array([2.0, 2.0, 3.0])


def _gravity(sim: Any) -> np.ndarray:
    return to_np(sim.get_env_gravity())[0]


def _body_id(sim: Any, name: str) -> int:
    return int(sim.get_body_ids(name)[0])


def _free_qpos_cols(sim: Any, joint: str) -> int:
    """First qpos column of free joint ``joint`` (pos(3) + quat(4))."""
    j = int(sim.get_joint_ids(joint)[0])
    return int(sim.info.joint_qposadr[j])


def _free_qvel_cols(sim: Any, joint: str) -> int:
    j = int(sim.get_joint_ids(joint)[0])
    return int(sim.info.joint_dofadr[j])


def _arm7_home(sim: Any) -> np.ndarray:
    """arm7 keyframe "home" (arm pose, cube on the table) for every env, (N, nq)."""
    return np.tile(to_np(sim.get_keyframe_qpos("home")), (sim.num_envs, 1))


def _arm7_hold_ctrl(sim: Any, qpos: np.ndarray) -> np.ndarray:
    """Position targets equal to the arm joints of ``qpos`` (N, nu)."""
    cols = to_np(sim.get_joint_qpos_indices([f"joint{i}" for i in range(1, 8)])).astype(int)
    order = to_np(sim.get_actuator_ids([f"act{i}" for i in range(1, 8)])).astype(int)
    ctrl = np.zeros((qpos.shape[0], sim.num_actuators))
    ctrl[:, order] = qpos[:, cols]
    return ctrl


def _arm7_cube_in_flight(sim: Any, quats: np.ndarray | None = None) -> np.ndarray:
    """qpos (N, nq): arm at home, cube at rest high in the air at FLIGHT_POS (optionally rotated)."""
    qpos = _arm7_home(sim)
    c = _free_qpos_cols(sim, "cube_free")
    qpos[:, c : c + 3] = FLIGHT_POS
    qpos[:, c + 3 : c + 7] = [1.0, 0.0, 0.0, 0.0] if quats is None else quats
    return qpos


def _state(sim: Any) -> tuple[np.ndarray, np.ndarray]:
    return to_np(sim.get_qpos()), to_np(sim.get_qvel())


def _pendulum_at(sim: Any, theta: float, omega: float = 0.0) -> None:
    n = sim.num_envs
    sim.set_state(None, np.full((n, sim.nq), theta), np.full((n, sim.nv), omega))


# ----------------------------------------------------------------------------
# gravity and free flight
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model,body", [("arm7", "cube"), ("quadruped", "torso")], ids=["arm7-cube", "quadruped-torso"])
def test_free_fall(make_sim: Callable[..., Any], model: str, body: str) -> None:
    """Clause: physics — a free body in free fall follows z0 - g t^2/2 (within 1e-3 m after 0.5 s) and v = -g t.

    The body is lifted far above every other geom with zero velocity and
    stepped for round(0.5 / physics_dt) substeps with controls that hold still.
    A first-order integrator with step dt lands within g t dt / 2 of the
    continuous solution (semi-implicit Euler below it, explicit Euler above),
    so that bound is added to the 1e-3 m tolerance; the velocity of a constant
    acceleration is exact for any integrator.
    """
    sim = make_sim(model, 2)
    g = _gravity(sim)
    assert np.allclose(g[:2], 0.0) and g[2] < 0, f"gravity must point along -Z, got {g}"
    if model == "arm7":
        qpos = _arm7_cube_in_flight(sim)
        ctrl = _arm7_hold_ctrl(sim, qpos)
        root = _free_qpos_cols(sim, "cube_free")
    else:
        qpos = np.tile(to_np(sim.get_keyframe_qpos("stand")), (sim.num_envs, 1))
        root = _free_qpos_cols(sim, "root")
        ctrl = np.zeros((sim.num_envs, sim.num_actuators))
    qpos[:, root : root + 3] = FLIGHT_POS
    qpos[1, root + 2] += 0.5  # a second height, to tell envs apart
    sim.set_state(None, qpos, np.zeros((sim.num_envs, sim.nv)))
    bid = _body_id(sim, body)
    p0 = to_np(sim.get_body_pos_w(bid))[:, 0]
    nsub = round(0.5 / sim.physics_dt)
    t = nsub * sim.physics_dt
    info = sim.step(ctrl, nsteps=nsub)
    assert not bool(info["diverged"].any())
    p = to_np(sim.get_body_pos_w(bid))[:, 0]
    v = to_np(sim.get_body_lin_vel_w(bid))[:, 0]
    expected = p0 + 0.5 * g * t * t
    tol = 1e-3 + abs(g[2]) * t * sim.physics_dt / 2
    assert np.abs(p - expected).max() <= tol, f"z after {t:.3f} s: {p[:, 2]}, expected {expected[:, 2]} (tol {tol:.2e})"
    np.testing.assert_allclose(p[:, :2], p0[:, :2], atol=1e-6, err_msg="free fall drifted horizontally")
    np.testing.assert_allclose(v, np.tile(g * t, (sim.num_envs, 1)), atol=1e-4, err_msg="free-fall velocity != g t")


FINE_FREE_BODY_MJCF = """
<mujoco model="fine_free_body">
  <option timestep="0.0002" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="ball" pos="0 0 10">
      <freejoint name="ball_free"/>
      <geom type="sphere" size="0.1" mass="2" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_free_fall_within_1mm_at_fine_timestep(make_sim: Callable[..., Any], tmp_path: Path) -> None:
    """Clause: physics — free fall matches z0 - g t^2/2 within 1e-3 m after 0.5 s, with no integrator allowance.

    At physics_dt = 2e-4 s a first-order integrator's bias g t dt / 2 is 0.5 mm,
    so the stated 1e-3 m holds as is for any correct engine.
    """
    path = tmp_path / "fine_free_body.xml"
    path.write_text(FINE_FREE_BODY_MJCF)
    sim = make_sim(path, 2)
    qpos = np.tile(to_np(sim.get_default_qpos()), (2, 1))
    qpos[1, 2] += 1.0
    sim.set_state(None, qpos)
    z0 = to_np(sim.get_base_pos())[:, 2]
    nsub = round(0.5 / sim.physics_dt)
    t = nsub * sim.physics_dt
    assert not bool(sim.step(None, nsteps=nsub)["diverged"].any())
    g = _gravity(sim)[2]
    z = to_np(sim.get_base_pos())[:, 2]
    np.testing.assert_allclose(z, z0 + 0.5 * g * t * t, atol=1e-3, rtol=0, err_msg="free fall after 0.5 s")


def test_disabled_gravity_is_not_applied(make_sim: Callable[..., Any], tmp_path: Path) -> None:
    """Clause: physics — a model that disables gravity (``<flag gravity="disable"/>``) keeps its
    ``<option gravity>`` out of the dynamics: a free body at rest stays at rest, and
    ``get_env_gravity`` reads zero."""
    path = tmp_path / "no_gravity.xml"
    path.write_text(
        FINE_FREE_BODY_MJCF.replace('gravity="0 0 -9.81"/>', 'gravity="0 0 -9.81"><flag gravity="disable"/></option>')
    )
    sim = make_sim(path, 2)
    z0 = to_np(sim.get_base_pos())[:, 2]
    assert not bool(sim.step(None, nsteps=500)["diverged"].any())
    np.testing.assert_allclose(to_np(sim.get_base_pos())[:, 2], z0, atol=1e-9, err_msg="the body fell without gravity")
    np.testing.assert_allclose(to_np(sim.get_env_gravity()), 0.0, atol=0, err_msg="gravity read while disabled")


# ----------------------------------------------------------------------------
# oscillation
# ----------------------------------------------------------------------------


def test_pendulum_small_angle_period(make_sim: Callable[..., Any]) -> None:
    """Clause: physics — the pendulum's small-angle period is within 1 % of 2 pi sqrt(L/g).

    Released from 0.02 rad at rest with zero torque and run for 1.6 periods;
    the period is measured between the first and third linearly interpolated
    zero crossings of the dof position (T/4 and 5T/4), sampled every ~5 ms:
    interpolation leaves an error of order 1e-5 of the period, so one full
    period tells a 1 % error as surely as three did, at less than half the
    simulated time (on MuJoCo Warp's CPU device, where every substep costs
    several milliseconds, that is most of this clause's cost). The amplitude
    must not grow by 2 % meanwhile.
    """
    sim = make_sim("pendulum", 1)
    g = float(np.linalg.norm(_gravity(sim)))
    period = analytic.pendulum_small_angle_period(g)
    _pendulum_at(sim, 0.02)
    ctrl = np.zeros((1, sim.num_actuators))
    chunk = max(1, round(0.005 / sim.physics_dt))  # sample every ~5 ms
    dt = chunk * sim.physics_dt
    nsamples = int(math.ceil(1.6 * period / dt))
    times = np.arange(nsamples + 1) * dt
    theta = np.empty(nsamples + 1)
    theta[0] = float(sim.get_dof_pos()[0, 0])
    for i in range(1, nsamples + 1):
        sim.step(ctrl, nsteps=chunk)
        theta[i] = float(sim.get_dof_pos()[0, 0])
    assert np.abs(theta).max() < 0.0204, "the amplitude grew by 2 %: energy is not conserved"
    s = np.sign(theta)
    idx = np.flatnonzero(s[:-1] * s[1:] < 0)
    crossings = times[idx] - theta[idx] * dt / (theta[idx + 1] - theta[idx])
    assert crossings.size >= 3, f"expected >= 3 zero crossings in {times[-1]:.2f} s, got {crossings.size}"
    half_periods = crossings.size - 1
    measured = 2 * (crossings[-1] - crossings[0]) / half_periods
    assert abs(measured - period) <= 0.01 * period, f"period {measured:.5f} s, analytic {period:.5f} s"


# ----------------------------------------------------------------------------
# actuators and ctrl
# ----------------------------------------------------------------------------

ARM7_OTHER_POSE = np.array([-0.4, 0.3, 0.5, -1.0, -0.3, 0.8, -0.6])


def test_position_actuator_settles(make_sim: Callable[..., Any]) -> None:
    """Clause: control — a position actuator (ctrl = target joint position) settles at its target.

    arm7 starts from its default configuration and holds ctrl = a pose inside
    the joint ranges for 2.5 s: every joint within 5e-3 rad of its target and
    at rest (|qvel| < 1e-2 rad/s). Two targets, one per env of the batch: the
    home keyframe's pose and another.
    """
    sim = make_sim("arm7", 2)
    joints = [f"joint{i}" for i in range(1, 8)]
    cols = to_np(sim.get_joint_dof_pos_indices(joints)).astype(int)
    home = to_np(sim.get_keyframe_qpos("home"))[to_np(sim.get_joint_qpos_indices(joints)).astype(int)]
    names = ("home", "other")
    goal = np.stack([home, ARM7_OTHER_POSE])  # env i holds target names[i]
    rng = to_np(sim.get_joint_range())[cols]
    assert ((goal > rng[:, 0]) & (goal < rng[:, 1])).all()
    qpos = np.tile(to_np(sim.get_default_qpos()), (sim.num_envs, 1))
    c = _free_qpos_cols(sim, "cube_free")
    qpos[:, c : c + 3] = [2.0, 2.0, 0.05]  # the cube rests on the floor, out of reach
    sim.set_state(None, qpos)
    gq = np.zeros((sim.num_envs, sim.nq))
    gq[:, to_np(sim.get_joint_qpos_indices(joints)).astype(int)] = goal
    ctrl = _arm7_hold_ctrl(sim, gq)
    info = sim.step(ctrl, nsteps=round(2.5 / sim.physics_dt))
    assert not bool(info["diverged"].any())
    pos = to_np(sim.get_dof_pos())[:, cols]
    vel = to_np(sim.get_dof_vel())[:, cols]
    for i, name in enumerate(names):
        err = np.abs(pos[i] - goal[i])
        assert err.max() < 5e-3, f"target {name}: joint errors after 2.5 s: {err} rad"
        assert np.abs(vel[i]).max() < 1e-2, f"target {name}: joints still moving: {np.abs(vel[i])} rad/s"


def test_ctrl_acts_in_the_same_substep(make_sim: Callable[..., Any]) -> None:
    """Clause: control — ctrl takes effect in the substep it is given (no one-substep delay).

    The pendulum hangs at rest at the bottom, where gravity exerts no torque;
    one substep with motor command u must give qvel = dt * u * gear / (m L^2)
    (gear 1 and L from the built-in pendulum, m from get_env_body_mass), in
    proportion to u. With a one-substep delay qvel would still be exactly 0.
    """
    sim = make_sim("pendulum", 3)
    dt = sim.physics_dt
    m = float(sim.get_env_body_mass()[0, _body_id(sim, "pendulum")])
    inertia = m * analytic.PENDULUM_LENGTH**2
    u = np.array([[0.5], [1.0], [-2.0]])
    _pendulum_at(sim, 0.0)
    sim.step(u, nsteps=1)
    qvel = to_np(sim.get_qvel())[:, 0]
    assert (np.abs(qvel) > 0).all(), f"ctrl had no effect in the first substep (qvel {qvel})"
    np.testing.assert_allclose(
        qvel / u[:, 0],
        np.full(3, qvel[1] / u[1, 0]),
        rtol=1e-5,
        err_msg="first-substep response is not proportional to ctrl",
    )
    np.testing.assert_allclose(
        qvel, dt * u[:, 0] / inertia, rtol=1e-3, err_msg="first-substep velocity != dt * u * gear / I"
    )


@pytest.mark.parametrize("model", ["pendulum", "quadruped"])
def test_nsteps_equals_repeated_single_steps(make_sim: Callable[..., Any], model: str) -> None:
    """Clause: time — step(ctrl, nsteps=k) equals k calls of step(ctrl, nsteps=1) with the same ctrl.

    Two backends start from the same state; one takes k substeps in one call,
    the other k single-substep calls (quadruped: with ground contacts).
    """
    a, b = make_sim(model, 2), make_sim(model, 2)
    rng = np.random.default_rng(11)
    if model == "pendulum":
        qpos = np.array([[0.3], [-1.0]])
    else:
        qpos = np.tile(to_np(a.get_keyframe_qpos("stand")), (2, 1))
        root = _free_qpos_cols(a, "root")
        qpos[:, root + 2] -= 0.01  # feet touch the ground
    qvel = rng.normal(scale=0.2, size=(2, a.nv))
    lo, hi = to_np(a.get_actuator_ctrl_range()).T
    for sim in (a, b):
        sim.set_state(None, qpos, qvel)
    for _ in range(3):
        ctrl = rng.uniform(lo, hi, size=(2, a.num_actuators))
        k = 4
        a.step(ctrl, nsteps=k)
        for _ in range(k):
            b.step(ctrl, nsteps=1)
        for got, want, what in zip(_state(a), _state(b), ("qpos", "qvel")):
            np.testing.assert_allclose(
                got, want, rtol=0, atol=1e-6, err_msg=f"{what}: nsteps={k} differs from {k} single substeps"
            )


def test_ctrl_clamped_to_ctrl_range(make_sim: Callable[..., Any]) -> None:
    """Clause: control — ctrl is clamped to each actuator's ctrl range: far outside gives the trajectory of the bound.

    arm7: every joint 0.01 rad inside its upper (then lower) limit, position
    targets at the bound versus 1 rad (and 1e3 rad) beyond it; the position
    servos do not saturate their force range at the bound, so an unclamped
    target would give a different trajectory (checked: a target 0.005 rad
    inside the bound does). Pendulum: motor command 1e3 versus the bound 5.
    """
    arm = [make_sim("arm7", 2) for _ in range(4)]
    joints = [f"joint{i}" for i in range(1, 8)]
    qcols = to_np(arm[0].get_joint_qpos_indices(joints)).astype(int)
    jr = to_np(arm[0].get_joint_range())[to_np(arm[0].get_joint_dof_pos_indices(joints)).astype(int)]
    cr = to_np(arm[0].get_actuator_ctrl_range())
    acts = to_np(arm[0].get_actuator_ids([f"act{i}" for i in range(1, 8)])).astype(int)
    for side, sign in ((1, 1.0), (0, -1.0)):
        qpos = _arm7_home(arm[0])
        c = _free_qpos_cols(arm[0], "cube_free")
        qpos[:, c : c + 3] = [2.0, 2.0, 0.05]
        qpos[:, qcols] = jr[:, side] - sign * 0.01
        bound = np.tile(cr[:, side], (2, 1))
        beyond = bound.copy()
        beyond[0, acts] += sign * 1.0
        beyond[1, acts] += sign * 1e3
        inside = bound - sign * 0.005
        results = []
        for sim, ctrl in zip(arm, (bound, beyond, inside)):
            sim.set_state(None, qpos)
            for _ in range(5):
                sim.step(ctrl, nsteps=4)
            results.append(_state(sim))
        for got, want, what in zip(results[1], results[0], ("qpos", "qvel")):
            np.testing.assert_allclose(
                got, want, rtol=0, atol=1e-6, err_msg=f"arm7 {what}: ctrl beyond the ctrl range was not clamped to it"
            )
        assert np.abs(results[2][1] - results[0][1]).max() > 1e-3, (
            "test is blind: a ctrl inside the range gave the same trajectory as the bound"
        )
    pend = [make_sim("pendulum", 2) for _ in range(2)]
    lo, hi = to_np(pend[0].get_actuator_ctrl_range())[0]
    out = []
    for sim, ctrl in zip(pend, (np.array([[hi], [lo]]), np.array([[1e3], [-1e3]]))):
        _pendulum_at(sim, 0.2)
        sim.step(ctrl, nsteps=50)
        out.append(_state(sim))
    for got, want, what in zip(out[1], out[0], ("qpos", "qvel")):
        np.testing.assert_allclose(
            got, want, rtol=0, atol=1e-6, err_msg=f"pendulum {what}: ctrl beyond the ctrl range was not clamped to it"
        )


# ----------------------------------------------------------------------------
# body forces
# ----------------------------------------------------------------------------


def _cube_setup(make_sim: Callable[..., Any], n: int = 3, seed: int = 0) -> tuple[Any, np.ndarray, int]:
    sim = make_sim("arm7", n)
    rng = np.random.default_rng(seed)
    qpos = _arm7_cube_in_flight(sim, random_unit_quat(rng, (n,)))
    sim.set_state(None, qpos)
    return sim, _arm7_hold_ctrl(sim, qpos), _body_id(sim, "cube")


def test_body_force_gives_f_over_m(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: apply_body_force — a world-frame force at a free body's origin (= its COM) gives dv = (F/m + g) k dt and no rotation.

    The arm7 cube (origin at its centre of mass) flies with a random
    orientation per env, so the force must be taken in the world frame, not
    the body frame; one step of k substeps, a different force per env.
    """
    require("body_forces")
    sim, ctrl, cube = _cube_setup(make_sim)
    n, k, dt = sim.num_envs, 5, sim.physics_dt
    m = to_np(sim.get_env_body_mass())[:, cube]
    g = _gravity(sim)
    force = np.array([[0.3, -0.15, 0.6], [-1.0, 0.5, 2.0], [0.0, 0.0, 1.4715]])[:n, None, :]
    v0 = to_np(sim.get_body_lin_vel_w(cube))[:, 0]
    sim.apply_body_force([cube], force)
    info = sim.step(ctrl, nsteps=k)
    assert not bool(info["diverged"].any())
    dv = to_np(sim.get_body_lin_vel_w(cube))[:, 0] - v0
    expected = (force[:, 0] / m[:, None] + g) * k * dt
    np.testing.assert_allclose(dv, expected, rtol=1e-4, atol=1e-6, err_msg="dv != (F/m + g) k dt")
    w = to_np(sim.get_body_ang_vel_w(cube))[:, 0]
    np.testing.assert_allclose(w, 0.0, atol=1e-6, err_msg="a force at the centre of mass rotated the body")


def test_body_torque_gives_angular_acceleration(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: apply_body_force — a pure world-frame torque gives dw = I^-1 tau k dt and no linear acceleration beyond gravity.

    The arm7 cube is a uniform solid cube (I = m s^2 / 6 about every axis, s
    its edge from simbackend.models.analytic); random orientation per env.
    """
    require("body_forces")
    sim, ctrl, cube = _cube_setup(make_sim, seed=1)
    n, k, dt = sim.num_envs, 4, sim.physics_dt
    m = to_np(sim.get_env_body_mass())[:, cube]
    inertia = m * (2 * analytic.ARM7_CUBE_HALF_SIZE) ** 2 / 6
    g = _gravity(sim)
    torque = np.array([[1e-3, 0.0, 0.0], [0.0, -2e-3, 1e-3], [5e-4, 5e-4, -5e-4]])[:n, None, :]
    v0 = to_np(sim.get_body_lin_vel_w(cube))[:, 0]
    sim.apply_body_force([cube], np.zeros_like(torque), torque)
    sim.step(ctrl, nsteps=k)
    w = to_np(sim.get_body_ang_vel_w(cube))[:, 0]
    np.testing.assert_allclose(
        w, torque[:, 0] / inertia[:, None] * k * dt, rtol=1e-3, atol=1e-6, err_msg="dw != I^-1 tau k dt (world frame)"
    )
    dv = to_np(sim.get_body_lin_vel_w(cube))[:, 0] - v0
    np.testing.assert_allclose(
        dv, np.tile(g * k * dt, (n, 1)), atol=1e-6, err_msg="a pure torque changed the linear velocity"
    )


def test_body_force_acts_at_frame_origin(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: apply_body_force — the force acts at the body frame's origin, not at the centre of mass.

    The pendulum body's frame origin is the hinge pivot and its centre of
    mass is L = 1 m below. A horizontal force at the origin passes through
    the hinge axis: the pendulum, at rest at the bottom, must stay at rest
    (applied at the COM it would spin up with L F / I). A torque about the
    hinge axis gives qvel = tau k dt / (m L^2).
    """
    require("body_forces")
    sim = make_sim("pendulum", 3)
    body = _body_id(sim, "pendulum")
    k, dt = 5, sim.physics_dt
    m = float(sim.get_env_body_mass()[0, body])
    inertia = m * analytic.PENDULUM_LENGTH**2
    _pendulum_at(sim, 0.0)
    force = np.array([[2.0, 0.0, 0.0], [-3.0, 0.0, 0.0], [1.0, 0.5, -4.0]])[:, None, :]
    sim.apply_body_force([body], force)
    sim.step(np.zeros((3, 1)), nsteps=k)
    qvel = to_np(sim.get_qvel())[:, 0]
    would_be = np.abs(force[:2, 0, 0]) * analytic.PENDULUM_LENGTH * k * dt / inertia
    assert np.abs(qvel).max() < 1e-6, (
        f"a force at the pivot (the body origin) turned the pendulum: qvel {qvel};"
        f" the same force at the centre of mass gives |qvel| {would_be}"
    )
    _pendulum_at(sim, 0.0)
    tau = np.array([0.5, -1.0, 2.0])
    torque = np.zeros((3, 1, 3))
    torque[:, 0, 1] = tau  # about world y = the hinge axis
    sim.apply_body_force([body], np.zeros((3, 1, 3)), torque)
    sim.step(np.zeros((3, 1)), nsteps=1)
    np.testing.assert_allclose(
        to_np(sim.get_qvel())[:, 0], tau * dt / inertia, rtol=1e-3, err_msg="hinge torque response != tau dt / I"
    )


def test_body_force_cleared_after_step(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: apply_body_force — forces act during the next step only; the step after it is plain free fall."""
    require("body_forces")
    sim, ctrl, cube = _cube_setup(make_sim, seed=2)
    n, k, dt = sim.num_envs, 3, sim.physics_dt
    g = _gravity(sim)
    sim.apply_body_force([cube], np.tile([1.0, -2.0, 5.0], (n, 1, 1)), np.tile([1e-3, 0, 0], (n, 1, 1)))
    sim.step(ctrl, nsteps=k)
    v0 = to_np(sim.get_body_lin_vel_w(cube))[:, 0]
    w0 = to_np(sim.get_body_ang_vel_w(cube))[:, 0]
    assert np.abs(v0[:, 0]).min() > 1e-3, "the force had no effect"
    sim.step(ctrl, nsteps=k)
    dv = to_np(sim.get_body_lin_vel_w(cube))[:, 0] - v0
    w = to_np(sim.get_body_ang_vel_w(cube))[:, 0]
    np.testing.assert_allclose(
        dv,
        np.tile(g * k * dt, (n, 1)),
        atol=1e-5,
        err_msg="the force still acted in the step after the one it was applied for",
    )
    np.testing.assert_allclose(w, w0, atol=1e-4, err_msg="the torque still acted after its step")


def test_body_force_calls_accumulate(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: apply_body_force — calls before a step add up: F/2 twice equals F once, in any body order.

    Three identical backends: (a) one call with F on [cube, link4]; (b) two
    calls with F/2 each; (c) two calls, bodies given in the reverse order
    with the rows swapped. All three trajectories must agree.
    """
    require("body_forces")
    sims = [make_sim("arm7", 2) for _ in range(3)]
    ids = [_body_id(sims[0], "cube"), _body_id(sims[0], "link4")]
    qpos = _arm7_cube_in_flight(sims[0], random_unit_quat(np.random.default_rng(3), (2,)))
    ctrl = _arm7_hold_ctrl(sims[0], qpos)
    rng = np.random.default_rng(4)
    force = rng.normal(scale=2.0, size=(2, 2, 3))
    torque = rng.normal(scale=0.05, size=(2, 2, 3))
    for s in sims:
        s.set_state(None, qpos)
    sims[0].apply_body_force(ids, force, torque)
    for _ in range(2):
        sims[1].apply_body_force(ids, force / 2, torque / 2)
        sims[2].apply_body_force(ids[::-1], force[:, ::-1] / 2, torque[:, ::-1] / 2)
    for s in sims:
        s.step(ctrl, nsteps=3)
    ref = _state(sims[0])
    for s, what in ((sims[1], "two calls of F/2"), (sims[2], "reversed body order")):
        for got, want in zip(_state(s), ref):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"{what} != one call of F")
    moved = to_np(sims[0].get_body_lin_vel_w(ids[0]))[:, 0, :2]
    assert np.abs(moved).min() > 1e-4, "the forces had no horizontal effect"


# ----------------------------------------------------------------------------
# divergence and the step info
# ----------------------------------------------------------------------------


def _check_divergence(sim: Any, ref: Any, ctrl: np.ndarray, bad: int, apply: Callable[[Any], None]) -> None:
    """Step ``sim`` (bad env ``bad``) and ``ref`` (same states, nothing bad) and compare."""
    pre_q, pre_v = _state(sim)
    apply(sim)
    info = sim.step(ctrl, nsteps=2)
    ref.step(ctrl, nsteps=2)
    diverged = info["diverged"].cpu().numpy()
    expected = np.zeros(sim.num_envs, dtype=bool)
    expected[bad] = True
    assert diverged.tolist() == expected.tolist(), f"diverged mask {diverged.tolist()}, expected {expected.tolist()}"
    q, v = _state(sim)
    np.testing.assert_array_equal(
        q[bad], pre_q[bad], err_msg="the diverged env did not keep its state from before the call"
    )
    np.testing.assert_array_equal(
        v[bad], pre_v[bad], err_msg="the diverged env did not keep its velocity from before the call"
    )
    assert np.isfinite(q).all() and np.isfinite(v).all(), "non-finite state after a diverged step"
    rq, rv = _state(ref)
    others = np.flatnonzero(~expected)
    np.testing.assert_allclose(q[others], rq[others], rtol=0, atol=1e-6, err_msg="other envs did not advance normally")
    np.testing.assert_allclose(v[others], rv[others], rtol=0, atol=1e-6, err_msg="other envs did not advance normally")
    assert np.abs(q[others] - pre_q[others]).max() > 0, "other envs did not move at all"


def test_diverged_env_reported_by_huge_force(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: divergence — an env driven to blow up (1e13 N on the cube) is flagged in info["diverged"], keeps its state from before the call, the others advance.

    The force is finite but gives the 0.15 kg cube an acceleration of ~1e14
    m/s^2; every other env takes the same step without it, and must match a
    backend that never saw the force.
    """
    require("divergence_detection")
    require("body_forces")
    sim, ref = make_sim("arm7", 3), make_sim("arm7", 3)
    qpos = _arm7_cube_in_flight(sim)
    ctrl = _arm7_hold_ctrl(sim, qpos)
    for s in (sim, ref):
        s.set_state(None, qpos)
        s.step(ctrl, nsteps=3)  # some motion, so that "kept its state" is not trivially the initial one
    cube = _body_id(sim, "cube")

    def blow_up(s: Any) -> None:
        f = np.zeros((s.num_envs, 1, 3))
        f[1, 0] = [0.0, 0.0, 1e13]
        s.apply_body_force([cube], f)

    _check_divergence(sim, ref, ctrl, 1, blow_up)
    # a second blow-up of the same env in the very next call is reported as well
    _check_divergence(sim, ref, ctrl, 1, blow_up)
    # the env is usable afterwards: a normal step advances it, with the force cleared
    v0 = to_np(sim.get_body_lin_vel_w(cube))[:, 0]
    q0 = to_np(sim.get_qpos())
    k = 2
    info = sim.step(ctrl, nsteps=k)
    assert not bool(info["diverged"].any()), "a normal step after a diverged one was flagged"
    assert np.abs(to_np(sim.get_qpos())[1] - q0[1]).max() > 0, "the env that diverged no longer advances"
    dv = to_np(sim.get_body_lin_vel_w(cube))[:, 0] - v0
    np.testing.assert_allclose(
        dv[1],
        _gravity(sim) * k * sim.physics_dt,
        atol=1e-5,
        err_msg="the blow-up force still acts after the diverged step",
    )


def test_step_info(make_sim: Callable[..., Any]) -> None:
    """Clause: step — info["diverged"] is a (N,) bool tensor on backend.device; info["timing"] has float "physics" and "total" seconds."""
    sim = make_sim("quadruped", 5)
    info = sim.step(np.zeros((5, sim.num_actuators)), nsteps=3)
    d = info["diverged"]
    assert isinstance(d, torch.Tensor) and d.dtype == torch.bool
    assert tuple(d.shape) == (5,) and d.device == sim.device
    assert not bool(d.any())
    timing = info["timing"]
    for key in ("physics", "total"):
        assert isinstance(timing[key], float), f"timing[{key!r}] is {type(timing[key]).__name__}"
        assert math.isfinite(timing[key]) and timing[key] >= 0.0
    assert timing["physics"] <= timing["total"], "physics time exceeds the total time of the call"
