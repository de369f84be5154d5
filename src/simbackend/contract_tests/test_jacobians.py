"""Conformance: site Jacobians (``get_site_jacobian_w``).

Checked against central differences of the site pose over random
configurations (hypothesis draws the seed): column k is the site's velocity
when qvel = e_k, with free and ball columns integrated in the contract's
convention (``helpers.integrate_qpos``). Also against the analytic arm7
Jacobian, column selection through ``dof_indices``, and ``jacp @ qvel``.

float32 outputs: with h = 2e-3 the differences of O(1 m) poses carry ~3e-5 of
round-off and truncation error; a Jacobian of the body origin instead of the
site, or of local instead of world rotation axes, is off by O(0.1).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from simbackend.contract_tests.helpers import BALL_MJCF, angular_velocity_from_quats, integrate_qpos, random_qpos, to_np
from simbackend.models import analytic

H = 2e-3
JAC_ATOL = 2e-4
JAC_RTOL = 2e-4
ARM_JOINTS = [f"joint{k}" for k in range(1, 8)]
SEEDS = st.integers(0, 2**31 - 1)


def site_pose(sim: Any, site_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return to_np(sim.get_site_pos_w(site_ids)), to_np(sim.get_site_quat_w(site_ids))


def fd_site_velocity(
    sim: Any, qpos: np.ndarray, qvel: np.ndarray, site_ids: list[int], h: float = H
) -> tuple[np.ndarray, np.ndarray]:
    """Central differences ``(lin (N, S, 3), ang (N, S, 3))`` of site poses along ``qvel``."""
    sim.set_state(None, integrate_qpos(sim, qpos, qvel, h))
    p1, q1 = site_pose(sim, site_ids)
    sim.set_state(None, integrate_qpos(sim, qpos, qvel, -h))
    p0, q0 = site_pose(sim, site_ids)
    return (p1 - p0) / (2 * h), angular_velocity_from_quats(q0, q1, 2 * h)


def fd_site_jacobians(sim: Any, qpos: np.ndarray, site_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(jacp, jacr)``, each ``(N, S, 3, nv)``, by central differences, one qvel unit vector per column."""
    n, nv = qpos.shape[0], sim.nv
    jp = np.zeros((n, len(site_ids), 3, nv))
    jr = np.zeros_like(jp)
    for k in range(nv):
        e = np.zeros((n, nv))
        e[:, k] = 1.0
        jp[..., k], jr[..., k] = fd_site_velocity(sim, qpos, e, site_ids)
    return jp, jr


def check_site_jacobians(sim: Any, qpos: np.ndarray, label: str) -> None:
    sites = list(range(len(sim.site_names)))
    sim.set_state(None, qpos)
    jacs = [sim.get_site_jacobian_w(s) for s in sites]
    fd_p, fd_r = fd_site_jacobians(sim, qpos, sites)
    for s, (jp, jr) in zip(sites, jacs):
        name = sim.site_names[s]
        assert tuple(jp.shape) == (sim.num_envs, 3, sim.nv) and tuple(jr.shape) == (sim.num_envs, 3, sim.nv)
        assert jp.dtype == torch.float32 and jr.dtype == torch.float32
        assert jp.device == sim.device and jr.device == sim.device
        np.testing.assert_allclose(
            to_np(jp),
            fd_p[:, s],
            atol=JAC_ATOL,
            rtol=JAC_RTOL,
            err_msg=f"{label}: jacp of site {name!r} vs finite differences",
        )
        np.testing.assert_allclose(
            to_np(jr),
            fd_r[:, s],
            atol=JAC_ATOL,
            rtol=JAC_RTOL,
            err_msg=f"{label}: jacr of site {name!r} vs finite differences",
        )


# ----------------------------------------------------------------------------
# finite differences over random configurations
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["arm7", "quadruped"])
def test_site_jacobians_match_finite_differences(
    make_sim: Callable[..., Any], require: Callable[..., None], model: str
) -> None:
    """Clause: get_site_jacobian_w is the world-frame geometric Jacobian of the site point — every column equals the site's velocity for qvel = e_k (free columns: linear world, angular local)."""
    require("site_jacobians")
    sim = make_sim(model, 4)

    @given(seed=SEEDS)
    def check(seed: int) -> None:
        qpos = random_qpos(sim, np.random.default_rng(seed))
        check_site_jacobians(sim, qpos, f"{model} seed {seed}")

    check()


def test_ball_joint_jacobian_columns(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path
) -> None:
    """Clause: Jacobian columns of a ball joint are its local angular velocity coordinates — equal to finite differences of the site pose."""
    require("site_jacobians")
    require("joint_types", "ball")
    path = tmp_path / "ball_chain.xml"
    path.write_text(BALL_MJCF)
    sim = make_sim(str(path), 4)

    @given(seed=SEEDS)
    def check(seed: int) -> None:
        qpos = random_qpos(sim, np.random.default_rng(seed))
        check_site_jacobians(sim, qpos, f"ball_chain seed {seed}")

    check()


# ----------------------------------------------------------------------------
# analytic arm7 Jacobian: the site point, not the body origin
# ----------------------------------------------------------------------------


def test_arm7_jacobian_is_of_the_site_point(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: the Jacobian is that of the SITE point — arm7 ee_site (offset from link7's origin) matches the analytic Jacobian at that point, not at the origin."""
    require("site_jacobians")
    sim = make_sim("arm7", 6)
    ee = int(sim.get_site_ids("ee_site")[0])
    arm_q = to_np(sim.get_joint_qpos_indices(ARM_JOINTS)).astype(int)
    arm_v = to_np(sim.get_joint_qvel_indices(ARM_JOINTS)).astype(int)
    link7 = sim.get_body_ids("link7")

    @given(seed=SEEDS)
    def check(seed: int) -> None:
        qpos = random_qpos(sim, np.random.default_rng(seed))
        sim.set_state(None, qpos)
        jp, jr = (to_np(j) for j in sim.get_site_jacobian_w(ee))
        origin = to_np(sim.get_body_pos_w(link7))[:, 0]
        for i in range(sim.num_envs):
            J = analytic.arm7_jacobian(qpos[i, arm_q])
            J_origin = analytic.arm7_jacobian(qpos[i, arm_q], point=origin[i])
            np.testing.assert_allclose(jp[i][:, arm_v], J[:3], atol=1e-5, rtol=0, err_msg=f"seed {seed} env {i} jacp")
            np.testing.assert_allclose(jr[i][:, arm_v], J[3:], atol=1e-5, rtol=0, err_msg=f"seed {seed} env {i} jacr")
            # the other columns (the free cube) do not move the arm's site
            others = np.setdiff1d(np.arange(sim.nv), arm_v)
            np.testing.assert_allclose(jp[i][:, others], 0.0, atol=1e-7)
            np.testing.assert_allclose(jr[i][:, others], 0.0, atol=1e-7)
            # sanity: the origin's Jacobian is far from the site's, so the checks above discriminate
            assert np.abs(J_origin[:3] - J[:3]).max() > 0.05

    check()


# ----------------------------------------------------------------------------
# column selection and jacp @ qvel
# ----------------------------------------------------------------------------


def test_dof_indices_select_columns(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: get_site_jacobian_w(site, dof_indices) returns the qvel columns dof_indices of the full Jacobian, (N, 3, k), in the given order."""
    require("site_jacobians")
    sim = make_sim("arm7", 4)
    rng = np.random.default_rng(0)
    sim.set_state(None, random_qpos(sim, rng))
    ee = int(sim.get_site_ids("ee_site")[0])
    full_p, full_r = (to_np(j) for j in sim.get_site_jacobian_w(ee))
    arm_v = sim.get_joint_qvel_indices(ARM_JOINTS)
    av = to_np(arm_v).astype(int)
    cube_v = int(sim.info.joint_dofadr[int(sim.get_joint_ids("cube_free")[0])])
    selections = {
        "arm joints (tensor)": (arm_v, av),
        "arm joints (list)": (av.tolist(), av),
        "arm joints (numpy)": (av, av),
        "reversed subset": ([int(av[3]), int(av[0]), cube_v + 2], np.array([av[3], av[0], cube_v + 2])),
        "one int": (int(av[5]), np.array([av[5]])),
        "None": (None, np.arange(sim.nv)),
    }
    for label, (sel, want_cols) in selections.items():
        jp, jr = sim.get_site_jacobian_w(ee, sel)
        k = len(want_cols)
        assert tuple(jp.shape) == (sim.num_envs, 3, k) and tuple(jr.shape) == (sim.num_envs, 3, k), label
        assert jp.dtype == torch.float32 and jr.dtype == torch.float32 and jp.device == sim.device, label
        np.testing.assert_allclose(to_np(jp), full_p[:, :, want_cols], atol=1e-7, rtol=0, err_msg=label)
        np.testing.assert_allclose(to_np(jr), full_r[:, :, want_cols], atol=1e-7, rtol=0, err_msg=label)
    # the site id may be given as a tensor element or a numpy integer too
    jp, _ = sim.get_site_jacobian_w(sim.get_site_ids("ee_site")[0], arm_v)
    np.testing.assert_allclose(to_np(jp), full_p[:, :, av], atol=1e-7)
    jp, _ = sim.get_site_jacobian_w(np.int64(ee))
    np.testing.assert_allclose(to_np(jp), full_p, atol=1e-7)


@pytest.mark.parametrize("model", ["arm7", "quadruped"])
def test_jacobian_times_qvel_is_site_velocity(
    make_sim: Callable[..., Any], require: Callable[..., None], model: str
) -> None:
    """Clause: site_lin_vel_w = jacp @ qvel and site_ang_vel_w = jacr @ qvel — against finite differences of get_site_pos_w / get_site_quat_w along a random qvel."""
    require("site_jacobians")
    sim = make_sim(model, 4)
    sites = list(range(len(sim.site_names)))

    @given(seed=SEEDS)
    def check(seed: int) -> None:
        rng = np.random.default_rng(seed)
        qpos = random_qpos(sim, rng)
        qvel = rng.normal(size=(sim.num_envs, sim.nv))
        sim.set_state(None, qpos, qvel)
        jac = [tuple(to_np(j) for j in sim.get_site_jacobian_w(s)) for s in sites]
        lin, ang = fd_site_velocity(sim, qpos, qvel, sites)
        for s in sites:
            jp, jr = jac[s]
            np.testing.assert_allclose(
                np.einsum("nij,nj->ni", jp, qvel),
                lin[:, s],
                atol=JAC_ATOL,
                rtol=JAC_RTOL,
                err_msg=f"{model} seed {seed}: jacp @ qvel of {sim.site_names[s]!r}",
            )
            np.testing.assert_allclose(
                np.einsum("nij,nj->ni", jr, qvel),
                ang[:, s],
                atol=JAC_ATOL,
                rtol=JAC_RTOL,
                err_msg=f"{model} seed {seed}: jacr @ qvel of {sim.site_names[s]!r}",
            )

    check()


def test_jacobian_agrees_with_body_velocity(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: jacr @ qvel is the angular velocity of the site's body, and jacp @ qvel of a site at a body origin is that body's origin velocity."""
    require("site_jacobians")
    sim = make_sim("quadruped", 4)
    rng = np.random.default_rng(3)
    qpos, qvel = random_qpos(sim, rng), rng.normal(size=(4, sim.nv))
    sim.set_state(None, qpos, qvel)
    imu = int(sim.get_site_ids("imu")[0])  # at the torso origin
    jp, jr = (to_np(j) for j in sim.get_site_jacobian_w(imu))
    b = sim.base_body_id
    np.testing.assert_allclose(
        np.einsum("nij,nj->ni", jp, qvel), to_np(sim.get_body_lin_vel_w([b]))[:, 0], atol=1e-5, rtol=1e-5
    )
    np.testing.assert_allclose(
        np.einsum("nij,nj->ni", jr, qvel), to_np(sim.get_body_ang_vel_w([b]))[:, 0], atol=1e-5, rtol=1e-5
    )
    foot = int(sim.get_site_ids("RL_foot_site")[0])
    _, jr = (to_np(j) for j in sim.get_site_jacobian_w(foot))
    calf = sim.get_body_ids("RL_calf_link")
    np.testing.assert_allclose(
        np.einsum("nij,nj->ni", jr, qvel), to_np(sim.get_body_ang_vel_w(calf))[:, 0], atol=1e-5, rtol=1e-5
    )
