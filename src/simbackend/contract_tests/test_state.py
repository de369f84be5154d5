"""Conformance: set_state semantics and "every getter describes the same instant".

* set_state takes effect at once (no step needed) for every getter;
* envs not named are left bit-identical; env ids in any order, boolean masks;
* free and ball joint quaternions are normalised;
* after ``step`` no getter lags a substep behind: the stepped env's derived
  quantities equal those of a fresh backend set to its current qpos/qvel.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import BALL_MJCF, POS_ATOL, quat_to_mat, random_qpos, random_unit_quat, to_np
from simbackend.errors import NonFiniteError
from simbackend.models import analytic

ARM_JOINTS = [f"joint{k}" for k in range(1, 8)]
#: sensor types whose value depends on position and velocity only (not on ctrl or accelerations)
POS_VEL_SENSORS = frozenset(
    {
        "jointpos",
        "jointvel",
        "framepos",
        "framequat",
        "framelinvel",
        "frameangvel",
        "gyro",
        "velocimeter",
        "framexaxis",
        "frameyaxis",
        "framezaxis",
        "ballquat",
        "ballangvel",
        "subtreecom",
        "subtreelinvel",
    }
)


def quat_err(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.minimum(np.abs(a - b).max(-1), np.abs(a + b).max(-1))


def env_getters(sim: Any, capabilities: Any) -> dict[str, Callable[[], torch.Tensor]]:
    """Every per-env getter (leading dimension N), by name."""
    g: dict[str, Callable[[], torch.Tensor]] = {
        "qpos": sim.get_qpos,
        "qvel": sim.get_qvel,
        "dof_pos": sim.get_dof_pos,
        "dof_vel": sim.get_dof_vel,
        "base_pos": sim.get_base_pos,
        "base_quat": sim.get_base_quat,
        "base_lin_vel": sim.get_base_lin_vel,
        "base_ang_vel": sim.get_base_ang_vel,
        "body_pos_w": sim.get_body_pos_w,
        "body_quat_w": sim.get_body_quat_w,
        "body_lin_vel_w": sim.get_body_lin_vel_w,
        "body_ang_vel_w": sim.get_body_ang_vel_w,
        "body_pos_b": sim.get_body_pos_b,
        "body_quat_b": sim.get_body_quat_b,
        "body_lin_vel_b": sim.get_body_lin_vel_b,
        "body_ang_vel_b": sim.get_body_ang_vel_b,
        "site_pos_w": sim.get_site_pos_w,
        "site_quat_w": sim.get_site_quat_w,
        "body_mass": sim.get_env_body_mass,
        "gravity": sim.get_env_gravity,
    }
    for sid, name in enumerate(sim.sensor_names):
        if sim.info.sensor_type[sid] in capabilities.sensor_types:
            g[f"sensor:{name}"] = lambda name=name: sim.get_sensor_data(name)
    if capabilities.site_jacobians:
        for sid, name in enumerate(sim.site_names):
            g[f"jacp:{name}"] = lambda sid=sid: sim.get_site_jacobian_w(sid)[0]
            g[f"jacr:{name}"] = lambda sid=sid: sim.get_site_jacobian_w(sid)[1]
    return g


def snapshot(sim: Any, capabilities: Any) -> dict[str, torch.Tensor]:
    return {k: f().detach().cpu().clone() for k, f in env_getters(sim, capabilities).items()}


def random_ctrl(sim: Any, rng: np.random.Generator) -> np.ndarray:
    r = to_np(sim.get_actuator_ctrl_range())
    lo = np.where(np.isfinite(r[:, 0]), r[:, 0], -1.0)
    hi = np.where(np.isfinite(r[:, 1]), r[:, 1], 1.0)
    return rng.uniform(lo, hi, size=(sim.num_envs, sim.num_actuators))


def cols(sim: Any, names: list[str], which: str = "qpos") -> np.ndarray:
    f = sim.get_joint_qpos_indices if which == "qpos" else sim.get_joint_qvel_indices
    return to_np(f(names)).astype(int)


# ----------------------------------------------------------------------------
# set_state is immediate
# ----------------------------------------------------------------------------


def test_set_state_immediate_arm7(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: set_state is immediate — qpos, qvel, dofs, body/site poses, velocities and sensors reflect it without a step."""
    sim = make_sim("arm7", 5)
    rng = np.random.default_rng(0)
    # move away from the initial state first, so that stale values would show
    sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(5, sim.nv)))
    sim.step(random_ctrl(sim, rng), nsteps=3)
    qpos = random_qpos(sim, rng)
    qvel = rng.normal(size=(5, sim.nv))
    sim.set_state(None, qpos, qvel)
    np.testing.assert_allclose(to_np(sim.get_qpos()), qpos, atol=1e-6, rtol=0)
    np.testing.assert_allclose(to_np(sim.get_qvel()), qvel, atol=1e-6, rtol=0)
    ac, av = cols(sim, ARM_JOINTS), cols(sim, ARM_JOINTS, "qvel")
    np.testing.assert_allclose(to_np(sim.get_dof_pos()), qpos[:, ac], atol=1e-6, rtol=0)
    np.testing.assert_allclose(to_np(sim.get_dof_vel()), qvel[:, av], atol=1e-6, rtol=0)
    ee = sim.get_site_ids("ee_site")
    pos, quat = to_np(sim.get_site_pos_w(ee))[:, 0], to_np(sim.get_site_quat_w(ee))[:, 0]
    link7 = sim.get_body_ids("link7")
    lp, lq = to_np(sim.get_body_pos_w(link7))[:, 0], to_np(sim.get_body_quat_w(link7))[:, 0]
    ang = to_np(sim.get_body_ang_vel_w(sim.get_body_ids(["link1", "link7"])))
    cube = sim.get_body_ids("cube")
    cadr = int(sim.info.joint_qposadr[int(sim.get_joint_ids("cube_free")[0])])
    vadr = int(sim.info.joint_dofadr[int(sim.get_joint_ids("cube_free")[0])])
    sensors = {
        n: to_np(sim.get_sensor_data(n))
        for i, n in enumerate(sim.sensor_names)
        if sim.info.sensor_type[i] in capabilities.sensor_types
    }
    for i in range(sim.num_envs):
        q = qpos[i, ac]
        want_p, want_q = analytic.arm7_ee_pose(q)
        np.testing.assert_allclose(pos[i], want_p, atol=POS_ATOL, rtol=0)
        assert quat_err(quat[i], want_q) < 2e-6
        bp, bq = analytic.arm7_body_pose(q, 7)
        np.testing.assert_allclose(lp[i], bp, atol=POS_ATOL, rtol=0)
        assert quat_err(lq[i], bq) < 2e-6
        J = analytic.arm7_jacobian(q)
        w_ee = J[3:] @ qvel[i, av]
        # link1 turns about world z at qvel of joint1; link7's angular velocity is the chain's
        np.testing.assert_allclose(ang[i, 0], (0, 0, qvel[i, av[0]]), atol=1e-5)
        np.testing.assert_allclose(ang[i, 1], w_ee, atol=1e-5, rtol=1e-5)
        expect = {
            "joint1_pos": [q[0]],
            "joint1_vel": [qvel[i, av[0]]],
            "ee_pos": want_p,
            "ee_quat": want_q,
            "ee_linvel": J[:3] @ qvel[i, av],
            "ee_angvel": w_ee,
            "ee_gyro": quat_to_mat(want_q).T @ w_ee,
            "cube_pos": qpos[i, cadr : cadr + 3],
        }
        for name, want in expect.items():
            if name not in sensors:
                continue
            got = sensors[name][i]
            if name == "ee_quat":
                assert quat_err(got, want) < 2e-6, name
            else:
                np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5, err_msg=f"sensor {name}, env {i}")
    # the free cube: pose = its qpos block; origin velocity = linear qvel (world)
    np.testing.assert_allclose(to_np(sim.get_body_pos_w(cube))[:, 0], qpos[:, cadr : cadr + 3], atol=POS_ATOL, rtol=0)
    np.testing.assert_allclose(
        to_np(sim.get_body_lin_vel_w(cube))[:, 0], qvel[:, vadr : vadr + 3], atol=1e-5, rtol=1e-5
    )


def test_set_state_immediate_quadruped(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: set_state is immediate — floating base pose/velocity, imu sensors and feet reflect the new state without a step."""
    sim = make_sim("quadruped", 4)
    rng = np.random.default_rng(1)
    sim.step(random_ctrl(sim, rng), nsteps=5)
    qpos = random_qpos(sim, rng)
    qvel = rng.normal(size=(4, sim.nv))
    sim.set_state(None, qpos, qvel)
    R = quat_to_mat(qpos[:, 3:7])
    RT = np.swapaxes(R, -1, -2)
    np.testing.assert_allclose(to_np(sim.get_base_pos()), qpos[:, :3], atol=POS_ATOL, rtol=0)
    assert quat_err(to_np(sim.get_base_quat()), qpos[:, 3:7]).max() < 2e-6
    np.testing.assert_allclose(to_np(sim.get_base_lin_vel()), qvel[:, :3], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(to_np(sim.get_base_ang_vel()), (R @ qvel[:, 3:6, None])[..., 0], atol=1e-5, rtol=1e-5)
    feet = to_np(sim.get_site_pos_w(sim.get_site_ids([f"{l}_foot_site" for l in analytic.QUADRUPED_LEGS])))
    for i in range(4):
        for k, leg in enumerate(analytic.QUADRUPED_LEGS):
            np.testing.assert_allclose(feet[i, k], analytic.quadruped_foot_pos(qpos[i], leg), atol=POS_ATOL, rtol=0)
    calf_q, calf_v = cols(sim, ["FL_calf"])[0], cols(sim, ["FL_calf"], "qvel")[0]
    expect = {
        "imu_quat": qpos[:, 3:7],
        "imu_gyro": qvel[:, 3:6],
        "imu_pos": qpos[:, :3],
        "imu_vel": (RT @ qvel[:, :3, None])[..., 0],
        "FL_calf_pos": qpos[:, [calf_q]],
        "FL_calf_vel": qvel[:, [calf_v]],
    }
    for sid, name in enumerate(sim.sensor_names):
        if sim.info.sensor_type[sid] not in capabilities.sensor_types or name not in expect:
            continue
        got = to_np(sim.get_sensor_data(name))
        if name == "imu_quat":
            assert quat_err(got, expect[name]).max() < 2e-6, name
        else:
            np.testing.assert_allclose(got, expect[name], atol=2e-5, rtol=1e-5, err_msg=name)


# ----------------------------------------------------------------------------
# env selection: other envs untouched, order, masks
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["arm7", "quadruped"])
def test_set_state_partial_ids_any_order(make_sim: Callable[..., Any], capabilities: Any, model: str) -> None:
    """Clause: set_state envs not named are untouched (bit-identical, every getter); row i goes to env_ids[i] for ids in any order."""
    sim = make_sim(model, 6)
    rng = np.random.default_rng(2)
    sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(6, sim.nv)))
    sim.step(random_ctrl(sim, rng), nsteps=2)
    before = snapshot(sim, capabilities)
    new_q = random_qpos(sim, rng, 2)
    new_v = rng.normal(size=(2, sim.nv))
    sim.set_state([3, 1], new_q, new_v)
    after = snapshot(sim, capabilities)
    others = [0, 2, 4, 5]
    for k in before:
        assert torch.equal(before[k][others], after[k][others]), f"{k}: set_state([3, 1]) changed other envs"
    got_q, got_v = to_np(after["qpos"]), to_np(after["qvel"])
    np.testing.assert_allclose(got_q[3], new_q[0], atol=1e-6, rtol=0)
    np.testing.assert_allclose(got_q[1], new_q[1], atol=1e-6, rtol=0)
    np.testing.assert_allclose(got_v[3], new_v[0], atol=1e-6, rtol=0)
    np.testing.assert_allclose(got_v[1], new_v[1], atol=1e-6, rtol=0)
    # derived quantities of env 3 are those of row 0: compare with a second backend set in order
    ref = make_sim(model, 2)
    ref.set_state(None, new_q[::-1], new_v[::-1])  # ref env 0 <- row 1 (env 1), ref env 1 <- row 0 (env 3)
    for name, f in env_getters(ref, capabilities).items():
        want = to_np(f())
        got = to_np(after[name])[[1, 3]]
        if "quat" in name:
            assert quat_err(got, want).max() < 1e-6, name
        else:
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6, err_msg=name)


def test_set_state_selectors(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: set_state env_ids may be a list, numpy or torch ids, a boolean mask (N,), or None for all; qvel None means zero."""
    n = 6
    sim = make_sim("arm7", n)
    rng = np.random.default_rng(3)
    base_q = random_qpos(sim, rng)
    base_v = rng.normal(size=(n, sim.nv))
    selectors = [
        ("bool numpy mask", np.array([True, False, False, True, False, True]), [0, 3, 5]),
        ("bool torch mask", torch.tensor([False, True, True, False, False, False]), [1, 2]),
        ("torch ids", torch.tensor([5, 0, 2]), [5, 0, 2]),
        ("numpy ids", np.array([4], dtype=np.int32), [4]),
        ("int", 2, [2]),
        ("None", None, list(range(n))),
    ]
    for label, sel, rows in selectors:
        sim.set_state(None, base_q, base_v)
        before = snapshot(sim, capabilities)
        q = random_qpos(sim, rng, len(rows))
        v = rng.normal(size=(len(rows), sim.nv))
        sim.set_state(sel, q, v)
        got_q, got_v = to_np(sim.get_qpos()), to_np(sim.get_qvel())
        np.testing.assert_allclose(got_q[rows], q, atol=1e-6, rtol=0, err_msg=label)
        np.testing.assert_allclose(got_v[rows], v, atol=1e-6, rtol=0, err_msg=label)
        untouched = [i for i in range(n) if i not in rows]
        after = snapshot(sim, capabilities)
        for k in before:
            assert torch.equal(before[k][untouched], after[k][untouched]), f"{label}: {k} of other envs changed"
    # qvel omitted: zero velocity for the named envs only
    sim.set_state(None, base_q, base_v)
    sim.set_state([4, 0], base_q[[1, 2]])
    v = to_np(sim.get_qvel())
    assert (v[[4, 0]] == 0).all()
    np.testing.assert_allclose(v[[1, 2, 3, 5]], base_v[[1, 2, 3, 5]], atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_qpos())[[4, 0]], base_q[[1, 2]], atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_w())[[4, 0]], 0.0, atol=1e-7)
    # an empty selection changes nothing
    before = snapshot(sim, capabilities)
    sim.set_state(np.zeros(n, dtype=bool), np.zeros((0, sim.nq)), np.zeros((0, sim.nv)))
    after = snapshot(sim, capabilities)
    for k in before:
        assert torch.equal(before[k], after[k]), k


@pytest.mark.parametrize("deferred", [False, True], ids=["immediate", "deferred"])
def test_set_state_mask_with_a_row_per_env(make_sim: Callable[..., Any], capabilities: Any, deferred: bool) -> None:
    """Clause: set_state with a boolean mask tensor and (N, nq)/(N, nv) rows writes the selected envs from
    their own rows (the form a GPU loop uses: nothing read back) exactly as the ids form does; the other rows
    are not inputs (NaN there is no error) and the other envs stay bit-identical. With or without deferred
    checks (``deferred_checks``, as on a GPU); a bad value in a selected row is still refused."""
    n = 5
    sims = [make_sim("quadruped", n, deferred_checks=deferred) for _ in range(2)]
    rng = np.random.default_rng(11)
    base_q, base_v = random_qpos(sims[0], rng), rng.normal(size=(n, sims[0].nv))
    for sim in sims:
        sim.set_state(None, base_q, base_v)
        sim.step(torch.zeros(n, sim.num_actuators), 2)  # warm starts, derived fields: something to keep
    mask = torch.tensor([True, False, False, True, True], device=sims[0].device)
    rows = [0, 3, 4]
    q = torch.as_tensor(random_qpos(sims[0], rng))
    v = torch.as_tensor(rng.normal(size=(n, sims[0].nv)))
    q[~mask.cpu()] = float("nan")  # not inputs
    v[~mask.cpu()] = float("nan")
    before = snapshot(sims[0], capabilities)
    sims[0].set_state(mask, q, v)
    sims[1].set_state(rows, q[rows], v[rows])
    after, twin = snapshot(sims[0], capabilities), snapshot(sims[1], capabilities)
    untouched = [1, 2]
    for k in before:
        assert torch.equal(after[k], twin[k]), f"{k}: the mask form differs from the ids form"
        assert torch.equal(before[k][untouched], after[k][untouched]), f"{k} of envs outside the mask changed"
    for sim in sims:  # and the two step on alike (warm starts cleared the same way)
        sim.step(torch.zeros(n, sim.num_actuators), 1)
    after, twin = snapshot(sims[0], capabilities), snapshot(sims[1], capabilities)
    for k in after:
        assert torch.equal(after[k], twin[k]), f"{k}: a step after the mask form differs from one after the ids form"
    # a bad value in a selected row: refused (at once, or at the next call with deferred checks)
    bad = q.clone()
    bad[3, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="qpos"):
        sims[0].set_state(mask, bad, v)
        sims[0].synchronize()
    assert torch.equal(snapshot(sims[0], capabilities)["qpos"][3], after["qpos"][3])


# ----------------------------------------------------------------------------
# quaternion normalisation
# ----------------------------------------------------------------------------


def test_set_state_normalises_free_quaternions(make_sim: Callable[..., Any]) -> None:
    """Clause: set_state normalises free joint quaternions — a non-unit quat reads back as the unit one (qpos and body pose)."""
    rng = np.random.default_rng(4)
    for model, joint, body in (("quadruped", "root", "torso"), ("arm7", "cube_free", "cube")):
        sim = make_sim(model, 4)
        qpos = random_qpos(sim, rng)
        adr = int(sim.info.joint_qposadr[int(sim.get_joint_ids(joint)[0])]) + 3
        unit = qpos[:, adr : adr + 4].copy()
        qpos[:, adr : adr + 4] *= np.array([3.7, 0.2, 1.0, 25.0])[:, None]
        sim.set_state(None, qpos)
        got = to_np(sim.get_qpos())[:, adr : adr + 4]
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
        assert quat_err(got, unit).max() < 2e-6, model
        bq = to_np(sim.get_body_quat_w(sim.get_body_ids(body)))[:, 0]
        assert quat_err(bq, unit).max() < 2e-6, model


def test_set_state_normalises_ball_quaternions(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path
) -> None:
    """Clause: set_state normalises ball joint quaternions — a non-unit quat reads back unit, and the body pose uses the unit one."""
    require("joint_types", "ball")
    path = tmp_path / "ball_chain.xml"
    path.write_text(BALL_MJCF)
    sim = make_sim(str(path), 3)
    rng = np.random.default_rng(5)
    unit = random_unit_quat(rng, (3,))
    qpos = np.zeros((3, sim.nq))
    adr = int(sim.info.joint_qposadr[int(sim.get_joint_ids("ball")[0])])
    qpos[:, adr : adr + 4] = unit * np.array([0.01, 4.0, 1.5])[:, None]
    sim.set_state(None, qpos)
    got = to_np(sim.get_qpos())[:, adr : adr + 4]
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert quat_err(got, unit).max() < 2e-6
    assert quat_err(to_np(sim.get_body_quat_w(sim.get_body_ids("upper")))[:, 0], unit).max() < 2e-6
    # the child's origin hangs at R(ball) @ (0.05, 0, -0.3) below the upper body's origin
    lower = to_np(sim.get_body_pos_w(sim.get_body_ids("lower")))[:, 0]
    want = np.array([0, 0, 1.0]) + (quat_to_mat(unit) @ np.array([0.05, 0, -0.3]))
    np.testing.assert_allclose(lower, want, atol=POS_ATOL)


# ----------------------------------------------------------------------------
# after step: every getter describes the same instant
# ----------------------------------------------------------------------------


def _compare_same_instant(stepped: Any, fresh: Any, capabilities: Any, label: str) -> None:
    fresh.set_state(None, stepped.get_qpos(), stepped.get_qvel())
    a, b = env_getters(stepped, capabilities), env_getters(fresh, capabilities)
    for name in a:
        if name.startswith("sensor:"):
            sid = stepped.sensor_names.index(name[len("sensor:") :])
            if stepped.info.sensor_type[sid] not in POS_VEL_SENSORS:
                continue
        got, want = to_np(a[name]()), to_np(b[name]())
        if "quat" in name:
            err = quat_err(got, want).max()
            assert err < 2e-6, f"{label}: {name} differs from set_state of the current qpos by {err:.3g}"
            continue
        # float32 qpos/qvel were copied; a substep of lag shows as a difference >> these tolerances
        atol = 2e-5 if ("pos" in name or name.startswith("jac")) else 2e-4
        np.testing.assert_allclose(
            got, want, atol=atol, rtol=1e-4, err_msg=f"{label}: {name} does not describe the current state"
        )


@pytest.mark.parametrize("nsteps", [1, 3])
def test_getters_describe_current_instant_arm7(make_sim: Callable[..., Any], capabilities: Any, nsteps: int) -> None:
    """Clause: after step every getter describes the same instant — arm7 with nonzero ctrl: poses, velocities, sensors equal a fresh set_state of the current qpos/qvel."""
    sim = make_sim("arm7", 4)
    fresh = make_sim("arm7", 4)
    rng = np.random.default_rng(6)
    sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(4, sim.nv)))
    ctrl = random_ctrl(sim, rng)
    ac = cols(sim, ARM_JOINTS)
    for call in range(3):
        q_before = to_np(sim.get_qpos())
        sim.step(ctrl, nsteps=nsteps)
        q_now = to_np(sim.get_qpos())
        assert np.abs(q_now - q_before).max() > 1e-3, "the arm should move under this ctrl"
        _compare_same_instant(sim, fresh, capabilities, f"arm7 nsteps={nsteps} call {call}")
        # and against the analytic model of the current joint angles
        ee = to_np(sim.get_site_pos_w(sim.get_site_ids("ee_site")))[:, 0]
        for i in range(4):
            np.testing.assert_allclose(ee[i], analytic.arm7_ee_pose(q_now[i, ac])[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("nsteps", [1, 3])
def test_getters_describe_current_instant_quadruped(
    make_sim: Callable[..., Any], capabilities: Any, nsteps: int
) -> None:
    """Clause: after step every getter describes the same instant — quadruped in ground contact: poses, velocities, sensors equal a fresh set_state of the current qpos/qvel."""
    sim = make_sim("quadruped", 4)
    fresh = make_sim("quadruped", 4)
    rng = np.random.default_rng(7)
    stand = np.array(analytic.QUADRUPED_STAND_QPOS)
    qpos = np.tile(stand, (4, 1))
    qpos[:, 2] -= 0.006  # feet slightly in the floor: contacts from the start
    qpos[:, 7:] += rng.uniform(-0.1, 0.1, size=(4, 12))
    qvel = rng.normal(scale=0.3, size=(4, sim.nv))
    sim.set_state(None, qpos, qvel)
    ctrl = random_ctrl(sim, rng)
    for call in range(4):
        sim.step(ctrl, nsteps=nsteps)
        _compare_same_instant(sim, fresh, capabilities, f"quadruped nsteps={nsteps} call {call}")
    feet = to_np(sim.get_site_pos_w(sim.get_site_ids([f"{l}_foot_site" for l in analytic.QUADRUPED_LEGS])))
    assert feet[..., 2].min() < 0.05, "the feet should be at the floor"
