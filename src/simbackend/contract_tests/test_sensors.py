"""Sensors: each core sensor type means what MuJoCo's does, computed from the current state.

The built-in models attach their sensors to known objects (arm7: ``ee_site``
and the ``cube`` body; quadruped: the ``imu`` site); the expected readings are
built from the contract's own getters at random states, so a backend that
computes a sensor in the wrong frame or at the wrong point fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import quat_distance, quat_to_mat, random_qpos, to_np

ATOL = 5e-5  # float32 outputs of O(1-10) magnitudes


def _random_state(sim: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    qpos = random_qpos(sim, rng)
    qvel = rng.uniform(-1.5, 1.5, size=(sim.num_envs, sim.nv))
    sim.set_state(None, qpos, qvel)


def _site_kinematics(sim: Any, site: str) -> dict[str, np.ndarray]:
    """World pose and velocities of a site from body getters: v_site = v_origin + w x (p_site - p_origin)."""
    sid = int(sim.get_site_ids(site)[0])
    body = int(sim.info.site_body[sid])
    p_site = to_np(sim.get_site_pos_w([sid]))[:, 0]
    q_site = to_np(sim.get_site_quat_w([sid]))[:, 0]
    p_body = to_np(sim.get_body_pos_w([body]))[:, 0]
    v_body = to_np(sim.get_body_lin_vel_w([body]))[:, 0]
    w = to_np(sim.get_body_ang_vel_w([body]))[:, 0]
    R = quat_to_mat(q_site)
    v_site = v_body + np.cross(w, p_site - p_body)
    return {"pos": p_site, "quat": q_site, "R": R, "linvel": v_site, "angvel": w}


def _local(R: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.einsum("nji,nj->ni", R, v)


CASES = [
    # model, sensor, type, expected(sim) -> (N, dim)
    (
        "arm7",
        "joint1_pos",
        "jointpos",
        lambda s: to_np(s.get_dof_pos())[:, [int(s.get_joint_dof_pos_indices("joint1")[0])]],
    ),
    (
        "arm7",
        "joint1_vel",
        "jointvel",
        lambda s: to_np(s.get_dof_vel())[:, [int(s.get_joint_dof_vel_indices("joint1")[0])]],
    ),
    ("arm7", "ee_pos", "framepos", lambda s: _site_kinematics(s, "ee_site")["pos"]),
    ("arm7", "ee_linvel", "framelinvel", lambda s: _site_kinematics(s, "ee_site")["linvel"]),
    ("arm7", "ee_angvel", "frameangvel", lambda s: _site_kinematics(s, "ee_site")["angvel"]),
    (
        "arm7",
        "ee_gyro",
        "gyro",
        lambda s: _local(_site_kinematics(s, "ee_site")["R"], _site_kinematics(s, "ee_site")["angvel"]),
    ),
    ("arm7", "cube_pos", "framepos", lambda s: to_np(s.get_body_pos_w(s.get_body_ids("cube")))[:, 0]),
    ("quadruped", "imu_pos", "framepos", lambda s: _site_kinematics(s, "imu")["pos"]),
    (
        "quadruped",
        "imu_gyro",
        "gyro",
        lambda s: _local(_site_kinematics(s, "imu")["R"], _site_kinematics(s, "imu")["angvel"]),
    ),
    (
        "quadruped",
        "imu_vel",
        "velocimeter",
        lambda s: _local(_site_kinematics(s, "imu")["R"], _site_kinematics(s, "imu")["linvel"]),
    ),
    (
        "quadruped",
        "FL_calf_pos",
        "jointpos",
        lambda s: to_np(s.get_dof_pos())[:, [int(s.get_joint_dof_pos_indices("FL_calf")[0])]],
    ),
    (
        "quadruped",
        "FL_calf_vel",
        "jointvel",
        lambda s: to_np(s.get_dof_vel())[:, [int(s.get_joint_dof_vel_indices("FL_calf")[0])]],
    ),
]


@pytest.mark.parametrize("model,sensor,stype,expected", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_sensor_reading_matches_state(
    make_sim: Callable[..., Any],
    require: Callable[..., None],
    model: str,
    sensor: str,
    stype: str,
    expected: Callable[[Any], np.ndarray],
) -> None:
    """Clause: sensors — each core sensor type reads MuJoCo's quantity, in MuJoCo's frame (gyro/velocimeter: sensor frame; frame*: world), at the current state."""
    require("sensor_types", stype)
    sim = make_sim(model, 3)
    for seed in (0, 1):
        _random_state(sim, seed)
        got = to_np(sim.get_sensor_data(sensor))
        want = expected(sim)
        assert got.shape == want.shape, f"{sensor}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-5, err_msg=f"{model} sensor {sensor} ({stype})")


@pytest.mark.parametrize("model,sensor,site", [("arm7", "ee_quat", "ee_site"), ("quadruped", "imu_quat", "imu")])
def test_framequat_is_site_orientation(
    make_sim: Callable[..., Any], require: Callable[..., None], model: str, sensor: str, site: str
) -> None:
    """Clause: sensors — framequat of a site is the site's world orientation, wxyz, unit norm."""
    require("sensor_types", "framequat")
    sim = make_sim(model, 3)
    _random_state(sim, 7)
    got = to_np(sim.get_sensor_data(sensor))
    want = to_np(sim.get_site_quat_w(sim.get_site_ids(site)))[:, 0]
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)
    assert quat_distance(got, want).max() < 1e-5, f"{sensor} differs from the site orientation"


def test_sensors_follow_a_step(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: sensors — after step, every sensor reads the new state, as a backend set to that state by set_state reads it (no substep lag)."""
    require("sensor_types", "gyro")
    sim, ref = make_sim("quadruped", 2), make_sim("quadruped", 2)
    sim.set_state(None, np.tile(to_np(sim.get_keyframe_qpos("stand")), (2, 1)))
    rng = np.random.default_rng(3)
    lo, hi = to_np(sim.get_actuator_ctrl_range()).T
    declared = [
        n for n in sim.sensor_names if sim.info.sensor_type[sim.sensor_names.index(n)] in sim.capabilities.sensor_types
    ]
    for _ in range(3):
        sim.step(rng.uniform(lo, hi, size=(2, sim.num_actuators)), nsteps=2)
        ref.set_state(None, to_np(sim.get_qpos()), to_np(sim.get_qvel()))
        for name in declared:
            np.testing.assert_allclose(
                to_np(sim.get_sensor_data(name)),
                to_np(ref.get_sensor_data(name)),
                atol=1e-4,
                rtol=1e-4,
                err_msg=f"sensor {name} after step",
            )
