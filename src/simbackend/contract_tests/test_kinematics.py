"""Conformance: forward kinematics against engine-neutral analytic ground truth.

Poses are set with ``set_state`` (no step) and compared with
``simbackend.models.analytic``; outputs are float32, so positions of O(1 m)
are compared to ~2e-6 m and quaternions (up to sign) to ~2e-6.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import (
    POS_ATOL,
    QUAT_ATOL,
    quat_mul,
    quat_to_mat,
    random_qpos,
    to_np,
)
from simbackend.models import analytic

ARM_LINKS = tuple(f"link{k}" for k in range(1, 8))


def quat_err(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Largest component difference between quaternions, up to sign, ``(...)``."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.minimum(np.abs(a - b).max(-1), np.abs(a + b).max(-1))


def assert_quat_close(actual: np.ndarray, expected: np.ndarray, atol: float = QUAT_ATOL, msg: str = "") -> None:
    err = quat_err(actual, np.broadcast_to(expected, np.shape(actual)))
    assert err.max() <= atol, f"{msg}: quaternion error {err.max():.3g} > {atol} (up to sign)\n{actual}\nvs\n{expected}"


def conj(q: np.ndarray) -> np.ndarray:
    return q * np.array([1.0, -1.0, -1.0, -1.0])


# ----------------------------------------------------------------------------
# pendulum, double pendulum, cart-pole
# ----------------------------------------------------------------------------


def test_pendulum_tip_and_body(make_sim: Callable[..., Any]) -> None:
    """Clause: forward kinematics — pendulum site "tip" and body pose at several hinge angles match the analytic model."""
    angles = np.array([0.0, 0.3, -1.1, np.pi / 2, 2.5, -np.pi + 1e-3, 3.0, -0.01])
    sim = make_sim("pendulum", len(angles))
    sim.set_state(None, angles[:, None])
    tip = sim.get_site_ids("tip")
    body = sim.get_body_ids("pendulum")
    got = to_np(sim.get_site_pos_w(tip))[:, 0]
    want = np.stack([analytic.pendulum_tip(a) for a in angles])
    np.testing.assert_allclose(got, want, atol=POS_ATOL, rtol=0)
    # the tip is at distance L from the pivot
    np.testing.assert_allclose(
        np.linalg.norm(got - analytic.PENDULUM_PIVOT, axis=1), analytic.PENDULUM_LENGTH, atol=POS_ATOL
    )
    # the body frame sits at the pivot and turns about y by the hinge angle
    np.testing.assert_allclose(
        to_np(sim.get_body_pos_w(body))[:, 0], np.tile(analytic.PENDULUM_PIVOT, (len(angles), 1)), atol=POS_ATOL, rtol=0
    )
    want_q = np.stack([analytic.axis_angle_quat((0, 1, 0), a) for a in angles])
    assert_quat_close(to_np(sim.get_body_quat_w(body))[:, 0], want_q, msg="pendulum body quat")
    # the tip site inherits the body orientation (site quat is identity in the body)
    assert_quat_close(to_np(sim.get_site_quat_w(tip))[:, 0], want_q, msg="pendulum tip quat")


def test_double_pendulum_elbow_and_tip(make_sim: Callable[..., Any]) -> None:
    """Clause: forward kinematics — double pendulum sites "elbow" and "tip" match the analytic model for random joint angles."""
    rng = np.random.default_rng(0)
    q = rng.uniform(-np.pi, np.pi, size=(8, 2))
    q[0] = 0.0
    q[1] = (np.pi / 2, -np.pi / 2)
    sim = make_sim("double_pendulum", len(q))
    cols = to_np(sim.get_joint_qpos_indices(["shoulder", "elbow"])).astype(int)
    qpos = np.zeros((len(q), sim.nq))
    qpos[:, cols] = q
    sim.set_state(None, qpos)
    sites = sim.get_site_ids(["elbow", "tip"])
    got = to_np(sim.get_site_pos_w(sites))
    np.testing.assert_allclose(
        got[:, 0], np.stack([analytic.double_pendulum_elbow(a) for a, _ in q]), atol=POS_ATOL, rtol=0
    )
    np.testing.assert_allclose(
        got[:, 1], np.stack([analytic.double_pendulum_tip(a, b) for a, b in q]), atol=POS_ATOL, rtol=0
    )
    # the lower link body turns by q1 + q2 about y
    lower = sim.get_body_ids("lower_link")
    want_q = np.stack([analytic.axis_angle_quat((0, 1, 0), a + b) for a, b in q])
    assert_quat_close(to_np(sim.get_body_quat_w(lower))[:, 0], want_q, msg="lower_link quat")


def test_cartpole_tip(make_sim: Callable[..., Any]) -> None:
    """Clause: forward kinematics — cart-pole site "tip" (slide + hinge) matches the analytic model."""
    rng = np.random.default_rng(1)
    n = 6
    x = rng.uniform(-2.5, 2.5, size=n)
    th = rng.uniform(-np.pi, np.pi, size=n)
    sim = make_sim("cartpole", n)
    cols = to_np(sim.get_joint_qpos_indices(["slider", "hinge"])).astype(int)
    qpos = np.zeros((n, sim.nq))
    qpos[:, cols[0]], qpos[:, cols[1]] = x, th
    sim.set_state(None, qpos)
    got = to_np(sim.get_site_pos_w(sim.get_site_ids("tip")))[:, 0]
    np.testing.assert_allclose(
        got, np.stack([analytic.cartpole_tip(a, b) for a, b in zip(x, th)]), atol=POS_ATOL, rtol=0
    )
    cart = to_np(sim.get_body_pos_w(sim.get_body_ids("cart")))[:, 0]
    np.testing.assert_allclose(
        cart, np.stack([[a, 0, analytic.CARTPOLE_RAIL_HEIGHT] for a in x]), atol=POS_ATOL, rtol=0
    )


# ----------------------------------------------------------------------------
# arm7
# ----------------------------------------------------------------------------


def _arm7_configs(sim: Any, capabilities: Any) -> np.ndarray:
    """(N, nq) qpos: zero arm, home keyframe (or its analytic values), then random within ranges."""
    rng = np.random.default_rng(2)
    qpos = random_qpos(sim, rng)
    arm_cols = to_np(sim.get_joint_qpos_indices([f"joint{k}" for k in range(1, 8)])).astype(int)
    qpos[0, arm_cols] = 0.0
    if capabilities.keyframes:
        qpos[1] = to_np(sim.get_keyframe_qpos("home"))
    else:
        qpos[1, arm_cols] = analytic.ARM7_HOME
    return qpos


def test_arm7_ee_site_pose(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: forward kinematics — arm7 "ee_site" world position and wxyz orientation (up to sign) at zero, home and random poses."""
    sim = make_sim("arm7", 8)
    qpos = _arm7_configs(sim, capabilities)
    sim.set_state(None, qpos)
    arm_cols = to_np(sim.get_joint_qpos_indices([f"joint{k}" for k in range(1, 8)])).astype(int)
    np.testing.assert_allclose(qpos[1, arm_cols], analytic.ARM7_HOME, atol=1e-6)
    ee = sim.get_site_ids("ee_site")
    pos = to_np(sim.get_site_pos_w(ee))[:, 0]
    quat = to_np(sim.get_site_quat_w(ee))[:, 0]
    for i in range(sim.num_envs):
        want_p, want_q = analytic.arm7_ee_pose(qpos[i, arm_cols])
        np.testing.assert_allclose(pos[i], want_p, atol=POS_ATOL, rtol=0, err_msg=f"env {i} ee pos")
        assert_quat_close(quat[i], want_q, msg=f"env {i} ee quat")
    # the site is offset from link7's origin: the check above would fail for the body origin
    link7 = to_np(sim.get_body_pos_w(sim.get_body_ids("link7")))[:, 0]
    assert np.linalg.norm(pos - link7, axis=1).min() > 0.1


def test_arm7_body_poses(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: forward kinematics — arm7 body frames base, link1..link7 (origin and wxyz quaternion) match the analytic chain."""
    sim = make_sim("arm7", 8)
    qpos = _arm7_configs(sim, capabilities)
    sim.set_state(None, qpos)
    arm_cols = to_np(sim.get_joint_qpos_indices([f"joint{k}" for k in range(1, 8)])).astype(int)
    ids = sim.get_body_ids(["base", *ARM_LINKS])
    pos = to_np(sim.get_body_pos_w(ids))
    quat = to_np(sim.get_body_quat_w(ids))
    for i in range(sim.num_envs):
        for k in range(8):
            want_p, want_q = analytic.arm7_body_pose(qpos[i, arm_cols], k)
            np.testing.assert_allclose(pos[i, k], want_p, atol=POS_ATOL, rtol=0, err_msg=f"env {i} body {k}")
            assert_quat_close(quat[i, k], want_q, msg=f"env {i} body {k}")
    # the free cube's pose is its qpos block (pos, wxyz quat)
    adr = int(sim.info.joint_qposadr[int(sim.get_joint_ids("cube_free")[0])])
    cube = sim.get_body_ids("cube")
    np.testing.assert_allclose(to_np(sim.get_body_pos_w(cube))[:, 0], qpos[:, adr : adr + 3], atol=POS_ATOL, rtol=0)
    assert_quat_close(to_np(sim.get_body_quat_w(cube))[:, 0], qpos[:, adr + 3 : adr + 7], msg="cube quat")


def test_quaternions_are_wxyz_hinge_about_z(make_sim: Callable[..., Any]) -> None:
    """Clause: quaternions are wxyz — a hinge about z by angle a gives body quat (cos a/2, 0, 0, sin a/2)."""
    angles = np.array([0.4, -1.2, 2.0, 0.0])
    sim = make_sim("arm7", len(angles))
    assert np.allclose(analytic.ARM7_JOINT_AXES[0], (0, 0, 1))
    qpos = np.tile(to_np(sim.get_default_qpos()), (len(angles), 1))
    c1 = int(to_np(sim.get_joint_qpos_indices("joint1"))[0])
    qpos[:, sim.info.dof_qpos_index] = 0.0
    qpos[:, c1] = angles
    sim.set_state(None, qpos)
    q = to_np(sim.get_body_quat_w(sim.get_body_ids("link1")))[:, 0]
    want = np.stack([np.cos(angles / 2), 0 * angles, 0 * angles, np.sin(angles / 2)], axis=1)
    assert_quat_close(q, want, msg="link1 quat")
    # the base of arm7 is fixed at identity
    assert_quat_close(to_np(sim.get_base_quat()), np.array([1.0, 0, 0, 0]), msg="arm7 base quat")


def test_quaternions_unit_norm(make_sim: Callable[..., Any]) -> None:
    """Clause: quaternions are unit norm — every body and site quaternion at random configurations (arm7, quadruped)."""
    rng = np.random.default_rng(4)
    for model in ("arm7", "quadruped"):
        sim = make_sim(model, 8)
        sim.set_state(None, random_qpos(sim, rng))
        for q in (sim.get_body_quat_w(), sim.get_site_quat_w(), sim.get_body_quat_b(), sim.get_base_quat()[:, None]):
            n = np.linalg.norm(to_np(q), axis=-1)
            assert np.abs(n - 1).max() < 2e-6, f"{model}: quaternion norms {n.min()}..{n.max()}"


# ----------------------------------------------------------------------------
# quadruped: floating base orientation and base-frame getters
# ----------------------------------------------------------------------------


def _set_random(sim: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    qpos = random_qpos(sim, rng)
    qvel = rng.normal(size=(sim.num_envs, sim.nv))
    sim.set_state(None, qpos, qvel)
    return qpos, qvel


def test_quadruped_base_orientation_wxyz(make_sim: Callable[..., Any]) -> None:
    """Clause: free joint qpos is pos(3) + quat(4, wxyz) — base pose and foot sites follow the analytic model with a random base orientation."""
    sim = make_sim("quadruped", 8)
    qpos, _ = _set_random(sim, 5)
    # a rotation about z only: (cos a/2, 0, 0, sin a/2) must turn the body x axis in the xy plane
    a = 0.7
    qpos[0, 3:7] = (np.cos(a / 2), 0, 0, np.sin(a / 2))
    sim.set_state([0], qpos[:1])
    np.testing.assert_allclose(to_np(sim.get_base_pos()), qpos[:, :3], atol=POS_ATOL, rtol=0)
    assert_quat_close(to_np(sim.get_base_quat()), qpos[:, 3:7], msg="base quat")
    torso = sim.get_body_ids("torso")
    assert_quat_close(to_np(sim.get_body_quat_w(torso))[:, 0], qpos[:, 3:7], msg="torso quat")
    # FL hip link origin: base_pos + R(base) @ hip offset
    hip = to_np(sim.get_body_pos_w(sim.get_body_ids("FL_hip_link")))[:, 0]
    R = quat_to_mat(qpos[:, 3:7])
    np.testing.assert_allclose(hip, qpos[:, :3] + R @ analytic.QUADRUPED_HIP_POS["FL"], atol=POS_ATOL, rtol=0)
    # env 0, written out by hand: yaw a turns the hip offset (0.2, 0.1, 0) within the xy plane
    off = analytic.QUADRUPED_HIP_POS["FL"]
    yawed = (off[0] * np.cos(a) - off[1] * np.sin(a), off[0] * np.sin(a) + off[1] * np.cos(a), 0.0)
    np.testing.assert_allclose(hip[0], qpos[0, :3] + yawed, atol=POS_ATOL, rtol=0)
    feet = sim.get_site_ids([f"{leg}_foot_site" for leg in analytic.QUADRUPED_LEGS])
    got = to_np(sim.get_site_pos_w(feet))
    for i in range(sim.num_envs):
        for k, leg in enumerate(analytic.QUADRUPED_LEGS):
            np.testing.assert_allclose(
                got[i, k],
                analytic.quadruped_foot_pos(qpos[i], leg),
                atol=POS_ATOL,
                rtol=0,
                err_msg=f"env {i} {leg} foot",
            )


def test_base_getters_equal_base_body(make_sim: Callable[..., Any]) -> None:
    """Clause: base = root body of the first kinematic tree — get_base_* equal the base body's get_body_*_w (quadruped and arm7)."""
    for model in ("quadruped", "arm7"):
        sim = make_sim(model, 6)
        _set_random(sim, 6)
        b = sim.base_body_id
        pairs = (
            (sim.get_base_pos(), sim.get_body_pos_w([b])[:, 0]),
            (sim.get_base_quat(), sim.get_body_quat_w([b])[:, 0]),
            (sim.get_base_lin_vel(), sim.get_body_lin_vel_w([b])[:, 0]),
            (sim.get_base_ang_vel(), sim.get_body_ang_vel_w([b])[:, 0]),
        )
        for got, want in pairs:
            np.testing.assert_allclose(to_np(got), to_np(want), atol=1e-6, rtol=0, err_msg=model)


def test_base_frame_getters_consistent_with_world(make_sim: Callable[..., Any]) -> None:
    """Clause: _b quantities are the world ones expressed in the base frame — pos_b = R^T (p_w - p_base), quat_b = q_base^-1 q, vel_b = R^T vel_w."""
    sim = make_sim("quadruped", 8)
    qpos, qvel = _set_random(sim, 8)
    base_p, base_q = to_np(sim.get_base_pos()), to_np(sim.get_base_quat())
    R = quat_to_mat(base_q)  # (N, 3, 3)
    RT = np.swapaxes(R, -1, -2)[:, None]  # (N, 1, 3, 3)
    pw, qw = to_np(sim.get_body_pos_w()), to_np(sim.get_body_quat_w())
    vw, ww = to_np(sim.get_body_lin_vel_w()), to_np(sim.get_body_ang_vel_w())
    tol = dict(atol=3e-6, rtol=0)
    np.testing.assert_allclose(to_np(sim.get_body_pos_b()), (RT @ (pw - base_p[:, None])[..., None])[..., 0], **tol)
    want_qb = quat_mul(conj(base_q)[:, None], qw)
    assert_quat_close(to_np(sim.get_body_quat_b()), want_qb, atol=3e-6, msg="quat_b")
    vtol = dict(atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_b()), (RT @ vw[..., None])[..., 0], **vtol)
    np.testing.assert_allclose(to_np(sim.get_body_ang_vel_b()), (RT @ ww[..., None])[..., 0], **vtol)
    # independent values: the base in its own frame is at the origin with identity orientation,
    # the hips sit at their fixed offsets, and the base velocities in base coordinates follow
    # from the free joint's qvel (linear world, angular local)
    b = sim.base_body_id
    np.testing.assert_allclose(to_np(sim.get_body_pos_b([b]))[:, 0], 0.0, atol=1e-6)
    assert_quat_close(to_np(sim.get_body_quat_b([b]))[:, 0], np.array([1.0, 0, 0, 0]), msg="base quat_b")
    for leg in analytic.QUADRUPED_LEGS:
        hip = to_np(sim.get_body_pos_b(sim.get_body_ids(f"{leg}_hip_link")))[:, 0]
        np.testing.assert_allclose(hip, np.tile(analytic.QUADRUPED_HIP_POS[leg], (sim.num_envs, 1)), atol=3e-6)
    Rq = quat_to_mat(qpos[:, 3:7])
    np.testing.assert_allclose(
        to_np(sim.get_body_lin_vel_b([b]))[:, 0], (np.swapaxes(Rq, -1, -2) @ qvel[:, :3, None])[..., 0], **vtol
    )
    np.testing.assert_allclose(to_np(sim.get_body_ang_vel_b([b]))[:, 0], qvel[:, 3:6], **vtol)
    # a subset of ids gives the same rows as the full call
    sub = [sim.body_names.index("RR_calf_link"), 0, b]
    np.testing.assert_array_equal(to_np(sim.get_body_pos_b(sub)), to_np(sim.get_body_pos_b())[:, sub])
    np.testing.assert_array_equal(to_np(sim.get_body_lin_vel_b(sub)), to_np(sim.get_body_lin_vel_b())[:, sub])


def test_base_frame_fixed_base(make_sim: Callable[..., Any]) -> None:
    """Clause: _b quantities are relative to the base — on arm7 (fixed base at (0, 0, 0.4), identity) pos_b = p_w - base."""
    sim = make_sim("arm7", 4)
    rng = np.random.default_rng(9)
    sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(4, sim.nv)))
    np.testing.assert_allclose(to_np(sim.get_base_pos()), np.tile(analytic.ARM7_BASE_POS, (4, 1)), atol=POS_ATOL)
    np.testing.assert_allclose(
        to_np(sim.get_body_pos_b()), to_np(sim.get_body_pos_w()) - analytic.ARM7_BASE_POS, atol=3e-6
    )
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_b()), to_np(sim.get_body_lin_vel_w()), atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_base_lin_vel()), 0.0, atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_base_ang_vel()), 0.0, atol=1e-6)


@pytest.mark.parametrize("model", ["arm7", "quadruped"])
def test_world_body(make_sim: Callable[..., Any], model: str) -> None:
    """Clause: the world body (id 0) is at the origin with identity orientation and zero velocity."""
    sim = make_sim(model, 3)
    rng = np.random.default_rng(10)
    sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(3, sim.nv)))
    np.testing.assert_allclose(to_np(sim.get_body_pos_w(0))[:, 0], 0.0, atol=1e-7)
    assert_quat_close(to_np(sim.get_body_quat_w(0))[:, 0], np.array([1.0, 0, 0, 0]), msg="world quat")
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_w(0))[:, 0], 0.0, atol=1e-7)
    np.testing.assert_allclose(to_np(sim.get_body_ang_vel_w(0))[:, 0], 0.0, atol=1e-7)
