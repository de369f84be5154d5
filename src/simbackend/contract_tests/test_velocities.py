"""Conformance: body velocities agree with finite differences of body poses.

Pure kinematics, no stepping: a state ``(qpos, qvel)`` is set and its reported
velocities read; then ``qpos`` integrated by ``+-h`` along ``qvel`` (in the
contract's convention, ``helpers.integrate_qpos``) is set and the poses read.
The central differences must equal the reported velocities: linear velocity of
the body frame ORIGIN (not the centre of mass) and angular velocity in WORLD
coordinates. Free joint qvel: linear part world frame, angular part local.

float32 outputs: poses of O(1 m) carry ~6e-8 round-off, so with h = 2e-3 the
central difference carries ~3e-5 m/s of noise plus a similar truncation error
(measured on MuJoCo: at most ~6e-5); convention errors (COM instead of origin,
local instead of world angular velocity) are O(0.1) here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import (
    BALL_MJCF,
    angular_velocity_from_quats,
    integrate_qpos,
    quat_to_mat,
    random_qpos,
    random_unit_quat,
    to_np,
)

H = 2e-3
VEL_ATOL = 2e-4
VEL_RTOL = 2e-4


#: a free body with a spherical inertia, no gravity, no contacts: its twist is constant
FREE_MJCF = """
<mujoco model="free_spinner">
  <compiler angle="radian" inertiafromgeom="false"/>
  <option timestep="0.002" gravity="0 0 0"/>
  <worldbody>
    <body name="spinner" pos="0 0 1">
      <joint name="free" type="free"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <geom type="box" size="0.1 0.05 0.02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""


def _model_source(model: str, tmp_path: Path, require: Callable[..., None]) -> str:
    if model == "ball_chain":
        require("joint_types", "ball")
        path = tmp_path / "ball_chain.xml"
        path.write_text(BALL_MJCF)
        return str(path)
    return model


def fd_body_velocities(sim: Any, qpos: np.ndarray, qvel: np.ndarray, h: float = H) -> tuple[np.ndarray, np.ndarray]:
    """Central differences ``(lin (N, B, 3), ang (N, B, 3))`` of every body's origin and orientation."""
    sim.set_state(None, integrate_qpos(sim, qpos, qvel, h), qvel)
    p1, q1 = to_np(sim.get_body_pos_w()), to_np(sim.get_body_quat_w())
    sim.set_state(None, integrate_qpos(sim, qpos, qvel, -h), qvel)
    p0, q0 = to_np(sim.get_body_pos_w()), to_np(sim.get_body_quat_w())
    return (p1 - p0) / (2 * h), angular_velocity_from_quats(q0, q1, 2 * h)


@pytest.mark.parametrize("model", ["arm7", "quadruped", "double_pendulum", "ball_chain"])
def test_body_velocities_match_finite_differences(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path, model: str
) -> None:
    """Clause: body linear velocity is that of the frame ORIGIN, angular velocity in WORLD coordinates — both equal central differences of the poses."""
    sim = make_sim(_model_source(model, tmp_path, require), 6)
    rng = np.random.default_rng(0)
    for trial in range(3):
        qpos = random_qpos(sim, rng)
        qvel = rng.normal(scale=1.0, size=(sim.num_envs, sim.nv))
        sim.set_state(None, qpos, qvel)
        lin, ang = to_np(sim.get_body_lin_vel_w()), to_np(sim.get_body_ang_vel_w())
        # base getters are the same quantity for the base body
        np.testing.assert_allclose(to_np(sim.get_base_lin_vel()), lin[:, sim.base_body_id], atol=1e-6)
        np.testing.assert_allclose(to_np(sim.get_base_ang_vel()), ang[:, sim.base_body_id], atol=1e-6)
        fd_lin, fd_ang = fd_body_velocities(sim, qpos, qvel)
        np.testing.assert_allclose(
            lin,
            fd_lin,
            atol=VEL_ATOL,
            rtol=VEL_RTOL,
            err_msg=f"{model} trial {trial}: body origin linear velocity (world)",
        )
        np.testing.assert_allclose(
            ang, fd_ang, atol=VEL_ATOL, rtol=VEL_RTOL, err_msg=f"{model} trial {trial}: body angular velocity (world)"
        )
        # and the base-frame versions rotate the same vectors
        sim.set_state(None, qpos, qvel)  # the differences moved the pose: restore it
        R = quat_to_mat(to_np(sim.get_base_quat()))
        RT = np.swapaxes(R, -1, -2)[:, None]
        np.testing.assert_allclose(
            to_np(sim.get_body_lin_vel_b()),
            (RT @ fd_lin[..., None])[..., 0],
            atol=VEL_ATOL,
            rtol=VEL_RTOL,
            err_msg=f"{model}: lin_vel_b",
        )
        np.testing.assert_allclose(
            to_np(sim.get_body_ang_vel_b()),
            (RT @ fd_ang[..., None])[..., 0],
            atol=VEL_ATOL,
            rtol=VEL_RTOL,
            err_msg=f"{model}: ang_vel_b",
        )


def test_velocity_is_origin_not_com_single_hinge(make_sim: Callable[..., Any]) -> None:
    """Clause: body linear velocity is that of the frame origin — the pendulum body origin sits on the hinge axis, so it does not move while the mass swings."""
    sim = make_sim("pendulum", 3)
    qpos = np.array([[0.3], [-1.0], [2.0]])
    qvel = np.array([[2.0], [-1.5], [0.7]])
    sim.set_state(None, qpos, qvel)
    body = sim.get_body_ids("pendulum")
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_w(body))[:, 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_body_ang_vel_w(body))[:, 0], np.c_[0 * qvel, qvel, 0 * qvel], atol=1e-6)


@pytest.mark.parametrize("model,joint,body", [("quadruped", "root", "torso"), ("arm7", "cube_free", "cube")])
def test_free_joint_qvel_convention(make_sim: Callable[..., Any], model: str, joint: str, body: str) -> None:
    """Clause: free joint qvel is linear velocity (world, 3) + angular velocity (body-local, 3) — checked against the body's world velocities and pose differences."""
    n = 5
    sim = make_sim(model, n)
    rng = np.random.default_rng(1)
    qpos = random_qpos(sim, rng)
    j = int(sim.get_joint_ids(joint)[0])
    qa, va = int(sim.info.joint_qposadr[j]), int(sim.info.joint_dofadr[j])
    qpos[:, qa + 3 : qa + 7] = random_unit_quat(rng, (n,))
    bid = int(sim.get_body_ids(body)[0])
    R = quat_to_mat(qpos[:, qa + 3 : qa + 7])
    # only the angular part nonzero, about a local axis
    w_local = np.array([0.3, -0.5, 0.8])
    qvel = np.zeros((n, sim.nv))
    qvel[:, va + 3 : va + 6] = w_local
    sim.set_state(None, qpos, qvel)
    ang = to_np(sim.get_body_ang_vel_w([bid]))[:, 0]
    np.testing.assert_allclose(ang, (R @ w_local), atol=1e-5, err_msg="angular qvel must be body-local")
    np.testing.assert_allclose(
        to_np(sim.get_body_lin_vel_w([bid]))[:, 0],
        0.0,
        atol=1e-6,
        err_msg="a pure rotation about the joint leaves the origin at rest",
    )
    np.testing.assert_allclose((np.swapaxes(R, -1, -2) @ ang[..., None])[..., 0], np.tile(w_local, (n, 1)), atol=1e-5)
    if bid == sim.base_body_id:
        np.testing.assert_allclose(to_np(sim.get_body_ang_vel_b([bid]))[:, 0], np.tile(w_local, (n, 1)), atol=1e-5)
    fd_lin, fd_ang = fd_body_velocities(sim, qpos, qvel)
    np.testing.assert_allclose(fd_ang[:, bid], R @ w_local, atol=VEL_ATOL, rtol=VEL_RTOL)
    # only the linear part nonzero: world frame, whatever the orientation
    v = np.array([0.4, -0.2, 0.9])
    qvel = np.zeros((n, sim.nv))
    qvel[:, va : va + 3] = v
    sim.set_state(None, qpos, qvel)
    np.testing.assert_allclose(
        to_np(sim.get_body_lin_vel_w([bid]))[:, 0],
        np.tile(v, (n, 1)),
        atol=1e-6,
        err_msg="linear qvel must be world frame",
    )
    np.testing.assert_allclose(to_np(sim.get_body_ang_vel_w([bid]))[:, 0], 0.0, atol=1e-6)
    fd_lin, _ = fd_body_velocities(sim, qpos, qvel)
    np.testing.assert_allclose(fd_lin[:, bid], np.tile(v, (n, 1)), atol=VEL_ATOL, rtol=VEL_RTOL)
    # both at once: the origin moves with qvel[0:3] (the joint sits at the body origin)
    qvel[:, va + 3 : va + 6] = w_local
    sim.set_state(None, qpos, qvel)
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_w([bid]))[:, 0], np.tile(v, (n, 1)), atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_body_ang_vel_w([bid]))[:, 0], R @ w_local, atol=1e-5)
    if bid == sim.base_body_id:
        np.testing.assert_allclose(to_np(sim.get_base_lin_vel()), np.tile(v, (n, 1)), atol=1e-6)
        np.testing.assert_allclose(to_np(sim.get_base_ang_vel()), R @ w_local, atol=1e-5)
        # a rigidly attached point: v + w x r (quadruped hip links: no joint motion)
        hip = sim.get_body_ids("FL_hip_link")
        r = to_np(sim.get_body_pos_w(hip))[:, 0] - qpos[:, qa : qa + 3]
        np.testing.assert_allclose(to_np(sim.get_body_lin_vel_w(hip))[:, 0], v + np.cross(R @ w_local, r), atol=1e-5)


def test_free_body_stepping_follows_qvel_convention(make_sim: Callable[..., Any], tmp_path: Path) -> None:
    """Clause: free joint qvel convention under step — a torque-free body with spherical inertia in zero gravity moves by qpos(t) = integrate(qpos0, qvel, t), pos world, rotation local."""
    path = tmp_path / "free_spinner.xml"
    path.write_text(FREE_MJCF)
    n = 4
    sim = make_sim(str(path), n)
    rng = np.random.default_rng(2)
    qpos = np.zeros((n, 7))
    qpos[:, :3] = rng.uniform(-0.5, 0.5, size=(n, 3)) + (0, 0, 1)
    qpos[:, 3:7] = random_unit_quat(rng, (n,))
    qvel = np.concatenate((rng.uniform(-1, 1, size=(n, 3)), rng.uniform(-3, 3, size=(n, 3))), axis=1)
    sim.set_state(None, qpos, qvel)
    k = 10
    info = sim.step(None, nsteps=k)
    assert not to_np(info["diverged"]).any()
    want = integrate_qpos(sim, qpos, qvel, k * sim.physics_dt)
    got = to_np(sim.get_qpos())
    np.testing.assert_allclose(got[:, :3], want[:, :3], atol=2e-6, err_msg="free body position after step")
    err = np.minimum(np.abs(got[:, 3:] - want[:, 3:]).max(1), np.abs(got[:, 3:] + want[:, 3:]).max(1))
    assert err.max() < 1e-4, f"free body orientation after step: error {err.max():.3g} (local angular qvel)"
    np.testing.assert_allclose(to_np(sim.get_qvel()), qvel, atol=1e-4, rtol=1e-4)
    R = quat_to_mat(got[:, 3:])
    np.testing.assert_allclose(to_np(sim.get_base_ang_vel()), (R @ qvel[:, 3:, None])[..., 0], atol=1e-4)
